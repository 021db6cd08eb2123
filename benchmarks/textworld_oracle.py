"""The TextWorld-Sync oracle per family: success, shared actions used vs budget, tree shapes.

Runs the scripted expert through the full runtime on a split (default: all 1,400 test tasks),
a task file (`--tasks-file`, e.g. the authors' V9 JSONL), or the split written in the authors'
V9 format (`--as-v9`: our tasks, budgets drawn the authors' way, read back as their files are),
under the tasks' own rules profile or `--rules`, and prints one JSON object with a row per
family, per difficulty and per (family, difficulty).
Usage: python benchmarks/textworld_oracle.py [--split test] [--tasks-file F] [--as-v9]
       [--rules sync|reference] [--limit 0] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter, defaultdict
from statistics import mean

from sera.envs.textworld.env import root_env_factory
from sera.envs.textworld.oracle import TextWorldOracle
from sera.envs.textworld.plan import min_actions
from sera.envs.textworld.spec import SyncTaskSpec
from sera.envs.textworld.tasks import load_split, load_split_specs, load_tasks
from sera.runtime.rollout import run_rollout
from sera.types import RolloutTree, Task


async def _run_all(tasks: list[Task], concurrency: int) -> list[RolloutTree]:
    oracle, gate = TextWorldOracle(tasks), asyncio.Semaphore(concurrency)

    async def one(task: Task) -> RolloutTree:
        async with gate:
            return await run_rollout(task, oracle, root_env_factory(task))

    return await asyncio.gather(*(one(t) for t in tasks))


def _row(pairs: list[tuple[Task, RolloutTree]]) -> dict:
    used = [tree.counters.get("world_actions", 0) for _, tree in pairs]
    budget = [task.max_steps or 0 for task, _ in pairs]
    return {
        "tasks": len(pairs),
        "solved": sum(bool(tree.root_success) for _, tree in pairs),
        "success_rate": round(mean(bool(tree.root_success) for _, tree in pairs), 4),
        "plan_over_budget": sum(
            min_actions(SyncTaskSpec.from_task(task)) > (task.max_steps or 0) for task, _ in pairs
        ),
        "mean_actions_used": round(mean(used), 1),
        "mean_budget": round(mean(budget), 1),
        "mean_used_over_budget": round(mean(u / b for u, b in zip(used, budget)), 3),
        "max_used_over_budget": round(max(u / b for u, b in zip(used, budget)), 3),
        "mean_agents": round(mean(len(tree.nodes) for _, tree in pairs), 2),
        "depths": dict(sorted(Counter(str(tree.depth()) for _, tree in pairs).items())),
        "mean_delegation_events": round(mean(len(tree.delegation_events()) for _, tree in pairs), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=0, help="0 = all tasks")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tasks-file", default=None, help="a task file instead of a split")
    parser.add_argument("--as-v9", action="store_true", help="the split written in the authors' V9 format")
    parser.add_argument("--rules", default=None, help="sync or reference (default: the tasks' own)")
    args = parser.parse_args()
    if args.tasks_file:
        tasks, source = load_tasks(args.tasks_file, rules=args.rules), args.tasks_file
    elif args.as_v9:
        tasks, source = _as_v9(args.split, args.rules), f"{args.split} as V9 rows"
    else:
        tasks, source = load_split(args.split, rules=args.rules), args.split
    tasks = tasks[: args.limit] if args.limit else tasks
    start = time.perf_counter()
    trees = asyncio.run(_run_all(tasks, args.concurrency))
    wall = time.perf_counter() - start
    by_family: dict[str, list] = defaultdict(list)
    by_difficulty: dict[str, list] = defaultdict(list)
    by_cell: dict[str, list] = defaultdict(list)
    for task, tree in zip(tasks, trees):
        by_family[task.misc["family"]].append((task, tree))
        by_difficulty[task.difficulty or "none"].append((task, tree))
        by_cell[f"{task.misc['family']}/{task.difficulty}"].append((task, tree))
    print(json.dumps({
        "tasks": source,
        "rules": sorted({t.misc.get("rules", "sync") for t in tasks}),
        "wall_s": round(wall, 1),
        "overall": _row(list(zip(tasks, trees))),
        "by_family": {k: _row(v) for k, v in by_family.items()},
        "by_difficulty": {k: _row(v) for k, v in by_difficulty.items()},
        "solved_by_family_and_difficulty": {k: f"{_row(v)['solved']}/{len(v)}" for k, v in by_cell.items()},
    }, indent=1))


def _as_v9(split: str, rules: str | None) -> list[Task]:
    """The split written as the authors' V9 JSONL (the test helper's writer), read back."""
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "textworld"))
    from _v9_rows import v9_row_from_spec, write_jsonl

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"textworld_{split}_v9.jsonl"
        write_jsonl(path, [v9_row_from_spec(s) for s in load_split_specs(split)])
        return load_tasks(path, rules=rules)


if __name__ == "__main__":
    main()
