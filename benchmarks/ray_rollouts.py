"""Rollout throughput on Ray: the same round sampled by 1 worker and by 2, side by side in one run.

Both runs sample the same seeded trees (`--tasks` training tasks x K=`--trees` trees, the main
job's config: SmolLM2 on TextCraft-Synth's starter tier, or `--preset tiny`) through
`sera.train.ray_rollouts.RayRollouts` on a local Ray of this machine's CPUs. With W workers each
worker gets `cpus / W` CPUs and torch threads, so both runs use the same cores: the ratio says
what splitting the trees over processes buys against batching them in one (on a 2-core machine,
little: both saturate the same cores; the point is the machinery's overhead and, on a cluster,
the scaling). Per run: the round's wall seconds (after one untimed warm-up round), trees/s,
completion tokens/s, and the trees' equality across the runs. Prints one JSON object.

    python benchmarks/ray_rollouts.py [--tasks 2] [--trees 8] [--preset cpu|tiny] [--workers 1,2]

Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from sera.envs.registry import get_env
from sera.train.config import load_config
from sera.train.ray_rollouts import RayRollouts
from sera.train.sampling import InFlight
from sera.train.setup import load_model, make_learner, training_tasks

CONFIG = "configs/main/textcraft-cpu.yaml"


def completion_tokens(groups) -> int:
    return sum(len(step.completion_token_ids or ()) for group in groups for tree in group
               for node in tree.nodes.values() for step in node.steps)


def measure(workers: int, args: argparse.Namespace) -> tuple[dict, list]:
    import ray

    cpus = os.cpu_count() or 1
    cfg = load_config(CONFIG, preset=args.preset, overrides=[
        "ray.address=local", f"ray.workers={workers}", f"ray.worker_cpus={cpus / workers:g}",
        f"rollout.trees_per_task={args.trees}", f"rollout.concurrency={args.trees * args.tasks}"])
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        model, tokenizer = load_model(cfg)
        learner = make_learner(cfg, model, tokenizer)
        tasks = training_tasks(cfg, get_env(cfg.environment.name))
        rollouts = RayRollouts(cfg, lambda policy, task, k: policy, InFlight())
        try:
            rollouts.sync(learner, 0)
            rollouts.sample(tasks[args.tasks:2 * args.tasks], 0, "execution", 0)  # warm-up: other tasks
            start = time.perf_counter()
            groups = rollouts.sample(tasks[:args.tasks], 0, "execution", 0)
            seconds = time.perf_counter() - start
        finally:
            rollouts.close()
    finally:
        ray.shutdown()
    trees = sum(len(g) for g in groups)
    tokens = completion_tokens(groups)
    return {"workers": workers, "cpus_per_worker": cpus / workers, "seconds": round(seconds, 2),
            "trees_per_s": round(trees / seconds, 3), "completion_tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1)}, groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--trees", type=int, default=8)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    runs, outputs = [], []
    for w in (int(x) for x in args.workers.split(",")):
        run, groups = measure(w, args)
        runs.append(run)
        outputs.append([[[s.completion_token_ids for n in t.nodes.values() for s in n.steps] for t in g] for g in groups])
    base = runs[0]["seconds"]
    for run in runs:
        run["seconds_ratio_to_first"] = round(run["seconds"] / base, 3)
    print(json.dumps({"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                      "torch_threads_driver": torch.get_num_threads(), "preset": args.preset,
                      "tasks": args.tasks, "trees_per_task": args.trees, "runs": runs,
                      "same_trees": all(o == outputs[0] for o in outputs)}, indent=1))


if __name__ == "__main__":
    main()
