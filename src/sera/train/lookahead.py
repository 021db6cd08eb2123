"""Sampling the next round while the learner updates on this one (`steps.max_offpolicy_versions`).

With `max_offpolicy_versions: 0` (the paper's setting for SERA) every round is sampled by the
policy version it trains. With N ≥ 1 the loop starts round s+1 in a background thread right
before round s's update, with the weights the sampler serves then (version v), and waits for it
to finish before the sync to v+1 (a sync needs an idle sampler). Round s+1 then trains at v+1:
one version behind, which the CISPO ratio against the sampler's log-probabilities accounts for.

Only one round is ever sampled ahead, so the lag is at most 1 whatever N ≥ 1 allows. A round is
sampled ahead only when its stage cannot change (`stage_at(v) == stage_at(v + 1)`, so a
multi-stage schedule stays on-policy at its stage boundaries) and only for a sampler that does
not share the learner's weights. When the loop comes to that step, the round is admitted
(`Lookahead.take`) only if it was sampled for this step, cursor and stage, at most N versions
ago; otherwise it is dropped (counted) and the round is sampled again. A round still ahead when
the run stops is dropped: the checkpoint's cursor does not include it, so a resumed run samples
it again (with the weights it has then).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sera.train.schedule import ScheduleExhausted, StageSchedule

_R = TypeVar("_R")


@dataclass(frozen=True)
class AheadRound(Generic[_R]):
    """A round being sampled ahead, and what it was sampled for."""

    step: int
    """The step (round index) it is for."""
    cursor: int
    """The task cursor it started from."""
    stage: str
    """The stage its trees belong to."""
    version: int
    """The policy version that samples it."""
    result: Future[_R]
    """The sampling's outcome (its exception, if sampling failed)."""


class Lookahead(Generic[_R]):
    """At most one round sampled ahead in a background thread (module docstring)."""

    def __init__(self, max_versions: int) -> None:
        """`max_versions`: the oldest a round may be at its update, in policy versions (≥ 1)."""
        if max_versions < 1:
            raise ValueError(f"a lookahead needs max_offpolicy_versions >= 1, got {max_versions}")
        self.max_versions = max_versions
        self.pending: AheadRound[_R] | None = None
        self.dropped = 0
        """Rounds sampled ahead and then not admitted (the stop included)."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sera-lookahead")

    def start(self, step: int, cursor: int, stage: str, version: int, sample: Callable[[], _R]) -> None:
        """Start sampling round `step` (from `cursor`, at `stage`, with `version`'s weights)."""
        if self.pending is not None:
            raise RuntimeError(f"round {self.pending.step} is still ahead; one round at a time")
        self.pending = AheadRound(step, cursor, stage, version, self._pool.submit(sample))

    def wait(self) -> None:
        """Block until the round ahead is sampled (or failed); its outcome stays pending."""
        if self.pending is not None:
            self.pending.result.exception()

    def take(self, step: int, cursor: int, stage: str, version: int) -> tuple[_R, int] | None:
        """The round ahead and the version that sampled it, if it is admitted for round `step`
        at `cursor` and `stage` trained at `version`; None when there is none or it was dropped.
        An admitted round's sampling failure is raised here, as if it had been sampled now."""
        ahead, self.pending = self.pending, None
        if ahead is None:
            return None
        ahead.result.exception()  # done either way: the caller samples next
        admitted = (ahead.step, ahead.cursor, ahead.stage) == (step, cursor, stage) \
            and 0 <= version - ahead.version <= self.max_versions
        if not admitted:
            self.dropped += 1
            return None
        return ahead.result.result(), ahead.version

    def drop(self) -> None:
        """Wait for the round ahead, if any, and drop it (the run stops; failures are ignored)."""
        ahead, self.pending = self.pending, None
        if ahead is not None:
            ahead.result.exception()
            self.dropped += 1

    def close(self) -> None:
        """Drop the round ahead and stop the thread."""
        self.drop()
        self._pool.shutdown(wait=True)


def may_sample_ahead(schedule: StageSchedule, version: int, max_steps: int) -> bool:
    """Whether the round after one trained at `version` may be sampled during its update: it will
    run (`version + 1 < max_steps`) and has `version`'s stage whether or not the update lands."""
    if version + 1 >= max_steps:
        return False
    try:
        return schedule.stage_at(version + 1) == schedule.stage_at(version)
    except ScheduleExhausted:
        return False


def metrics(lookahead: Lookahead[Any] | None, ahead: bool, lag: int) -> dict[str, Any]:
    """The step's off-policy fields: whether its round was sampled ahead, the versions between
    its sampling and its update, and the rounds dropped so far."""
    return {"offpolicy/ahead": int(ahead), "offpolicy/lag": lag,
            "offpolicy/dropped_rounds": lookahead.dropped if lookahead is not None else 0}


__all__ = ["AheadRound", "Lookahead", "may_sample_ahead", "metrics"]
