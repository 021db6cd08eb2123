"""Evaluation runs grouped into the rows of Table 1: mean ± std over seeds, per difficulty.

Rules (docs/report.md):
- **Tables** are per (environment, split or task file): runs of different environments or task
  sets are never averaged together.
- **Rows** are per set of recorded settings (policy, model, sampling, budgets, best-of N, and any
  key a newer `run.json` adds) and per task selection (the task count of every band): runs that
  differ in anything but the seed are separate rows, labelled by the settings that differ.
- **Repeats** are the runs of a row with different seeds; each band's rate, the overall rate and
  the headline are computed per run, then mean ± sample std (n − 1) over runs.
- **Shards**: runs of a row with the same seed are parts of one run and are summed, provided
  their tasks are disjoint (an overlapping one is left out, named). Shards in one `shards/`
  folder (`shard.json`) form a shard set: one whose model or other settings differ from the
  rest of its set is left out, named, rather than becoming a partial row of its own.
- **Overall** is the pooled rate (successes / rollouts, all bands). The **headline** is each
  environment's rule (`sera.stats.HEADLINE_WEIGHTS`, the same as `sera eval --runs`):
  TextCraft-Synth task-weighted, TextWorld-Sync the four-band macro average. A band outside the
  rule makes it the pooled rate.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from sera.eval.summary import GroupResult
from sera.reports.records import EvalRun, Problem
from sera.stats import HEADLINE_WEIGHTS, Stat, band_key, headline_weights, weighted_rate

LABEL_KEYS = frozenset({"policy", "model", "best_of"})
"""Settings already in a row's label (policy description, best-of N)."""


@dataclass(frozen=True)
class SeedResult:
    """One seed of a row: one run directory, or the shards of one run summed."""

    seed: int | None
    """The run's base seed."""
    paths: tuple[str, ...]
    """The directories summed (several for a sharded run)."""
    bands: dict[str, GroupResult]
    """Counts per difficulty band."""
    overall: GroupResult
    """Counts over all tasks (task-weighted)."""
    families: dict[str, GroupResult]
    """Counts per task family."""
    counters: dict[str, int]
    """Usage counters summed over the run."""
    wall_time_s: float
    """Wall-clock seconds (summed over shards: machine time, not the slowest shard's)."""
    mean_rollout_s: float
    """Mean seconds of one rollout."""
    infra_failures: int = 0
    """Error rollouts that are the infrastructure's fault (judge errors included), summed over shards."""
    judge_errors: int = 0
    """Error rollouts whose external judge failed, summed over shards."""
    best_of: tuple[dict[str, Any], ...] = ()
    """The summaries' best-of-N reports (one per directory summed), as recorded."""


@dataclass(frozen=True)
class Row:
    """One method (policy, model, settings) of a table: its seeds and their statistics."""

    label: str
    """What the row is: the policy, best-of N, and the settings that set it apart in its table."""
    policy: str
    """Policy description."""
    model: str | None
    """Model name or path."""
    best_of: int
    """Best-of N (1: plain)."""
    settings: dict[str, Any]
    """The settings all its runs share (flat)."""
    runs: tuple[SeedResult, ...]
    """One per seed."""
    bands: dict[str, Stat]
    """Success rate per band."""
    overall: Stat
    """Task-weighted success rate."""
    headline: Stat | None
    """The environment's headline rate (`sera.stats.HEADLINE_WEIGHTS`); None for an environment without a rule."""
    headline_rule: str | None
    """Its rule: `task-weighted`, `four-band macro average`, or `pooled` when a band falls outside the rule."""
    headline_bands: tuple[str, ...]
    """The bands behind the headline (fewer than four on a partial selection)."""
    families: dict[str, Stat]
    """Success rate per task family."""
    counters: dict[str, Stat]
    """Each usage counter's total per run."""
    wall_time: Stat
    """Wall-clock seconds per run."""
    tasks: int
    """Rollouts per run."""
    errors: Stat | None = None
    """Error rollouts per run (counted as failures in the rates)."""
    infra_failures: Stat | None = None
    """Infrastructure-failure rollouts per run (endpoint down, 5xx, timeouts, judge errors, ...)."""
    judge_errors: Stat | None = None
    """Judge-error rollouts per run (among `infra_failures`)."""


@dataclass(frozen=True)
class EvalTable:
    """Table 1 of one (environment, task set)."""

    env: str
    """Environment name."""
    source: str
    """Split or task file."""
    bands: tuple[str, ...]
    """Difficulty bands, in order."""
    families: tuple[str, ...]
    """Task families, in order of appearance."""
    rows: tuple[Row, ...] = ()
    """The methods."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Remarks (rows split by task selection, ...)."""


def build_tables(runs: list[EvalRun]) -> tuple[list[EvalTable], list[Problem]]:
    """Tables of `runs` and the runs left out (overlapping shards, a stray model in a shard set)."""
    problems: list[Problem] = []
    runs = _check_shard_sets(runs, problems)
    groups: dict[tuple[Any, ...], list[EvalRun]] = defaultdict(list)
    for run in runs:
        groups[(run.env, run.source, _frozen(run.settings))].append(run)
    rows_by_table: dict[tuple[str, str], list[Row]] = defaultdict(list)
    notes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (env, source, _), members in groups.items():
        seeds = _by_seed(members, problems)
        by_selection: dict[tuple[Any, ...], list[SeedResult]] = defaultdict(list)
        for result in seeds:
            by_selection[tuple(sorted((b, g.tasks) for b, g in result.bands.items()))].append(result)
        if len(by_selection) > 1:
            notes[(env, source)].append(f"{members[0].policy}: runs over different task selections are separate rows (not averaged)")
        for results in by_selection.values():
            rows_by_table[(env, source)].append(_row(env, members[0], results, tag=len(by_selection) > 1))
    tables = []
    for (env, source), rows in rows_by_table.items():
        rows = _label(rows)
        bands = sorted({b for r in rows for b in r.bands}, key=band_key)
        families = list(dict.fromkeys(f for r in rows for f in r.families))
        tables.append(EvalTable(env=env, source=source, bands=tuple(bands), families=tuple(families),
                                rows=tuple(rows), notes=tuple(notes[(env, source)])))
    return tables, problems


def _check_shard_sets(runs: list[EvalRun], problems: list[Problem]) -> list[EvalRun]:
    """Leave out a shard whose settings (model first) differ from the rest of its shard set."""
    sets: dict[tuple[Any, ...], list[EvalRun]] = defaultdict(list)
    for run in runs:
        if run.shard is not None:
            sets[(str(run.path.parent), run.env, run.source, run.seed, run.shard.rpartition("/")[2])].append(run)
    dropped: set[int] = set()
    for members in sets.values():
        kinds = Counter(_frozen(r.settings) for r in members)
        if len(kinds) < 2:
            _check_complete(members, problems)
            continue
        keep = dict(kinds.most_common(1)[0][0])
        for run in members:
            differs = sorted(k for k in keep.keys() | run.settings.keys() if keep.get(k) != run.settings.get(k))
            if not differs:
                continue
            dropped.add(id(run))
            first = "model" if "model" in differs else differs[0]
            problems.append(Problem(str(run.path / "run.json"), f"shard {run.shard} has {first} {_text(run.settings.get(first))!r} but the rest "
                                    f"of its shard set in {run.path.parent} has {_text(keep.get(first))!r}"
                                    + (f" (and differs in {len(differs) - 1} more settings)" if len(differs) > 1 else "") + "; left out"))
        _check_complete(members, problems)
    return [r for r in runs if id(r) not in dropped]


def _check_complete(members: list[EvalRun], problems: list[Problem]) -> None:
    """Name a shard set that lacks shards: its run covers only the shards' tasks that are there."""
    count = members[0].shard.rpartition("/")[2] if members[0].shard else ""
    have = {r.shard.partition("/")[0] for r in members if r.shard}
    if count.isdigit() and len(have) < int(count):
        missing = [f"{i}/{count}" for i in range(int(count)) if str(i) not in have]
        problems.append(Problem(str(members[0].path.parent), f"shard set lacks {', '.join(missing)}: its run covers only the tasks of the shards present"))


def _frozen(settings: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(settings.items(), key=lambda kv: kv[0]))


def _by_seed(members: list[EvalRun], problems: list[Problem]) -> list[SeedResult]:
    """One result per seed; same-seed runs are shards, summed when their tasks are disjoint."""
    parts: dict[int | None, list[EvalRun]] = defaultdict(list)
    for run in members:
        taken = parts[run.seed]
        clash = next((o for o in taken if (run.task_dirs & o.task_dirs) or not (run.task_dirs and o.task_dirs)), None)
        if clash is not None:
            shared = len(run.task_dirs & clash.task_dirs)
            problems.append(Problem(str(run.path), f"has the settings and seed ({run.seed}) of {clash.path} and "
                                    f"{f'{shared} of the same tasks' if shared else 'no task list to tell them apart'} "
                                    "(a duplicate or an overlapping shard); left out so no task counts twice"))
            continue
        taken.append(run)
    return [_merge(seed, parts[seed]) for seed in sorted(parts, key=lambda s: (s is None, s or 0))]


def _merge(seed: int | None, runs: list[EvalRun]) -> SeedResult:
    summaries = [r.summary for r in runs]
    bands = sorted({b for s in summaries for b in s.by_difficulty}, key=band_key)
    families = list(dict.fromkeys(f for s in summaries for f in s.by_family))
    counters: dict[str, int] = defaultdict(int)
    for s in summaries:
        for name, value in s.counters.items():
            counters[name] += value
    rollouts = sum(s.overall.tasks for s in summaries)
    return SeedResult(
        seed=seed, paths=tuple(str(r.path) for r in runs),
        bands={b: _sum([s.by_difficulty[b] for s in summaries if b in s.by_difficulty]) for b in bands},
        overall=_sum([s.overall for s in summaries]),
        families={f: _sum([s.by_family[f] for s in summaries if f in s.by_family]) for f in families},
        counters=dict(sorted(counters.items())),
        wall_time_s=sum(s.wall_time_s for s in summaries),
        mean_rollout_s=sum(s.mean_rollout_s * s.overall.tasks for s in summaries) / rollouts if rollouts else 0.0,
        infra_failures=sum(s.infra_failures for s in summaries),
        judge_errors=sum(s.judge_errors for s in summaries),
        best_of=tuple(r.best_of_record for r in runs if r.best_of_record is not None),
    )


def _sum(groups: list[GroupResult]) -> GroupResult:
    tasks, ok = sum(g.tasks for g in groups), sum(g.successes for g in groups)
    return GroupResult(tasks=tasks, successes=ok, errors=sum(g.errors for g in groups), success_rate=ok / tasks if tasks else 0.0)


def _row(env: str, first: EvalRun, results: list[SeedResult], tag: bool) -> Row:
    bands = sorted({b for r in results for b in r.bands}, key=band_key)
    families = list(dict.fromkeys(f for r in results for f in r.families))
    rule = HEADLINE_WEIGHTS[env][0] if env in HEADLINE_WEIGHTS else None
    weights = headline_weights(env, bands) if rule is not None else None
    if rule is not None and weights is None:
        rule = "pooled"
    names = sorted({n for r in results for n in r.counters})
    tasks = results[0].overall.tasks
    return Row(
        label=first.policy + (f" ({tasks} tasks)" if tag else ""), policy=first.policy, model=first.model,
        best_of=first.best_of, settings=dict(first.settings), runs=tuple(results),
        bands={b: Stat.of([r.bands[b].success_rate for r in results if b in r.bands]) for b in bands},
        overall=Stat.of([r.overall.success_rate for r in results]),
        headline=Stat.of([_headline(r, weights) for r in results]) if rule else None,
        headline_rule=rule, headline_bands=tuple(b for b in bands if rule),
        families={f: Stat.of([r.families[f].success_rate for r in results if f in r.families]) for f in families},
        counters={n: Stat.of([float(r.counters.get(n, 0)) for r in results]) for n in names},
        wall_time=Stat.of([r.wall_time_s for r in results]), tasks=tasks,
        errors=Stat.of([float(r.overall.errors) for r in results]),
        infra_failures=Stat.of([float(r.infra_failures) for r in results]),
        judge_errors=Stat.of([float(r.judge_errors) for r in results]),
    )


def _headline(result: SeedResult, weights: dict[str, int] | None) -> float:
    """The weighted rate over the run's bands (`sera.stats.weighted_rate`); pooled without weights."""
    if not weights:
        return result.overall.success_rate
    return weighted_rate({b: g.success_rate for b, g in result.bands.items()}, weights)


def _label(rows: list[Row]) -> list[Row]:
    """Labels made unique within a table: best-of N, then the settings in which rows differ."""
    keys = sorted({k for r in rows for k in r.settings})
    differing = [k for k in keys if k not in LABEL_KEYS and len({_text(r.settings.get(k)) for r in rows}) > 1]
    out = []
    for row in rows:
        label = row.label + (f" best-of-{row.best_of}" if row.best_of > 1 else "")
        same_policy = [r for r in rows if r.policy == row.policy and r.best_of == row.best_of]
        extra = [f"{k}={_text(row.settings.get(k))}" for k in differing if len({_text(r.settings.get(k)) for r in same_policy}) > 1]
        out.append(replace(row, label=label + (f" [{', '.join(extra)}]" if extra else "")))
    return out


def _text(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return "null" if value is None else str(value)

