"""What the report reads off a training run: wall clock by stage (Table 7), learning curves.

Seconds per stage are the sums over the steps of that `stage` of every `time/<part>` metric;
the stage's total is the sum of `time/step` (which covers the whole round, checkpoint included),
or of the parts when a line has no `time/step`. Parts are read by prefix, so new ones show up.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sera.reports.records import TrainRun

TIME_PREFIX = "time/"
"""Prefix of the wall-clock metrics."""
TOTAL_PART = "step"
"""The `time/` part that is the whole step."""


@dataclass(frozen=True)
class StageTime:
    """Wall clock of one stage of a training run."""

    stage: str
    """Stage name (`execution`, `delegation`, `rubric`, ...)."""
    steps: int
    """Rounds of this stage, trained or skipped."""
    trained: int
    """Rounds that made an optimizer update."""
    seconds: float
    """Total seconds (sum of `time/step`)."""
    parts: dict[str, float]
    """Seconds per `time/<part>` (step excluded), summed over the stage's rounds."""


@dataclass(frozen=True)
class Curve:
    """Per-step series of one training run, for the learning-curve plot."""

    label: str
    """The run's label (method, and seed or folder when needed to tell runs apart)."""
    env: str
    """Environment name (one plot per environment)."""
    steps: tuple[int, ...]
    """Step index of each point."""
    success: tuple[float | None, ...]
    """Root success rate of the step's trees."""
    loss: tuple[float | None, ...]
    """Loss of the update; None on a skipped step."""
    trained: tuple[bool, ...]
    """Whether the step made an update (skipped steps are marked)."""


def stage_times(run: TrainRun) -> list[StageTime]:
    """Seconds by stage, stages in order of first appearance."""
    order: list[str] = []
    steps: Counter[str] = Counter()
    trained: Counter[str] = Counter()
    totals: dict[str, float] = {}
    parts: dict[str, dict[str, float]] = {}
    for record in run.steps:
        stage = str(record.get("stage", "unknown"))
        if stage not in parts:
            order.append(stage)
            parts[stage], totals[stage] = {}, 0.0
        steps[stage] += 1
        trained[stage] += bool(record.get("trained"))
        times = {k[len(TIME_PREFIX):]: float(v) for k, v in record.items() if k.startswith(TIME_PREFIX) and _number(v)}
        for part, seconds in times.items():
            if part != TOTAL_PART:
                parts[stage][part] = parts[stage].get(part, 0.0) + seconds
        totals[stage] += times.get(TOTAL_PART, sum(s for p, s in times.items() if p != TOTAL_PART))
    return [StageTime(stage=s, steps=steps[s], trained=trained[s], seconds=totals[s], parts=dict(sorted(parts[s].items())))
            for s in order]


def curve(run: TrainRun, label: str) -> Curve:
    """The run's per-step series."""
    records = sorted(run.steps, key=lambda r: r["step"])
    return Curve(
        label=label, env=run.env, steps=tuple(r["step"] for r in records),
        success=tuple(_float(r.get("root_success")) for r in records),
        loss=tuple(_float(r.get("loss")) if r.get("trained") else None for r in records),
        trained=tuple(bool(r.get("trained")) for r in records),
    )


def train_labels(runs: list[TrainRun]) -> list[str]:
    """A label per run: the method, with the seed, then the folder, when that is needed to be unique."""
    labels = []
    for run in runs:
        same = [r for r in runs if (r.env, r.method) == (run.env, run.method)]
        label = run.method
        if len(same) > 1:
            label += f" seed={run.seed}"
            if sum(1 for r in same if r.seed == run.seed) > 1:
                label += f" ({run.path.name})"
        labels.append(label)
    return labels


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _float(value: Any) -> float | None:
    return float(value) if _number(value) else None
