"""Evaluation runs grouped into the rows of Table 1: mean ± std over seeds, per difficulty.

Rules (docs/report.md):
- **Tables** are per (environment, split or task file): runs of different environments or task
  sets are never averaged together.
- **Rows** are per set of recorded settings (policy, model, sampling, budgets, best-of N, and any
  key a newer `run.json` adds) and per task selection (the task count of every band): runs that
  differ in anything but the seed are separate rows, labelled by the settings that differ.
- **Repeats** are the runs of a row with different seeds; each band's rate, the overall rate and
  the macro average are computed per run, then mean ± sample std (n − 1) over runs.
- **Shards**: runs of a row with the same seed are parts of one run and are summed, provided
  their tasks are disjoint (an overlapping one is left out, named). Runs that record a `shard`
  and sit in one folder form a shard set; one run with another model than the rest is left out.
- **Overall** is task-weighted (successes / rollouts, all bands). Environments with difficulty
  bands of equal weight in the paper (TextWorld-Sync) also get the macro average of the band
  rates (`MACRO_BANDS`), over the bands the run has.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from sera.eval.summary import DIFFICULTY_ORDER, GroupResult
from sera.reports.records import EvalRun, Problem

MACRO_BANDS: dict[str, tuple[str, ...]] = {"textworld-sync": DIFFICULTY_ORDER}
"""Environments reported with a macro average over these difficulty bands (sera-spec §8.2)."""
LABEL_KEYS = frozenset({"policy", "model", "best_of"})
"""Settings already in a row's label (policy description, best-of N)."""


@dataclass(frozen=True)
class Stat:
    """Mean ± sample standard deviation of one quantity over the repeats of a row."""

    mean: float | None
    """Mean over runs; None with no value."""
    std: float | None
    """Sample standard deviation (n − 1); None with fewer than two values."""
    n: int
    """Number of runs."""
    values: tuple[float, ...]
    """The per-run values, in seed order."""

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        """The statistic of `values`."""
        return cls(
            mean=statistics.fmean(values) if values else None,
            std=statistics.stdev(values) if len(values) > 1 else None,
            n=len(values), values=tuple(values),
        )


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
    macro: Stat | None
    """Macro average of the band rates (environments in `MACRO_BANDS`), else None."""
    macro_bands: tuple[str, ...]
    """The bands the macro average is over (fewer than four on a partial selection)."""
    families: dict[str, Stat]
    """Success rate per task family."""
    counters: dict[str, Stat]
    """Each usage counter's total per run."""
    wall_time: Stat
    """Wall-clock seconds per run."""
    tasks: int
    """Rollouts per run."""


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
        groups[(run.env, run.source, tuple(sorted(run.settings.items(), key=lambda kv: kv[0])))].append(run)
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
        bands = sorted({b for r in rows for b in r.bands}, key=_band_key)
        families = list(dict.fromkeys(f for r in rows for f in r.families))
        tables.append(EvalTable(env=env, source=source, bands=tuple(bands), families=tuple(families),
                                rows=tuple(rows), notes=tuple(notes[(env, source)])))
    return tables, problems


def _check_shard_sets(runs: list[EvalRun], problems: list[Problem]) -> list[EvalRun]:
    """Leave out a shard whose model differs from the rest of its shard set (majority kept)."""
    sets: dict[tuple[Any, ...], list[EvalRun]] = defaultdict(list)
    for run in runs:
        if run.shard is not None:
            count = run.shard.rpartition("/")[2]
            sets[(str(run.path.parent), run.env, run.source, run.seed, count)].append(run)
    dropped: set[int] = set()
    for members in sets.values():
        models = Counter((r.model, r.policy) for r in members)
        if len(models) < 2:
            continue
        (keep, _), = models.most_common(1)
        for run in members:
            if (run.model, run.policy) != keep:
                dropped.add(id(run))
                problems.append(Problem(str(run.path / "run.json"), f"shard {run.shard} was run with model {run.model or run.policy!r}, "
                                        f"the rest of its shard set in {run.path.parent} with {keep[0] or keep[1]!r}; left out"))
    return [r for r in runs if id(r) not in dropped]


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
    bands = sorted({b for s in summaries for b in s.by_difficulty}, key=_band_key)
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
    )


def _sum(groups: list[GroupResult]) -> GroupResult:
    tasks, ok = sum(g.tasks for g in groups), sum(g.successes for g in groups)
    return GroupResult(tasks=tasks, successes=ok, errors=sum(g.errors for g in groups), success_rate=ok / tasks if tasks else 0.0)


def _row(env: str, first: EvalRun, results: list[SeedResult], tag: bool) -> Row:
    bands = sorted({b for r in results for b in r.bands}, key=_band_key)
    families = list(dict.fromkeys(f for r in results for f in r.families))
    macro_of = MACRO_BANDS.get(env)
    macro_bands = tuple(b for b in bands if macro_of and b in macro_of)
    names = sorted({n for r in results for n in r.counters})
    tasks = results[0].overall.tasks
    return Row(
        label=first.policy + (f" ({tasks} tasks)" if tag else ""), policy=first.policy, model=first.model,
        best_of=first.best_of, settings=dict(first.settings), runs=tuple(results),
        bands={b: Stat.of([r.bands[b].success_rate for r in results if b in r.bands]) for b in bands},
        overall=Stat.of([r.overall.success_rate for r in results]),
        macro=Stat.of([statistics.fmean(r.bands[b].success_rate for b in macro_bands) for r in results]) if macro_bands else None,
        macro_bands=macro_bands,
        families={f: Stat.of([r.families[f].success_rate for r in results if f in r.families]) for f in families},
        counters={n: Stat.of([float(r.counters.get(n, 0)) for r in results]) for n in names},
        wall_time=Stat.of([r.wall_time_s for r in results]), tasks=tasks,
    )


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


def _band_key(band: str) -> tuple[int, str]:
    return (DIFFICULTY_ORDER.index(band) if band in DIFFICULTY_ORDER else len(DIFFICULTY_ORDER), band)
