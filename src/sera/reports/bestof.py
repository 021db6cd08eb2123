"""Table 4: each best-of-N row against the N = 1 row of the same policy, with the compute spent.

The N = 1 row paired with a best-of row is the one of the same table, policy and model whose
settings differ from it in the fewest keys (best-of runs may record selector or fork-cap
settings a plain run does not have); the keys that differ are listed, so a pairing is never
silent. Compute is per rollout, from the usage counters, mean over the row's runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sera.reports.aggregate import EvalTable, Row
from sera.stats import Stat

COMPUTE: dict[str, tuple[str, ...]] = {
    "model calls": ("policy_calls", "rubric_calls", "score_calls"),
    "tokens": ("prompt_tokens", "completion_tokens", "rubric_completion_tokens", "score_completion_tokens"),
    "world clones": ("world_clones",),
    "best-of candidates": ("best_of_candidates",),
    "judge calls": ("judge_calls",),
}
"""Compute columns and the counters each sums."""


@dataclass(frozen=True)
class BestOfComparison:
    """One best-of-N row beside its N = 1 baseline."""

    env: str
    """Environment name."""
    source: str
    """Split or task file."""
    label: str
    """The best-of row's label."""
    n: int
    """Candidates per delegation."""
    baseline: str | None
    """The N = 1 row's label; None when the table has none for this policy."""
    success: Stat
    """Task-weighted success of the best-of row."""
    baseline_success: Stat | None
    """The same for the N = 1 row."""
    headline: Stat | None
    """The environment's headline rate of the best-of row (`sera.stats.HEADLINE_WEIGHTS`), if it has one."""
    baseline_headline: Stat | None
    """The same for the N = 1 row."""
    differs: tuple[str, ...]
    """Settings (besides best_of) in which the two rows differ."""
    compute: dict[str, tuple[float | None, float]]
    """Per rollout: (N = 1, best-of N) for each `COMPUTE` column."""
    selection: dict[str, float]
    """Numbers of the summaries' own best-of reports (`extra_calls_ratio`, `candidates`, ...),
    mean over the row's runs; empty when the summaries have none."""


def compare_best_of(tables: list[EvalTable]) -> list[BestOfComparison]:
    """A comparison for every best-of row (N > 1) of `tables`."""
    out = []
    for table in tables:
        plain = [r for r in table.rows if r.best_of == 1]
        for row in (r for r in table.rows if r.best_of > 1):
            candidates = [p for p in plain if (p.policy, p.model) == (row.policy, row.model)]
            base = min(candidates, key=lambda p: len(_differs(p, row)), default=None)
            out.append(BestOfComparison(
                env=table.env, source=table.source, label=row.label, n=row.best_of,
                baseline=base.label if base else None, success=row.overall,
                baseline_success=base.overall if base else None, headline=row.headline,
                baseline_headline=base.headline if base else None,
                differs=tuple(_differs(base, row)) if base else (),
                compute={name: (per_rollout(base, names) if base else None, per_rollout(row, names)) for name, names in COMPUTE.items()},
                selection=_selection(row),
            ))
    return out


def per_rollout(row: Row, names: tuple[str, ...]) -> float:
    """Mean over the row's runs of the summed counters `names`, per rollout."""
    total = sum(row.counters[n].mean or 0.0 for n in names if n in row.counters)
    return total / row.tasks if row.tasks else 0.0


def _differs(a: Row, b: Row) -> list[str]:
    keys = {k for k in a.settings.keys() | b.settings.keys() if k != "best_of" and not k.startswith("best_of.")}
    return sorted(k for k in keys if a.settings.get(k) != b.settings.get(k))


def _selection(row: Row) -> dict[str, float]:
    """Top-level numbers of the recorded best-of reports, mean over the row's runs."""
    records = [record for run in row.runs for record in run.best_of]
    names = sorted({k for r in records for k, v in r.items() if _number(v)})
    return {n: sum(float(r.get(n, 0)) for r in records) / len(records) for n in names}


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
