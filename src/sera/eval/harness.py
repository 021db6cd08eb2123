"""Run a policy over a task set: concurrent rollouts, every tree saved, resumable, summarised.

Trees are written to `OUT/rollouts/<task_id>.json` as soon as each finishes; a rerun with the
same `OUT` skips tasks whose tree is already there (and readable), so a killed evaluation
resumes where it stopped. `OUT/summary.json` covers every task of the set, finished or not.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sera.eval.summary import EvalSummary, summarise
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import Policy
from sera.runtime.delegation import EnvFactory
from sera.runtime.rollout import run_rollout
from sera.types import RolloutTree, Task


def tree_path(out_dir: Path, task_id: str) -> Path:
    """Where the tree of `task_id` is saved."""
    return out_dir / "rollouts" / f"{task_id}.json"


def load_finished(out_dir: Path, tasks: list[Task]) -> dict[str, RolloutTree]:
    """Trees already saved for these tasks (unreadable files are reported and redone)."""
    done: dict[str, RolloutTree] = {}
    for task in tasks:
        path = tree_path(out_dir, task.id)
        if not path.exists():
            continue
        try:
            done[task.id] = RolloutTree.from_json(path.read_text())
        except ValueError as exc:
            print(f"warning: {path} is unreadable and will be redone: {str(exc).splitlines()[0]}")
    return done


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
    show_progress: bool = True,
) -> EvalSummary:
    """Evaluate `policy` on `tasks`, saving trees under `out_dir`; returns the summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "rollouts").mkdir(exist_ok=True)
    trees = load_finished(out_dir, tasks)
    todo = [t for t in tasks if t.id not in trees]
    started = time.perf_counter()
    gate = asyncio.Semaphore(concurrency)

    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("ok {task.fields[ok]}"), TimeElapsedColumn(), disable=not show_progress,
    ) as progress:
        solved = sum(bool(t.root_success) for t in trees.values())
        bar = progress.add_task(f"{env_name}/{split}", total=len(tasks), completed=len(trees), ok=solved)

        async def one(task: Task) -> None:
            nonlocal solved
            error_file = out_dir / "rollouts" / f"{task.id}.error.txt"
            async with gate:
                try:
                    tree = await run_rollout(task, policy, make_env(task), config)
                except Exception:  # recorded, counted as a failure, never fatal to the run
                    error_file.write_text(traceback.format_exc())
                    progress.advance(bar)
                    return
            _write_atomically(tree_path(out_dir, task.id), tree.to_json())
            error_file.unlink(missing_ok=True)  # a failure from an earlier run is now stale
            trees[task.id] = tree
            solved += bool(tree.root_success)
            progress.update(bar, advance=1, ok=solved)

        await asyncio.gather(*(one(t) for t in todo))

    summary = summarise(
        tasks, trees, env=env_name, split=split, policy=policy_name,
        wall_time_s=time.perf_counter() - started,
    )
    (out_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    return summary


def _write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a killed run never leaves half a tree."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(path)
