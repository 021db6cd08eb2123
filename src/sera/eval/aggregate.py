"""Mean ± std over repeated runs (`--runs N`), and each environment's headline number.

**Headline.** The paper reports one number per environment (sera-spec §8.2, §10):

- TextCraft-Synth: the **task-weighted** success rate. Its 632 validation tasks are 147 easy,
  213 medium, 136 hard and 136 extreme, so the headline is `Σ_d w_d · rate_d / Σ_d w_d` with
  w = 147 / 213 / 136 / 136. On the full set this is exactly successes / tasks; on a subset
  (`--limit`, `--difficulty`) it reweights the bands present to the full set's mix.
- TextWorld-Sync: the **four-band macro average**, the plain mean of the band rates (the 1,400
  test tasks are 350 per band, so on the full set it equals successes / tasks too).

Bands outside the table (a task file with other labels) make the headline the pooled rate.
`overall` is always the pooled rate of the rollouts evaluated.

**Spread.** `std` is the sample standard deviation over runs (n - 1 in the denominator; 0 for
one run), of each run's own rate: the spread the paper's "three-run mean" has.
"""

from __future__ import annotations

from statistics import mean, stdev
from typing import Literal

from pydantic import Field

from sera.eval.summary import DIFFICULTY_ORDER, EvalSummary, GroupResult
from sera.types import Record

HEADLINE_WEIGHTS: dict[str, tuple[str, dict[str, int]]] = {
    "textcraft-synth": ("task-weighted", {"easy": 147, "medium": 213, "hard": 136, "extreme": 136}),
    "textworld-sync": ("four-band macro average", {band: 1 for band in DIFFICULTY_ORDER}),
}
"""Environment -> (name of the rule, weight of each difficulty band in the headline)."""


class Stat(Record):
    """One success rate over runs."""

    mean: float
    """Mean over runs."""
    std: float
    """Sample standard deviation over runs (0 for one run)."""
    values: list[float]
    """Each run's rate, in run order."""
    tasks: int
    """Rollouts behind each run's rate (the largest, if runs differ)."""


class RunEntry(Record):
    """One run of a `--runs` evaluation."""

    dir: str
    """Its run directory, relative to `--out` (`runs/r<i>`)."""
    seed: int
    """Its base seed (`--seed` + i)."""
    overall: float
    """Its pooled success rate."""
    headline: float
    """Its headline rate (module docstring)."""
    errors: int
    """Its error rollouts (counted as failures)."""
    wall_time_s: float
    """Wall-clock seconds of the run, summed over its invocations."""
    infra_failures: int = 0
    """Its error rollouts that are the infrastructure's fault (judge errors included)."""
    judge_errors: int = 0
    """Its error rollouts whose external judge failed (among `infra_failures`)."""


class RunsSummary(Record):
    """What `OUT/summary.json` of a `--runs` evaluation holds."""

    kind: Literal["runs"] = "runs"
    """Tells this file from a single run's `EvalSummary`."""
    env: str
    """Environment name."""
    split: str
    """Task split or file."""
    policy: str
    """Policy description."""
    samples: int = 1
    """Rollouts per task in each run."""
    runs: list[RunEntry]
    """The runs, in order."""
    headline_rule: str
    """How the headline is computed, with its weights."""
    headline: Stat
    """The environment's headline rate (task-weighted TextCraft, macro average TextWorld)."""
    overall: Stat
    """Pooled success rate (successes / rollouts)."""
    by_difficulty: dict[str, Stat]
    """Per difficulty band."""
    by_family: dict[str, Stat] = Field(default_factory=dict)
    """Per task family (TextWorld-Sync)."""
    errors: Stat
    """Error rollouts per run (as counts, not rates)."""
    infra_failures: Stat | None = None
    """Infrastructure-failure rollouts per run (counts; judge errors included); None in files
    written before it existed."""
    judge_errors: Stat | None = None
    """Judge-error rollouts per run (counts); None in files written before it existed."""


def headline_rule(env: str, bands: list[str]) -> tuple[str, dict[str, int] | None]:
    """The rule's description, and the band weights (None: the pooled rate is the headline)."""
    name, weights = HEADLINE_WEIGHTS.get(env, ("pooled", {}))
    if not bands or any(band not in weights for band in bands):
        return "pooled (successes / rollouts)", None
    described = ", ".join(f"{band} {weights[band]}" for band in bands)
    return f"{name} by difficulty ({described})", {band: weights[band] for band in bands}


def headline(summary: EvalSummary) -> float:
    """A run's headline rate (module docstring)."""
    _, weights = headline_rule(summary.env, list(summary.by_difficulty))
    if weights is None:
        return summary.overall.success_rate
    total = sum(weights.values())
    return sum(weights[band] * summary.by_difficulty[band].success_rate for band in weights) / total


def aggregate_runs(summaries: list[EvalSummary], dirs: list[str], seeds: list[int]) -> RunsSummary:
    """Mean ± std over runs of the same evaluation (same environment, tasks and settings but the seed)."""
    if not summaries:
        raise ValueError("no runs to aggregate")
    first = summaries[0]
    bands = list(dict.fromkeys(b for s in summaries for b in s.by_difficulty))
    families = list(dict.fromkeys(f for s in summaries for f in s.by_family))
    rule, _ = headline_rule(first.env, bands)
    return RunsSummary(
        env=first.env, split=first.split, policy=first.policy, samples=first.samples,
        runs=[
            RunEntry(dir=d, seed=seed, overall=s.overall.success_rate, headline=headline(s), errors=s.overall.errors,
                     infra_failures=s.infra_failures, judge_errors=s.judge_errors, wall_time_s=s.wall_time_s)
            for s, d, seed in zip(summaries, dirs, seeds, strict=True)
        ],
        headline_rule=rule,
        headline=_stat([headline(s) for s in summaries], max(s.overall.tasks for s in summaries)),
        overall=_groups([s.overall for s in summaries]),
        by_difficulty={b: _groups([s.by_difficulty.get(b) for s in summaries]) for b in bands},
        by_family={f: _groups([s.by_family.get(f) for s in summaries]) for f in families},
        errors=_stat([float(s.overall.errors) for s in summaries], max(s.overall.tasks for s in summaries)),
        infra_failures=_stat([float(s.infra_failures) for s in summaries], max(s.overall.tasks for s in summaries)),
        judge_errors=_stat([float(s.judge_errors) for s in summaries], max(s.overall.tasks for s in summaries)),
    )


def _groups(groups: list[GroupResult | None]) -> Stat:
    """A group's rate over runs; a run without the group counts 0 (it evaluated none of it)."""
    return _stat([g.success_rate if g else 0.0 for g in groups], max((g.tasks for g in groups if g), default=0))


def _stat(values: list[float], tasks: int) -> Stat:
    return Stat(mean=mean(values), std=stdev(values) if len(values) > 1 else 0.0, values=values, tasks=tasks)
