"""Counts with Wilson score intervals: what a success rate on n tasks can and cannot tell.

The Wilson interval (Wilson 1927) keeps its coverage near the nominal level for small n and for
rates at 0 or 1, where the normal approximation collapses to a zero-width interval: 0/4 solved is
"0-49% at 95%", not "0%". The report compares two evaluations only through these intervals
(`sera.pipeline.wording`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
