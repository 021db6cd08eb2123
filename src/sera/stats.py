"""The statistics every report shows, computed in one place: `sera report`, the pipeline report
and `sera eval` summaries all read them from here.

- `Rate`: k of n with its Wilson score interval. The Wilson interval (Wilson 1927) keeps its
  coverage near the nominal level for small n and for rates at 0 or 1, where the normal
  approximation collapses to a zero-width interval: 0/4 solved is "0-49% at 95%", not "0%".
- `PairedChange`: two evaluations of the same tasks, the exact (McNemar) sign test.
- `Stat`: mean ± sample std of one quantity over repeated runs (seeds).
- The headline rule per environment (`HEADLINE_WEIGHTS`, `headline_weights`, `weighted_rate`)
  and the order of difficulty bands (`DIFFICULTY_ORDER`, `band_key`).

How a comparison is put in words is `sera.reports.wording`'s job, not this module's.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, fields
from typing import Any

DIFFICULTY_ORDER = ("easy", "medium", "hard", "extreme")
"""Difficulty bands, easiest first; tables list bands in this order, unknown ones after, by name."""

HEADLINE_WEIGHTS: dict[str, tuple[str, dict[str, int]]] = {
    "textcraft-synth": ("task-weighted", {"easy": 147, "medium": 213, "hard": 136, "extreme": 136}),
    "textworld-sync": ("four-band macro average", {band: 1 for band in DIFFICULTY_ORDER}),
}
"""Environment -> (name of the rule, weight of each difficulty band in the headline), sera-spec
§8.2: TextCraft-Synth weights its bands by the 632 validation tasks' mix (147/213/136/136, so on
the full set the headline is exactly successes / tasks); TextWorld-Sync is the plain mean of its
four bands (350 test tasks each)."""

Z95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of `k` successes in `n` trials, `(low, high)` in [0, 1].
    ValueError for n < 1 or k outside [0, n]."""
    if n < 1:
        raise ValueError(f"a Wilson interval needs n >= 1 trials, got n={n}")
    if not 0 <= k <= n:
        raise ValueError(f"successes must be in [0, n], got k={k}, n={n}")
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At k = 0 or k = n the bound is exactly 0 or 1; rounding must not push it past.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Rate:
    """`k` of `n` with its Wilson 95% interval (the interval is None when n = 0)."""

    k: int
    """Successes (or whatever is counted)."""
    n: int
    """Trials."""
    low: float | None
    """Lower end of the 95% interval; None when n = 0."""
    high: float | None
    """Upper end of the 95% interval; None when n = 0."""

    @classmethod
    def of(cls, k: int, n: int) -> Rate:
        """The rate and its interval (n = 0 gives no interval)."""
        if n == 0:
            if k:
                raise ValueError(f"successes must be in [0, n], got k={k}, n=0")
            return cls(k=0, n=0, low=None, high=None)
        low, high = wilson_interval(k, n)
        return cls(k=k, n=n, low=low, high=high)

    @property
    def share(self) -> float | None:
        """k / n; None when n = 0."""
        return self.k / self.n if self.n else None

    def overlaps(self, other: Rate) -> bool:
        """True when the two 95% intervals share a point (ValueError if either has none)."""
        if self.low is None or self.high is None or other.low is None or other.high is None:
            raise ValueError("a rate over 0 trials has no interval to compare")
        return self.low <= other.high and other.low <= self.high

    def to_json(self) -> dict[str, float | int | None]:
        """`{k, n, share, low, high}`."""
        return {"k": self.k, "n": self.n, "share": self.share, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class PairedChange:
    """Two evaluations of the same tasks, task by task: the exact (McNemar) sign test.

    Only discordant tasks carry evidence: under "no change" each is equally likely to be a gain or
    a loss, so the two-sided p-value is that of the binomial(gained + lost, 1/2) count being at
    least as lopsided. It can separate two rates whose Wilson intervals overlap (e.g. 18/32 and
    26/32 with 8 gains and 0 losses: p = 0.008) because it uses the pairing the intervals ignore.
    """

    gained: int
    """Tasks failed before and solved after."""
    lost: int
    """Tasks solved before and failed after."""
    paired: int
    """Tasks with a model result in both evaluations."""

    @classmethod
    def of(cls, before: dict[str, bool], after: dict[str, bool]) -> PairedChange:
        """Compare outcomes by task id (tasks missing from either side are left out)."""
        common = before.keys() & after.keys()
        gained = sum(1 for t in common if after[t] and not before[t])
        lost = sum(1 for t in common if before[t] and not after[t])
        return cls(gained=gained, lost=lost, paired=len(common))

    @property
    def p_value(self) -> float:
        """Two-sided exact p-value (1.0 when no task changed)."""
        n, low = self.gained + self.lost, min(self.gained, self.lost)
        if n == 0:
            return 1.0
        tail = sum(math.comb(n, i) for i in range(low + 1)) / 2 ** n
        return min(1.0, 2 * tail)

    def to_json(self) -> dict[str, float | int]:
        """`{gained, lost, paired, p_value}`."""
        return {"gained": self.gained, "lost": self.lost, "paired": self.paired, "p_value": self.p_value}


@dataclass(frozen=True)
class Stat:
    """Mean ± sample standard deviation of one quantity over repeated runs (seeds)."""

    mean: float | None
    """Mean over runs; None with no value."""
    std: float | None
    """Sample standard deviation (n − 1); None with fewer than two values (one run has no spread
    to show, and 0 would claim it was measured)."""
    n: int
    """Number of runs."""
    values: tuple[float, ...]
    """The per-run values, in run (seed) order."""
    tasks: int | None = None
    """Rollouts behind each run's rate (the largest, if runs differ), where the quantity is a rate
    over rollouts and the caller records it (`sera eval --runs`); None otherwise."""

    @classmethod
    def of(cls, values: list[float], tasks: int | None = None) -> Stat:
        """The statistic of `values`."""
        return cls(
            mean=statistics.fmean(values) if values else None,
            std=statistics.stdev(values) if len(values) > 1 else None,
            n=len(values), values=tuple(values), tasks=tasks,
        )

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON values; `tasks` only where recorded."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.tasks is None:
            del out["tasks"]
        out["values"] = list(self.values)
        return out


def headline_weights(env: str, bands: list[str]) -> dict[str, int] | None:
    """The band weights of `env`'s headline over `bands` (in that order); None when the
    environment has no rule or a band falls outside it: the headline is then the pooled rate."""
    _, weights = HEADLINE_WEIGHTS.get(env, ("pooled", {}))
    if not bands or any(band not in weights for band in bands):
        return None
    return {band: weights[band] for band in bands}


def weighted_rate(rates: dict[str, float], weights: dict[str, int]) -> float:
    """Σ w_b · rate_b / Σ w_b over the bands of `rates` (each must have a weight)."""
    return sum(weights[b] * r for b, r in rates.items()) / sum(weights[b] for b in rates)


def band_key(band: str) -> tuple[int, str]:
    """Sort key of a difficulty band: `DIFFICULTY_ORDER` first, other names after, alphabetically."""
    return (DIFFICULTY_ORDER.index(band) if band in DIFFICULTY_ORDER else len(DIFFICULTY_ORDER), band)
