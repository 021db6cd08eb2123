"""Which run directories one `sera eval` invocation writes: one run, `--runs N`, `--shard i/n`.

    OUT/                              one run (no --runs, no --shard): an ordinary run directory
    OUT/runs/r<i>/                    --runs N: run i (i = 0..N-1), base seed --seed + i, an ordinary
                                      run directory (run.json, summary.json, rollouts/)
    OUT/summary.json                  --runs N: mean ± std over the runs (`RunsSummary`)
    <RUN>/shards/<i>-of-<n>/          --shard i/n: that shard of the run directory RUN (OUT, or
                                      OUT/runs/r<j> with --runs), itself a run directory + shard.json

`sera eval --merge` turns `<RUN>/shards/*` into `<RUN>` itself (`sera.eval.merge`). A folder
holds either one run or a `--runs` set, never both: mixing them is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from sera.eval.aggregate import RunsSummary, aggregate_runs
from sera.eval.errors import EvalSetupError
from sera.eval.fingerprint import RunFingerprint
from sera.eval.lock import run_lock
from sera.eval.shards import ShardRecord, ShardSpec, shard_dir, shard_dirs, write_record
from sera.eval.store import RUN_FILE, check_fingerprint, check_layout, check_out_dir, read_fingerprint, write_atomically
from sera.eval.summary import EvalSummary
from sera.types import Task

RUNS = "runs"
"""Folder of the runs of a `--runs` evaluation under `--out`."""
SUMMARY_FILE = "summary.json"
"""The results file of a run directory, and of a `--runs` folder."""


@dataclass(frozen=True)
class RunSlot:
    """One run directory this invocation evaluates."""

    dir: Path
    """The run directory `evaluate` writes."""
    seed: int
    """Its base seed."""
    tasks: list[Task]
    """Its tasks (a shard's share with `--shard`)."""
    fingerprint: RunFingerprint
    """Its fingerprint (the invocation's, with this run's seed)."""
    shard: ShardRecord | None = None
    """The shard it is, with `--shard`."""


def run_dir(out_dir: Path, index: int) -> Path:
    """Run `index` of a `--runs` evaluation."""
    return out_dir / RUNS / f"r{index}"


def run_dirs(out_dir: Path) -> list[Path]:
    """The `runs/r<i>` folders under `out_dir`, by index."""
    root = out_dir / RUNS
    found = [(int(p.name[1:]), p) for p in root.iterdir() if p.is_dir() and p.name[:1] == "r" and p.name[1:].isdigit()] \
        if root.is_dir() else []
    return [p for _, p in sorted(found)]


def check_kind(out_dir: Path, runs: int | None) -> None:
    """Refuse one run into a `--runs` folder and `--runs` into a run directory."""
    if runs is None and (out_dir / RUNS).is_dir():
        raise EvalSetupError(f"{out_dir} holds a --runs evaluation ({out_dir / RUNS}/); pass --runs N to resume it, or use another --out")
    if runs is not None and (out_dir / RUN_FILE).exists():
        raise EvalSetupError(f"{out_dir} holds a single run ({out_dir / RUN_FILE}); --runs needs its own --out")


def plan_slots(
    out_dir: Path, tasks: list[Task], fingerprint: RunFingerprint, *, samples: int,
    runs: int | None = None, shard: ShardSpec | None = None,
) -> list[RunSlot]:
    """The run directories to evaluate, in order (`runs` None: one run in `out_dir`)."""
    if runs is not None and runs < 1:
        raise EvalSetupError(f"--runs {runs}: give at least one run")
    check_kind(out_dir, runs)
    bases = [(out_dir, fingerprint.seed)] if runs is None else [
        (run_dir(out_dir, i), fingerprint.seed + i) for i in range(runs)
    ]
    slots = []
    for base, seed in bases:
        fp = replace_seed(fingerprint, seed)
        if shard is None:
            slots.append(RunSlot(base, seed, tasks, fp))
            continue
        check_fingerprint(base, fp)  # OUT already merged or run whole with other settings
        for sibling in shard_dirs(base):
            recorded = read_fingerprint(sibling)
            if recorded is not None and sibling.name != shard.name and (diff := recorded.differences(fp)):
                raise EvalSetupError(
                    f"{sibling} is a shard of this --out run with other settings ({'; '.join(diff)}); "
                    f"all shards of one evaluation need the same settings, or use another --out"
                )
        record = ShardRecord(index=shard.index, count=shard.count, samples=samples, selection=[t.id for t in tasks])
        slots.append(RunSlot(shard_dir(base, shard), seed, shard.take(tasks), fp, record))
    return slots


def replace_seed(fingerprint: RunFingerprint, seed: int) -> RunFingerprint:
    """`fingerprint` with another base seed."""
    return fingerprint.model_copy(update={"seed": seed})


def open_slots(slots: list[RunSlot], stack: ExitStack) -> None:
    """Make each slot's folder, hold its lock (in `stack`) and check its layout and fingerprint,
    before any model is loaded; `EvalSetupError` (one line) for the first that cannot be used."""
    for slot in slots:
        check_out_dir(slot.dir)
        stack.enter_context(run_lock(slot.dir))
        check_layout(slot.dir)
        check_fingerprint(slot.dir, slot.fingerprint)


def write_runs_summary(out_dir: Path, summaries: list[EvalSummary], dirs: list[Path], seeds: list[int]) -> RunsSummary:
    """Aggregate the runs and write `OUT/summary.json`."""
    runs = aggregate_runs(summaries, [str(d.relative_to(out_dir)) for d in dirs], seeds)
    write_atomically(out_dir / SUMMARY_FILE, runs.model_dump_json(indent=2))
    return runs



async def evaluate_slots(slots: list[RunSlot], run_one: Callable[[RunSlot], Awaitable[EvalSummary]]) -> list[EvalSummary]:
    """Evaluate the slots one after another (each run's rollouts run concurrently inside it),
    recording each shard's `shard.json` before its first rollout."""
    summaries = []
    for slot in slots:
        if slot.shard is not None:
            write_record(slot.dir, slot.shard)
        summaries.append(await run_one(slot))
    return summaries
