"""`sera eval --merge --out OUT [--merge-from DIR ...]`: combine shards into one run.

The shards are `<root>/shards/<i>-of-<n>/` under OUT and under each `--merge-from` folder (with
`--runs`, under `runs/r<j>/` of each, run by run). Before anything is written the merge checks:

- every shard has the same fingerprint (`run.json`), and OUT's own run (if any) too; otherwise it
  names the shards and the differing keys (`model: 'a' -> 'b'`);
- every shard was cut from the same task selection with the same `--samples`;
- every selected task is held by exactly one shard: a task held twice (a shard given twice) or
  by none (a missing shard) is refused, naming the tasks and the missing shards;
- every shard is finished: each of its rollouts has a tree (or a recorded crash). An
  unfinished shard is named with the rollouts it lacks; rerunning its command resumes it.

Then each shard's trees are linked (hard links; copies across file systems) into
`OUT/rollouts/`, `OUT/run.json` is written, and `OUT/summary.json` is the summary of the whole
selection, exactly what one unsharded run would have written (its `wall_time_s` is the sum of
the shards'). `OUT/merge.json` lists the shards merged.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sera.envs.registry import get_env
from sera.envs.selection import TaskSelection, filter_tasks, load_tasks
from sera.eval.aggregate import RunsSummary
from sera.eval.failures import Failure, classify, failure
from sera.eval.fingerprint import RunFingerprint, file_sha256
from sera.eval.lock import run_lock
from sera.eval.runs import RUNS, SUMMARY_FILE, run_dirs, write_runs_summary
from sera.eval.seeds import sample_seed
from sera.eval.shards import ShardError, ShardRecord, describe_ids, read_record, shard_dirs
from sera.eval.store import (
    check_fingerprint, check_out_dir, error_path, load_tree, read_fingerprint, task_dir, tree_path,
    write_atomically, write_fingerprint,
)
from sera.eval.summary import EvalSummary, SampleKey, summarise
from sera.types import Record, RolloutTree, Task

MERGE_FILE = "merge.json"
"""The list of shards a merged run came from."""


class MergedShard(Record):
    """One shard of a merged run."""

    shard: str
    """`i/n`."""
    dir: str
    """Its folder, as found."""
    tasks: int
    """Its tasks."""


class MergeRecord(Record):
    """What `OUT/merge.json` holds."""

    shards: list[MergedShard]
    """The shards merged, by count then index."""


@dataclass(frozen=True)
class MergeResult:
    """What a merge wrote."""

    runs: list[tuple[Path, EvalSummary]]
    """Each merged run directory and its summary."""
    aggregate: RunsSummary | None = None
    """With `--runs`: the mean ± std over the merged runs (`OUT/summary.json`)."""


@dataclass(frozen=True)
class _Shard:
    """One shard found for a merge."""

    dir: Path
    """Its run directory (`<root>/shards/<i>-of-<n>`)."""
    record: ShardRecord
    """Its `shard.json`."""
    fingerprint: RunFingerprint
    """Its `run.json`."""


def merge(out_dir: Path, sources: Sequence[Path] = ()) -> MergeResult:
    """Merge the shards under `out_dir` and `sources` into `out_dir`; `ShardError` (one line)
    for anything that would lose a task, count one twice or mix two evaluations."""
    check_out_dir(out_dir)
    roots = _unique([out_dir, *sources])
    for root in roots[1:]:
        if not root.is_dir():
            raise ShardError(f"--merge-from {root}: no such folder")
    if any((root / RUNS).is_dir() for root in roots):
        names = sorted({d.name for root in roots for d in run_dirs(root)}, key=lambda n: int(n[1:]))
        merged = []
        for name in names:
            try:
                merged.append((out_dir / RUNS / name, merge_run(out_dir / RUNS / name, [r / RUNS / name for r in roots])))
            except ShardError as exc:  # say which run of the set
                raise ShardError(f"{RUNS}/{name}: {exc}") from None
        seeds = [s.seed or 0 for _, s in merged]
        aggregate = write_runs_summary(out_dir, [s for _, s in merged], [d for d, _ in merged], seeds)
        return MergeResult(merged, aggregate)
    return MergeResult([(out_dir, merge_run(out_dir, roots))])


def merge_run(dest: Path, roots: list[Path]) -> EvalSummary:
    """Merge the shards under each of `roots` (`<root>/shards/*`) into the run directory `dest`."""
    shards = _read_shards(roots)
    first = shards[0]
    for other in shards[1:]:
        if diff := first.fingerprint.differences(other.fingerprint):
            raise ShardError(
                f"shard {other.record.spec} ({other.dir}) was run with other settings than shard {first.record.spec} "
                f"({first.dir}): {'; '.join(diff)}; merge only shards of one evaluation"
            )
        _check_same_selection(first, other)
    check_out_dir(dest)
    check_fingerprint(dest, first.fingerprint)
    _check_coverage(shards)
    with ExitStack() as stack:
        stack.enter_context(run_lock(dest))
        for shard in shards:
            stack.enter_context(run_lock(shard.dir))  # refuse a shard that is still running
        trees, failures = {}, {}
        for shard in shards:
            got, failed = _collect(shard)
            trees.update(got)
            failures.update(failed)
        tasks = _tasks(first.fingerprint, first.record.selection)
        write_fingerprint(dest, first.fingerprint)
        for shard in shards:
            _link_trees(shard, dest)
        summary = _summary(shards, tasks, trees, failures)
        write_atomically(dest / SUMMARY_FILE, summary.model_dump_json(indent=2))
        record = MergeRecord(shards=[MergedShard(shard=str(s.record.spec), dir=str(s.dir), tasks=len(s.record.task_ids))
                                     for s in shards])
        write_atomically(dest / MERGE_FILE, record.model_dump_json(indent=1))
    return summary


def _unique(paths: list[Path]) -> list[Path]:
    seen: dict[Path, Path] = {}
    for path in paths:
        seen.setdefault(path.resolve(), path)
    return list(seen.values())


def _read_shards(roots: list[Path]) -> list[_Shard]:
    dirs = _unique([d for root in roots for d in shard_dirs(root)])
    if not dirs:
        where = ", ".join(str(r) for r in roots)
        raise ShardError(f"no shards to merge under {where} (looked for shards/<i>-of-<n>/); run `sera eval --shard i/n` first")
    shards = []
    for d in dirs:
        record = read_record(d)
        fingerprint = read_fingerprint(d)
        if fingerprint is None:
            raise ShardError(f"{d / 'run.json'} is missing: shard {record.spec} never started; rerun its command")
        shards.append(_Shard(d, record, fingerprint))
    return shards


def _check_same_selection(first: _Shard, other: _Shard) -> None:
    a, b = first.record, other.record
    if a.samples != b.samples:
        raise ShardError(f"shard {b.spec} ({other.dir}) has --samples {b.samples}, shard {a.spec} ({first.dir}) "
                         f"{a.samples}; run every shard with the same --samples")
    if a.selection != b.selection:
        at = next((i for i, (x, y) in enumerate(zip(a.selection, b.selection)) if x != y), min(len(a.selection), len(b.selection)))
        raise ShardError(
            f"shard {b.spec} ({other.dir}) was cut from another task selection than shard {a.spec} ({first.dir}) "
            f"({len(b.selection)} vs {len(a.selection)} tasks, first difference at position {at}); "
            f"run every shard with the same --limit/--task-id/--difficulty"
        )


def _check_coverage(shards: list[_Shard]) -> None:
    selection = shards[0].record.selection
    holders: dict[str, list[_Shard]] = {task_id: [] for task_id in selection}
    for shard in shards:
        for task_id in shard.record.task_ids:
            holders[task_id].append(shard)
    twice = [t for t, held in holders.items() if len(held) > 1]
    if twice:
        where = " and ".join(f"shard {s.record.spec} ({s.dir})" for s in holders[twice[0]])
        raise ShardError(f"{len(twice)} task(s) would count twice: {describe_ids(twice)} (e.g. held by {where}); "
                         f"merge each shard once, of one split into n shards")
    missing = [t for t, held in holders.items() if not held]
    if missing:
        counts = sorted({s.record.count for s in shards})
        have = {(s.record.count, s.record.index) for s in shards}
        absent = [f"{i}/{n}" for n in counts for i in range(n) if (n, i) not in have]
        raise ShardError(
            f"{len(missing)} of {len(selection)} task(s) are in no shard: {describe_ids(missing)}; "
            f"missing shard(s) {', '.join(absent) or '?'}: run them, or add their folders with --merge-from"
        )


def _collect(shard: _Shard) -> tuple[dict[SampleKey, RolloutTree], dict[SampleKey, Failure]]:
    """The shard's trees and error rollouts; `ShardError` if any rollout has no result yet."""
    seed, samples = shard.fingerprint.seed, shard.record.samples
    trees: dict[SampleKey, RolloutTree] = {}
    failures: dict[SampleKey, Failure] = {}
    lacking = []
    for task_id in shard.record.task_ids:
        for k in range(samples):
            key = (task_id, k)
            tree = load_tree(tree_path(shard.dir, task_id, k), task_id, sample_seed(seed, task_id, k))
            if tree is not None:
                trees[key] = tree
                if (problem := classify(tree)) is not None:
                    failures[key] = problem
            elif (crash := error_path(shard.dir, task_id, k)).is_file():
                lines = crash.read_text(encoding="utf-8", errors="replace").strip().splitlines()
                failures[key] = failure("crashed", lines[-1] if lines else "crashed (empty traceback)")
            else:
                lacking.append(f"{task_id} #{k}")
    if lacking:
        total = len(shard.record.task_ids) * samples
        raise ShardError(f"shard {shard.record.spec} ({shard.dir}) is unfinished: {len(lacking)} of {total} rollout(s) "
                         f"have no result ({describe_ids(lacking)}); rerun its command to resume it")
    return trees, failures


def _tasks(fingerprint: RunFingerprint, selection: list[str]) -> list[Task]:
    """The selected tasks, loaded again from the fingerprint's source (a task file must be unchanged)."""
    spec = get_env(fingerprint.env)
    if fingerprint.tasks_file_sha256 is not None:
        path = Path(fingerprint.source)
        if not path.is_file() or file_sha256(path) != fingerprint.tasks_file_sha256:
            raise ShardError(f"the shards' task file {path} is missing or has changed since they ran; "
                             f"merge where the same file is at that path")
        chosen = TaskSelection(tasks_file=path, rules=fingerprint.rules)
    else:
        chosen = TaskSelection(split=fingerprint.source, rules=fingerprint.rules)
    try:
        return filter_tasks(load_tasks(spec, chosen), selection, None)
    except (ValueError, OSError) as exc:
        raise ShardError(f"the shards' tasks cannot be loaded again: {exc}") from None


def _link_trees(shard: _Shard, dest: Path) -> None:
    """Hard-link (else copy) the shard's rollout files into `dest/rollouts/`."""
    for task_id in shard.record.task_ids:
        source, target = task_dir(shard.dir, task_id), task_dir(dest, task_id)
        if not source.is_dir():
            continue
        target.mkdir(parents=True, exist_ok=True)
        for path in source.iterdir():
            if not path.is_file() or path.name.endswith(".partial"):
                continue
            goal = target / path.name
            goal.unlink(missing_ok=True)
            try:
                os.link(path, goal)
            except OSError:
                shutil.copy2(path, goal)
            if path.name.endswith(".json") and not (source / f"{path.stem}.error.txt").exists():
                (target / f"{path.stem}.error.txt").unlink(missing_ok=True)  # a crash since redone


def _summary(shards: list[_Shard], tasks: list[Task], trees: dict[SampleKey, RolloutTree],
             failures: dict[SampleKey, Failure]) -> EvalSummary:
    fp = shards[0].fingerprint
    parts = [s for s in (_shard_summary(shard.dir) for shard in shards) if s is not None]
    policy = parts[0].policy if parts else (f"{fp.policy}:{fp.model}" if fp.model else fp.policy)
    extra = {}
    best_of = getattr(fp, "best_of", None)  # recorded by best-of-N runs (`sera.eval.best_of`)
    if best_of is not None:
        extra["best_of"] = best_of
    return summarise(
        tasks, trees, env=fp.env, split=fp.source, policy=policy, wall_time_s=sum(p.wall_time_s for p in parts),
        failures=failures, samples=shards[0].record.samples, seed=fp.seed, rules=fp.rules, **extra,
    )


def _shard_summary(run_dir: Path) -> EvalSummary | None:
    path = run_dir / SUMMARY_FILE
    try:
        return EvalSummary.model_validate_json(path.read_bytes()) if path.is_file() else None
    except (ValidationError, ValueError, OSError):
        return None
