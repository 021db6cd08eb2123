"""The TextWorld-Sync oracle per family: success, shared actions used vs budget, tree shapes.

Runs the scripted expert through the full runtime on a split (default: all 1,400 test tasks) and
prints one JSON object with a row per family and per difficulty.
Usage: python benchmarks/textworld_oracle.py [--split test] [--limit 0] [--concurrency 16]
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
from sera.envs.textworld.tasks import load_split
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
        "success_rate": round(mean(bool(tree.root_success) for _, tree in pairs), 4),
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
    args = parser.parse_args()
    tasks = load_split(args.split)
    tasks = tasks[: args.limit] if args.limit else tasks
    start = time.perf_counter()
    trees = asyncio.run(_run_all(tasks, args.concurrency))
    wall = time.perf_counter() - start
    by_family: dict[str, list] = defaultdict(list)
    by_difficulty: dict[str, list] = defaultdict(list)
    for task, tree in zip(tasks, trees):
        by_family[task.misc["family"]].append((task, tree))
        by_difficulty[task.difficulty or "none"].append((task, tree))
    print(json.dumps({
        "split": args.split,
        "wall_s": round(wall, 1),
        "overall": _row(list(zip(tasks, trees))),
        "by_family": {k: _row(v) for k, v in by_family.items()},
        "by_difficulty": {k: _row(v) for k, v in by_difficulty.items()},
    }, indent=1))


if __name__ == "__main__":
    main()
