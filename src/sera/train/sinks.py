"""Metric sinks besides `metrics.jsonl`: TensorBoard event files and Weights & Biases.

Every sink takes the same per-step record the loop appends to `metrics.jsonl` and writes its
numeric scalars (`scalars`): nested mappings are flattened with `/`, bools become 0/1, and
None, strings, lists and non-finite numbers are left out (the JSON line keeps them). The x-axis
is the record's round (`step`, trained or skipped); `policy_version` is a scalar of its own.

**Resume.** `sera train --resume` redoes the steps past the checkpoint (`trim_past` drops their
`metrics.jsonl` lines). Give the first redone step as `resume_from`:

- TensorBoard: the writer is opened with `purge_step=resume_from`, so TensorBoard hides every
  event of this log directory at a step >= `resume_from` written before the restart; each chart
  shows one value per step, the redone one. (Without it, TensorBoard would show both the
  interrupted run's and the resumed run's points for those steps.)
- W&B: the run id is kept in `<run_dir>/wandb_run_id` and the resumed process continues the same
  run (`resume="allow"`). W&B's step only increases: online, values logged again for a step it
  already has are dropped with a warning, so the steps between the checkpoint and the crash keep
  the interrupted run's values; offline (`WANDB_MODE=offline`), each process writes its own
  `offline-run-*` folder under `<run_dir>/wandb/`, with the same run id, for `wandb sync`.
  `metrics.jsonl` and TensorBoard are the exact record of the redone steps.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

WANDB_RUN_ID_FILE = "wandb_run_id"
"""The W&B run id of a run directory, so that `--resume` continues the same W&B run."""


class SinkError(RuntimeError):
    """A sink cannot be opened; the message names the config key to change."""


class Sink(Protocol):
    """Where per-step records go."""

    def write(self, step: int, record: Mapping[str, Any]) -> None:
        """Write the numeric scalars of one step's record."""
        ...

    def close(self) -> None:
        """Flush and release the sink."""
        ...


def scalars(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric scalars of `record`, flat: nested mappings joined with `/`, bools as 0/1;
    None, strings, lists, tuples and NaN or infinite numbers are skipped."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(scalars(value, prefix=f"{name}/"))
        elif isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, int | float) and math.isfinite(value):
            out[name] = float(value)
    return out


class TensorBoardSink:
    """Scalars into TensorBoard event files under `log_dir` (`torch.utils.tensorboard`)."""

    def __init__(self, log_dir: str | Path, *, resume_from: int | None = None) -> None:
        """`resume_from`: the first step this process (re)writes; events of the directory at
        steps >= it, from an earlier process, are purged from TensorBoard's view."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # torch raises this when the tensorboard package is missing
            raise SinkError(
                f"logging.tensorboard=true needs the tensorboard package ({exc}); install sera's dependencies "
                "(pip install -e .) or set logging.tensorboard=false"
            ) from None
        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=resume_from)

    def write(self, step: int, record: Mapping[str, Any]) -> None:
        for name, value in scalars(record).items():
            self._writer.add_scalar(name, value, global_step=step)
        self._writer.flush()  # a step the run reported is on disk (one flush per step is cheap)

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Scalars into a Weights & Biases run whose files live under `<run_dir>/wandb/`.

    `wandb` is imported only here (it is not a dependency of sera). `WANDB_MODE=offline` (or
    `disabled`) is honoured as W&B itself reads it; nothing here contacts the network. A fresh
    run (`resume_from=None`) gets a new run id; a resumed one continues the id of the run
    directory.
    """

    def __init__(
        self, project: str, run_dir: str | Path, config: Mapping[str, Any] | None = None, *,
        resume_from: int | None = None, name: str | None = None,
    ) -> None:
        try:
            import wandb
        except ImportError:
            raise SinkError(
                f"logging.wandb_project={project!r} needs the wandb package, which is not installed: "
                "pip install wandb, or set logging.wandb_project=null"
            ) from None
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        id_file = self.run_dir / WANDB_RUN_ID_FILE
        if resume_from is not None and id_file.is_file():
            run_id = id_file.read_text(encoding="utf-8").strip()
        else:
            run_id = secrets.token_hex(8)
            id_file.write_text(run_id + "\n", encoding="utf-8")
        self.run_id = run_id
        """The W&B run id (kept in `<run_dir>/wandb_run_id`)."""
        self.run = wandb.init(  # W&B reads WANDB_MODE itself
            project=project, dir=str(self.run_dir), config=dict(config or {}), id=run_id, name=name,
            resume="allow", settings=wandb.Settings(console="off", silent=True),
        )
        """The `wandb` run."""

    def write(self, step: int, record: Mapping[str, Any]) -> None:
        self.run.log(scalars(record), step=step, commit=True)  # sent now, not held until the next step

    def close(self) -> None:
        self.run.finish()


def open_sinks(
    run_dir: str | Path, *, tensorboard: bool, wandb_project: str | None, config: Mapping[str, Any] | None = None,
    resume_from: int | None = None,
) -> list[Sink]:
    """The sinks `logging.tensorboard` and `logging.wandb_project` ask for: TensorBoard under
    `<run_dir>/tensorboard/`, W&B under `<run_dir>/wandb/`."""
    sinks: list[Sink] = []
    run_dir = Path(run_dir)
    if tensorboard:
        sinks.append(TensorBoardSink(run_dir / "tensorboard", resume_from=resume_from))
    if wandb_project:
        try:
            sinks.append(WandbSink(wandb_project, run_dir, config, resume_from=resume_from))
        except BaseException:
            for sink in sinks:
                sink.close()
            raise
    return sinks
