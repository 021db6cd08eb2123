"""Mean ± std over repeated runs (`--runs N`), and each environment's headline number.

**Headline.** The paper reports one number per environment (sera-spec §8.2, §10), by the rule
in `sera.stats.HEADLINE_WEIGHTS`: TextCraft-Synth's task-weighted rate, TextWorld-Sync's
four-band macro average; on a subset (`--limit`, `--difficulty`) the bands present are
reweighted to the full set's mix. Bands outside the rule (a task file with other labels) make
the headline the pooled rate. `overall` is always the pooled rate of the rollouts evaluated.

**Spread.** Each number is a `sera.stats.Stat` over the runs' own rates: mean and sample
standard deviation (n - 1; null for one run), the spread the paper's "three-run mean" has.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sera.eval.summary import EvalSummary, GroupResult
from sera.stats import HEADLINE_WEIGHTS, Stat, headline_weights, weighted_rate
from sera.types import Record


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


def headline_rule(env: str, bands: list[str]) -> str:
    """The headline rule in words, with its weights (`sera.stats.headline_weights`)."""
    weights = headline_weights(env, bands)
    if weights is None:
        return "pooled (successes / rollouts)"
    described = ", ".join(f"{band} {w}" for band, w in weights.items())
    return f"{HEADLINE_WEIGHTS[env][0]} by difficulty ({described})"


def headline(summary: EvalSummary) -> float:
    """A run's headline rate (module docstring)."""
    weights = headline_weights(summary.env, list(summary.by_difficulty))
    if weights is None:
        return summary.overall.success_rate
    return weighted_rate({band: group.success_rate for band, group in summary.by_difficulty.items()}, weights)


def aggregate_runs(summaries: list[EvalSummary], dirs: list[str], seeds: list[int]) -> RunsSummary:
    """Mean ± std over runs of the same evaluation (same environment, tasks and settings but the seed)."""
    if not summaries:
        raise ValueError("no runs to aggregate")
    first = summaries[0]
    bands = list(dict.fromkeys(b for s in summaries for b in s.by_difficulty))
    families = list(dict.fromkeys(f for s in summaries for f in s.by_family))
    rule = headline_rule(first.env, bands)
    return RunsSummary(
        env=first.env, split=first.split, policy=first.policy, samples=first.samples,
        runs=[
            RunEntry(dir=d, seed=seed, overall=s.overall.success_rate, headline=headline(s), errors=s.overall.errors,
                     infra_failures=s.infra_failures, judge_errors=s.judge_errors, wall_time_s=s.wall_time_s)
            for s, d, seed in zip(summaries, dirs, seeds, strict=True)
        ],
        headline_rule=rule,
        headline=Stat.of([headline(s) for s in summaries], tasks=max(s.overall.tasks for s in summaries)),
        overall=_groups([s.overall for s in summaries]),
        by_difficulty={b: _groups([s.by_difficulty.get(b) for s in summaries]) for b in bands},
        by_family={f: _groups([s.by_family.get(f) for s in summaries]) for f in families},
        errors=Stat.of([float(s.overall.errors) for s in summaries], tasks=max(s.overall.tasks for s in summaries)),
        infra_failures=Stat.of([float(s.infra_failures) for s in summaries], tasks=max(s.overall.tasks for s in summaries)),
        judge_errors=Stat.of([float(s.judge_errors) for s in summaries], tasks=max(s.overall.tasks for s in summaries)),
    )


def _groups(groups: list[GroupResult | None]) -> Stat:
    """A group's rate over runs; a run without the group counts 0 (it evaluated none of it)."""
    return Stat.of([g.success_rate if g else 0.0 for g in groups], tasks=max((g.tasks for g in groups if g), default=0))

