"""Typed records of what `sera report` read from disk: one evaluation run, one training run, and
one problem (an input that could not be used, named by its file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sera.eval.summary import EvalSummary


@dataclass(frozen=True)
class Problem:
    """An input the report could not use (or used only in part); listed in the report."""

    path: str
    """The file or directory at fault."""
    message: str
    """One line: what is wrong and what the report did about it."""

    def line(self) -> str:
        """`path: message`, as printed."""
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class EvalRun:
    """One evaluation directory (`sera eval --out`): one seed, possibly one shard of a run."""

    path: Path
    """The run directory."""
    env: str
    """Environment name."""
    source: str
    """The split, or the task file's path."""
    policy: str
    """Policy description as the summary records it (`oracle`, `hf:<model>`, ...)."""
    model: str | None
    """Model name or path from `run.json`, when the policy has one."""
    seed: int | None
    """Base seed of the run; runs that differ only in it are repeats."""
    best_of: int
    """Candidates per delegation at test time (`best_of` in run.json / summary.json; absent: 1)."""
    shard: str | None
    """The shard this directory holds, `i/n` (`shard.json`, or a `shard` key of run.json /
    summary.json); None when unsharded."""
    settings: dict[str, Any]
    """Every recorded setting the results depend on, flat (`sampling.temperature`, ...), seed and
    shard left out: two runs are comparable only when these are equal."""
    summary: EvalSummary
    """The results: `summary.json`, or recomputed from the trees when it is missing or unreadable."""
    recomputed: bool = False
    """True when `summary` was recomputed from the trees."""
    task_dirs: frozenset[str] = frozenset()
    """Names of the task folders under `rollouts/` (to find shards that overlap)."""
    best_of_record: dict[str, Any] | None = None
    """The summary's best-of-N report as recorded (groups, candidates, extra compute), if any."""


@dataclass(frozen=True)
class TrainRun:
    """One training directory (`sera train --out`)."""

    path: Path
    """The run directory."""
    env: str
    """Environment name (`environment.name` of `config.yaml`)."""
    method: str
    """Method name (`method.name`), the curve's label."""
    model: str
    """Model name (`model.name`)."""
    seed: int | None
    """The config's seed."""
    config: dict[str, Any]
    """The resolved config, flat (`optimizer.lr`, ...)."""
    steps: tuple[dict[str, Any], ...] = ()
    """The lines of `metrics.jsonl`, in order (empty when the file is missing)."""
    counters: dict[str, int] = field(default_factory=dict)
    """Usage counters summed over the run (external supervision among them)."""
    counters_source: str = "none"
    """Where `counters` came from: `metrics` (counter keys in metrics.jsonl), `trees` (summed over
    `rollouts/step_*/*.json`) or `none`."""
