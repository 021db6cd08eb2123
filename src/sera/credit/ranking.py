"""Rubric-writer rewards from one fork group's scored, labelled branches (§5.2, §5.5).

Every branch of a group was scored with the group's one frozen rubric (`scores`) and labelled
by a verifier or judge (`labels`). A good rubric puts verified successes above failures. Items
whose score or label is None are invalid and left out; a group with fewer than two valid items,
or without both a success and a failure, carries no supervision and gets None (skipped).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RankingDiagnostics:
    """How well one group's scores separate successes from failures (§5.2 step 5)."""

    pairs: int
    """Number of (success, failure) pairs."""
    pairwise_accuracy: float
    """Fraction of pairs where the success scored strictly higher (gap > 0)."""
    margin_satisfaction: float
    """Fraction of pairs whose gap reaches the margin (gap >= margin)."""
    mean_gap: float
    """Mean of `s_success - s_failure` over pairs."""
    mean_hinge: float
    """Mean of `max(0, margin - gap)` over pairs (the negated ranking reward)."""


def _pair_gaps(
    scores: Sequence[float | None], labels: Sequence[bool | None], margin: float
) -> list[float] | None:
    """`s_i - s_j` for every valid success i and valid failure j, or None (no supervision)."""
    if len(scores) != len(labels):
        raise ValueError(f"scores has {len(scores)} items but labels has {len(labels)}")
    if not math.isfinite(margin) or margin < 0:
        raise ValueError(f"margin must be finite and >= 0, got {margin!r}")
    successes: list[float] = []
    failures: list[float] = []
    for index, (score, label) in enumerate(zip(scores, labels)):
        if score is not None and not math.isfinite(score):
            raise ValueError(f"scores[{index}] must be finite or None, got {score!r}")
        if label is not None and label not in (True, False):
            raise ValueError(f"labels[{index}] must be a bool or None, got {label!r}")
        if score is None or label is None:
            continue
        (successes if label else failures).append(float(score))
    if not successes or not failures:  # implies the spec's "fewer than 2 valid items" rule
        return None
    return [s_i - s_j for s_i in successes for s_j in failures]


def ranking_reward(
    scores: Sequence[float | None], labels: Sequence[bool | None], margin: float = 0.2
) -> float | None:
    """Negative mean hinge over (success, failure) pairs (§5.2 step 5).

    `R_g = - mean_{i ∈ P, j ∈ N} max(0, margin - (s_i - s_j))`; in [-(1 + margin), 0] for scores
    in [0, 1], and 0 iff every success outscores every failure by at least the margin.
    None when fewer than 2 valid items, or no success, or no failure.
    """
    gaps = _pair_gaps(scores, labels, margin)
    if gaps is None:
        return None
    return 0.0 - sum(max(0.0, margin - gap) for gap in gaps) / len(gaps)


def rank_dispersion_reward(
    scores: Sequence[float | None],
    labels: Sequence[bool | None],
    margin: float = 0.2,
    order_weight: float = 0.5,
    dispersion_weight: float = 0.5,
    dispersion_scale: float = 2.0,
) -> float | None:
    """"Rank + Disc." ablation reward (§5.5).

    `R_order = mean_{i ∈ P, j ∈ N} clip((s_i - s_j) / margin, 0, 1)`,
    `R_disc = clip(dispersion_scale · pstdev(valid scores), 0, 1)`,
    `R_g = order_weight · R_order + dispersion_weight · R_disc`. Same None rule as
    `ranking_reward`; margin must be > 0 here (it divides).
    """
    for name, value in (("order_weight", order_weight), ("dispersion_weight", dispersion_weight),
                        ("dispersion_scale", dispersion_scale)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    if margin == 0:
        raise ValueError("margin must be > 0 for rank_dispersion_reward (it divides the gap)")
    gaps = _pair_gaps(scores, labels, margin)
    if gaps is None:
        return None
    r_order = sum(min(1.0, max(0.0, gap / margin)) for gap in gaps) / len(gaps)
    valid = [float(s) for s, lab in zip(scores, labels) if s is not None and lab is not None]
    r_disc = min(1.0, max(0.0, dispersion_scale * statistics.pstdev(valid)))
    return order_weight * r_order + dispersion_weight * r_disc


def ranking_diagnostics(
    scores: Sequence[float | None], labels: Sequence[bool | None], margin: float = 0.2
) -> RankingDiagnostics | None:
    """Pairwise accuracy, margin satisfaction, mean gap and mean hinge (§5.2 step 5); None
    under the same rule as `ranking_reward`. Comparisons are exact (no float tolerance)."""
    gaps = _pair_gaps(scores, labels, margin)
    if gaps is None:
        return None
    n = len(gaps)
    return RankingDiagnostics(
        pairs=n,
        pairwise_accuracy=sum(gap > 0 for gap in gaps) / n,
        margin_satisfaction=sum(gap >= margin for gap in gaps) / n,
        mean_gap=sum(gaps) / n,
        mean_hinge=sum(max(0.0, margin - gap) for gap in gaps) / n,
    )
