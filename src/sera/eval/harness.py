"""Run a policy over a task set: concurrent rollouts, every tree saved, resumable, summarised.

Each task is run `samples` times, sample k with the seed `sample_seed(seed, task id, k)` (set on
the tree and on the sampling settings of its calls), and each tree is written to
`OUT/rollouts/<task>/<k>.json` (`sera.eval.store`) as soon as it finishes. A rerun with the same
`OUT` and fingerprint skips rollouts whose tree is there, readable and not an infrastructure
failure, so a killed evaluation resumes where it stopped and one that met a dead server redoes
only what the server broke. One rollout that crashes or cannot be saved never stops the others:
it is counted as an error (`sera.eval.failures`). `OUT/summary.json` covers every rollout of the
set, finished or not.

The summary is readable while the run goes: it is rewritten (atomically) when the run starts, after
finished rollouts at most once every `summary_every_s` seconds, and at the end, also when the run
is stopped (a signal cancels it); until every rollout has a result it is marked partial
(`EvalSummary.complete`). Its `wall_time_s` adds the time of the run's earlier invocations, read
from the summary they left.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from sera.eval.failures import Failure, classify, failure
from sera.eval.fingerprint import RunFingerprint
from sera.eval.lock import run_lock
from sera.eval.progress import EvalProgress, ProgressCallback, RunProgress
from sera.eval.seeds import sample_seed
from sera.eval.store import (
    check_fingerprint, check_layout, check_out_dir, error_path, load_tree, save_tree, tree_path,
    RUN_FILE, write_atomically, write_fingerprint,
)
from sera.eval.summary import EvalSummary, SampleKey, summarise
from sera.runtime.config import RuntimeConfig
from sera.runtime.delegation import EnvFactory, Launcher
from sera.runtime.policy import Policy
from sera.runtime.rollout import run_rollout
from sera.sandbox.config import ensure_workers
from sera.types import RolloutTree, Task

__all__ = ["SUMMARY_EVERY_S", "evaluate", "load_finished", "tree_path"]

SUMMARY_EVERY_S = 1.0
"""Least seconds between two rewrites of the partial summary (the first and the last are always
written): `benchmarks/eval_harness_overhead.py` measures the cost."""


def load_finished(
    out_dir: Path, tasks: list[Task], samples: int = 1, seed: int = 0
) -> tuple[dict[SampleKey, RolloutTree], dict[SampleKey, Failure]]:
    """Saved trees that need no redoing, and the final (not infrastructure) failures among them.

    Unreadable trees, trees of another task or seed, and infrastructure failures are left out,
    so they are run again."""
    done: dict[SampleKey, RolloutTree] = {}
    final: dict[SampleKey, Failure] = {}
    retried = 0
    for task in tasks:
        for k in range(samples):
            tree = load_tree(tree_path(out_dir, task.id, k), task.id, sample_seed(seed, task.id, k))
            if tree is None:
                continue
            problem = classify(tree)
            if problem is not None and problem.infra:
                retried += 1
                continue
            done[(task.id, k)] = tree
            if problem is not None:
                final[(task.id, k)] = problem
    if retried:  # a message, not a result: stderr
        print(f"retrying {retried} rollouts that failed for infrastructure reasons", file=sys.stderr, flush=True)
    return done, final


async def evaluate(
    tasks: list[Task],
    policy: Policy,
    make_env: Callable[[Task], EnvFactory],
    out_dir: Path,
    *,
    env_name: str,
    split: str,
    policy_name: str,
    config: RuntimeConfig | None = None,
    concurrency: int = 8,
    show_progress: bool = False,
    progress: ProgressCallback | None = None,
    summary_every_s: float | None = SUMMARY_EVERY_S,
    samples: int = 1,
    seed: int = 0,
    rules: str | None = None,
    fingerprint: RunFingerprint | None = None,
    lock: bool = True,
    launcher: Callable[[int], Launcher] | None = None,
    best_of: dict[str, Any] | None = None,
) -> EvalSummary:
    """Evaluate `policy` on `samples` rollouts of each of `tasks`, saving trees under `out_dir`;
    returns the summary.

    `fingerprint` (default: one made of the environment, split, policy, config, rules and seed)
    is recorded in `out_dir` and must match the one already there; `EvalSetupError` (one line)
    if `out_dir` is not a writable folder, holds the old layout or another run, or is in use.
    `lock=False` when the caller already holds `run_lock(out_dir)` (the CLI takes it before
    loading a model). `launcher` builds a fresh launcher for one rollout from its seed (best-of-N
    selection, `sera.launchers.best_of_n`; None: plain children); `best_of` is its settings
    record (`BestOf.record()`), kept in the fingerprint and the summary.

    `progress` gets a `RunProgress` at the start, after every finished rollout and at the end
    (`sera.eval.progress.EvalProgress` shows them); `show_progress=True` without one shows them
    on stderr; neither: nothing is shown. `summary_every_s`: least seconds between rewrites of the
    partial `summary.json` (0: after every rollout; None: only at the start and the end).
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    config = config or RuntimeConfig()
    fingerprint = fingerprint or RunFingerprint.of(
        env=env_name, source=split, policy=policy_name, config=config, rules=rules, seed=seed, best_of=best_of
    )
    check_out_dir(out_dir)
    ensure_workers(concurrency)  # each rollout keeps its sandbox worker while its model thinks
    with run_lock(out_dir) if lock else nullcontext():
        check_layout(out_dir)
        check_fingerprint(out_dir, fingerprint)
        # Only a summary of this same run (its run.json already there) holds earlier invocations' time.
        earlier_s = _earlier_wall_time(out_dir) if (out_dir / RUN_FILE).exists() else 0.0
        write_fingerprint(out_dir, fingerprint)
        display = EvalProgress() if show_progress and progress is None else None
        try:
            return await _run(tasks, policy, make_env, out_dir, env_name=env_name, split=split, policy_name=policy_name,
                              config=config, concurrency=concurrency, progress=progress or display, samples=samples,
                              seed=seed, rules=rules, launcher=launcher, best_of=best_of, earlier_s=earlier_s,
                              summary_every_s=summary_every_s)
        finally:
            if display is not None:
                display.close()


async def _run(
    tasks: list[Task], policy: Policy, make_env: Callable[[Task], EnvFactory], out_dir: Path, *, env_name: str,
    split: str, policy_name: str, config: RuntimeConfig, concurrency: int, progress: ProgressCallback | None,
    samples: int, seed: int, rules: str | None, launcher: Callable[[int], Launcher] | None,
    best_of: dict[str, Any] | None, earlier_s: float, summary_every_s: float | None,
) -> EvalSummary:
    trees, failures = load_finished(out_dir, tasks, samples, seed)
    todo = [(t, k) for t in tasks for k in range(samples) if (t.id, k) not in trees]
    pending = {(t.id, k) for t, k in todo}
    started = time.perf_counter()
    gate = asyncio.Semaphore(concurrency)
    label = f"{env_name}/{Path(split).name} ({out_dir.name})"
    resumed = len(trees)
    last_write = -float("inf")

    def summary() -> EvalSummary:
        return summarise(
            tasks, trees, env=env_name, split=split, policy=policy_name,
            wall_time_s=earlier_s + time.perf_counter() - started, failures=failures, samples=samples, seed=seed,
            rules=rules, best_of=best_of, pending=pending,
        )

    def finished(key: SampleKey, *, final: bool = False) -> None:
        """One more rollout has a result: report it, and rewrite the partial summary (throttled)."""
        nonlocal last_write
        pending.discard(key)
        now = time.perf_counter()
        first = last_write == -float("inf")
        if not final and (first or summary_every_s is not None and now - last_write >= summary_every_s):
            write_atomically(out_dir / "summary.json", summary().model_dump_json(indent=2))
            last_write = time.perf_counter()  # the write's own time does not count towards the next
        if progress is not None:
            errors = len(failures)
            ok = sum(1 for key, tree in trees.items() if tree.root_success and key not in failures)
            progress(RunProgress(label=label, total=len(tasks) * samples, done=len(tasks) * samples - len(pending),
                                 successes=ok, errors=errors, resumed=resumed, elapsed_s=now - started,
                                 finished=final))

    async def one(task: Task, k: int) -> None:
        key, rollout_seed = (task.id, k), sample_seed(seed, task.id, k)
        error_file = error_path(out_dir, task.id, k)
        # The seed goes on the tree and on every call, so each sample is its own reproducible draw.
        sample_config = replace(config, sampling=replace(config.sampling, seed=rollout_seed))
        async with gate:
            try:
                tree = await run_rollout(task, policy, make_env(task), sample_config, seed=rollout_seed,
                                         launcher=launcher(rollout_seed) if launcher else None)
            except Exception as exc:  # recorded, counted as an error, never fatal to the run
                failures[key] = failure("crashed", f"{type(exc).__name__}: {exc}")
                _record_crash(error_file, traceback.format_exc())
                finished(key)
                return
        try:
            tree, _ = save_tree(tree_path(out_dir, task.id, k), tree)
        except Exception as exc:  # e.g. a full disk: this rollout is lost, the others go on
            failures[key] = failure("save_failed", f"saving the tree of {task.id!r} sample {k} failed: {type(exc).__name__}: {exc}")
            _warn(failures[key].message)
            finished(key)
            return
        error_file.unlink(missing_ok=True)  # a failure from an earlier run is now stale
        trees[key] = tree
        problem = classify(tree)
        if problem is not None:
            failures[key] = problem
        finished(key)

    finished(("", -1))  # the starting point: resumed rollouts, and a summary to read at once
    try:
        await asyncio.gather(*(one(t, k) for t, k in todo))
    finally:  # also when stopped (a signal cancels the run): the summary says what is done, as partial
        result = summary()
        write_atomically(out_dir / "summary.json", result.model_dump_json(indent=2))
        finished(("", -1), final=True)
    return result


def _earlier_wall_time(out_dir: Path) -> float:
    """Wall seconds the run's earlier invocations spent, from the summary they left (0 for none)."""
    path = out_dir / "summary.json"
    if not path.exists():
        return 0.0
    try:
        return EvalSummary.model_validate_json(path.read_bytes()).wall_time_s
    except (ValueError, OSError) as exc:
        _warn(f"{path} is unreadable ({str(exc).splitlines()[0]}); earlier invocations' wall time is not counted")
        return 0.0


def _warn(message: str) -> None:
    """A message for the user, on stderr: stdout is for results."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _record_crash(error_file: Path, text: str) -> None:
    """Keep a crashed rollout's traceback beside where its tree would be (best effort)."""
    try:
        error_file.parent.mkdir(parents=True, exist_ok=True)
        error_file.write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError:
        pass  # the failure is still counted and named in the summary
