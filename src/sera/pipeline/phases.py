"""The main job's phases: what each one runs, where its output goes, and when it is complete.

| phase | folder | runs | complete when |
|---|---|---|---|
| `eval_base` | `eval_base/` | the config's model on the fixed set (`sera.pipeline.evaluation`) | `summary.json` |
| `sft` | `sft/` | `run_sft` (`sera sft`, at `sft.lr`); resumed from its checkpoint | `checkpoints/latest` |
| `eval_sft` | `eval_sft/` | the SFT run's newest checkpoint on the fixed set | `summary.json` |
| `rl` | `rl/` | `run_train(init_from=sft/, deadline=...)`; resumed from its checkpoint | `checkpoints/latest` |
| `eval_rl` | `eval_rl/` | the RL run's newest checkpoint on the fixed set | `summary.json` |

Each function returns the `detail` that `pipeline.json` keeps, or raises (`PhaseFailed`, or
`PhaseInterrupted` when a signal stopped SFT or RL after its checkpoint).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sera.pipeline.evaluation import run_evaluation
from sera.pipeline.record import PhaseInterrupted
from sera.checkpoints.store import LATEST
from sera.train.config import TrainConfig, load_config, validate_config
from sera.train.run_dir import CKPT_DIR, CONFIG_FILE

NO_SIGNAL = "no_signal"
"""RL's `stopped_by` when every step in a row was skipped (`steps.max_consecutive_skips`)."""

PHASES: tuple[str, ...] = ("eval_base", "sft", "eval_sft", "rl", "eval_rl")
"""The phases in the order they run."""
EVAL_PHASES = frozenset({"eval_base", "eval_sft", "eval_rl"})
"""The evaluations of the fixed set."""
DEPENDS_ON: dict[str, str] = {"eval_sft": "sft", "rl": "sft", "eval_rl": "rl"}
"""What each phase is made from (its output is stale once that phase is redone)."""
LABELS: dict[str, str] = {"eval_base": "before SFT", "eval_sft": "after SFT", "eval_rl": "after RL"}
"""How the report names each evaluation."""


def finished(folder: Path, kind: str) -> bool:
    """`folder` holds a finished output of `kind`: `eval` (its `summary.json`) or `train` (a
    `sera sft` / `sera train` run with a checkpoint: `checkpoints/latest`), the files written last."""
    if kind not in ("eval", "train"):
        raise ValueError(f"kind must be 'eval' or 'train', got {kind!r}")
    return (folder / "summary.json").is_file() if kind == "eval" else (folder / CKPT_DIR / LATEST).is_file()


def output_present(out: Path, name: str) -> bool:
    """The phase's output is on disk."""
    return finished(out / name, "eval" if name in EVAL_PHASES else "train")


def dependents(name: str) -> list[str]:
    """Every phase made, directly or not, from `name`."""
    direct = [p for p, source in DEPENDS_ON.items() if source == name]
    return direct + [d for p in direct for d in dependents(p)]


def eval_work(cfg: TrainConfig, folder: Path, weights: Path | None, samples: int | None = None,
              log: Callable[[str], None] = lambda _line: None) -> dict[str, Any]:
    """An evaluation phase: `weights` None for the config's base model; `samples` rollouts per
    task (None: `pipeline.eval_samples`); `log` hears a fallback from vLLM to in-process sampling."""
    _, detail = run_evaluation(cfg, folder, weights, samples, log)
    return detail


def sft_work(cfg: TrainConfig, folder: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """The SFT phase: a fresh run, or the unfinished one in `folder` resumed from its newest
    checkpoint (a start that died before writing its config is removed). A signal that stopped it
    after its checkpoint is `PhaseInterrupted`."""
    from sera.train.sft import run_sft

    resume = (folder / CONFIG_FILE).is_file()
    if folder.exists() and not resume:
        shutil.rmtree(folder)
    if resume:
        log(f"sft: resuming the unfinished run in {folder}")
    result = run_sft(resume_config(folder, cfg) if resume else cfg, folder, resume=resume, log=log)
    detail = {"steps": result.steps, "nll_before": result.nll_before, "nll_after": result.nll_after,
              "train_datums": result.train_datums, "val_datums": result.val_datums,
              "checkpoint": str(result.checkpoint), "resumed": resume, "stopped_by": result.stopped_by}
    if result.stopped_by is not None:
        raise PhaseInterrupted(result.stopped_by, detail)
    return detail


def rl_work(cfg: TrainConfig, folder: Path, init: Path | None, deadline: float | None,
            log: Callable[[str], None]) -> dict[str, Any]:
    """The RL phase: a fresh run from `init` (None: the base model), or the run in `folder`
    resumed from its newest checkpoint. A signal that stopped the loop is `PhaseInterrupted`.
    A run stopped for lack of a learning signal (`NoLearningSignal`: every step skipped, e.g. a
    policy that never succeeds) is an outcome, not a failure: `stopped_by` "no_signal" and the
    loop's message as `note`; its checkpoint is what the next evaluation measures."""
    from sera.train.loop import NoLearningSignal, run_train

    resume = (folder / CONFIG_FILE).is_file()
    if folder.exists() and not resume:
        shutil.rmtree(folder)  # a start that died before writing its config holds nothing to keep
    run_cfg = resume_config(folder, cfg) if resume else cfg
    try:
        result = run_train(run_cfg, folder, resume=resume, init_from=None if resume else init, deadline=deadline, log=log)
    except NoLearningSignal as exc:
        log(f"rl: {exc}")
        return {"steps": exc.steps, "updates": exc.version, "stopped_by": NO_SIGNAL, "resumed": resume, "note": str(exc)}
    detail = {"steps": result.steps, "updates": result.version, "stopped_by": result.stopped_by, "resumed": resume}
    if result.stopped_by not in (None, "deadline"):
        raise PhaseInterrupted(result.stopped_by, detail)
    return detail


def resume_config(folder: Path, cfg: TrainConfig) -> TrainConfig:
    """`cfg` with the `pipeline` section the run in `folder` was started with (the budget may
    change between runs of the job; `sera train --resume` would refuse it as a change)."""
    saved = load_config(folder / CONFIG_FILE)
    data = cfg.model_dump(mode="json")
    data["pipeline"] = saved.pipeline.model_dump(mode="json")
    return validate_config(data, source=str(folder / CONFIG_FILE))
