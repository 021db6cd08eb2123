"""The job's time budget and RL's share of it.

The budget (`pipeline.budget_minutes`) counts from the start of this run of the job (a rerun
that resumes gets a fresh budget for the work left). RL is the only phase that can stop early,
so it gets what the others leave: its deadline is the budget's end minus an estimate of the
final evaluation (the measured wall time of the evaluation after SFT, or of the base one without
SFT, times `pipeline.final_eval_margin`) minus a fixed reserve for the report. The loop
(`run_train(deadline=...)`) starts no step past it, nor one that its mean step time says would
end past it; the first step's length is unknown until measured, so the first step can overrun.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

REPORT_RESERVE_S = 30.0
"""Seconds kept for writing the report and the plot."""


@dataclass(frozen=True)
class Budget:
    """The wall time of one run of the job."""

    start: float
    """`time.monotonic()` at the job's start."""
    seconds: float
    """Length of the budget."""

    @property
    def end(self) -> float:
        """The monotonic instant the budget runs out."""
        return self.start + self.seconds

    def used(self, now: float | None = None) -> float:
        """Seconds since the start."""
        return (time.monotonic() if now is None else now) - self.start

    def rl_deadline(self, final_eval_s: float, margin: float) -> float:
        """The monotonic instant RL must stop by: the end, less `final_eval_s × margin` and the
        report's reserve."""
        return self.end - final_eval_s * margin - REPORT_RESERVE_S
