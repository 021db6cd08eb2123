"""Runtime overhead with the scripted oracle (no model): agent steps per second, wall time.

Runs the oracle through the full runtime (sandboxed cells, delegation) on a TextCraft-Synth
split and prints one JSON object with steps/s, rollouts/s and the tree statistics; with
`--limit 0` it runs the whole split (632 val tasks).
Usage: python benchmarks/runtime_oracle.py [--split val] [--limit 0] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from sera.envs.registry import get_env
from sera.eval.harness import evaluate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--split", default="val")
    parser.add_argument("--limit", type=int, default=0, help="0 = all tasks")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    spec = get_env("textcraft-synth")
    tasks = spec.load_split(args.split)
    tasks = tasks[: args.limit] if args.limit else tasks
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = asyncio.run(evaluate(
            tasks, spec.oracle(tasks), spec.root_env, Path(out), env_name=spec.name, split=args.split,
            policy_name="oracle", concurrency=args.concurrency, show_progress=False,
        ))
        wall = time.perf_counter() - start
    steps = summary.counters.get("policy_calls", 0)
    print(json.dumps({
        "tasks": len(tasks),
        "success": summary.overall.successes,
        "wall_s": round(wall, 1),
        "agent_steps": steps,
        "agent_steps_per_s": round(steps / wall, 1),
        "cells_per_s": round(summary.counters.get("cells", 0) / wall, 1),
        "tool_calls": summary.counters.get("tool_calls", 0),
        "rollouts_per_s": round(len(tasks) / wall, 2),
        "mean_agents_per_tree": round(summary.trees.mean_nodes, 2),
        "depth_distribution": summary.trees.depth_distribution,
        "agents_by_depth": summary.trees.agents_by_depth,
        "by_difficulty": {k: f"{v.successes}/{v.tasks}" for k, v in summary.by_difficulty.items()},
    }, indent=2))


if __name__ == "__main__":
    main()
