"""Rollout throughput on Ray: the same round sampled by 1 worker and by 2, side by side in one run.

Both runs sample the same seeded trees (`--tasks` training tasks x K=`--trees` trees, the main
job's config: SmolLM2 on TextCraft-Synth's starter tier, or `--preset tiny`) through the loop's own
`open_sampling` on a local Ray of this machine's CPUs; `--workers 0` is the run without Ray (the
driver samples), the baseline. With in-process sampling each of W workers gets `cpus / W` CPUs and
torch threads, so every run uses the same cores: the ratio says what splitting the trees over
processes buys against batching them in one (on a 2-core machine, little: both saturate the same
cores; the point is the machinery's overhead and, on a cluster, the scaling). With
`--vllm-python` the trees are sampled by a vLLM server the run starts (LoRA, version 0) and the
workers (0.5 CPU each) only send requests to it. Per run: the round's wall seconds (after one
untimed warm-up round on other tasks), trees/s, completion tokens/s, and the trees' equality
across the runs. Prints one JSON object.

    python benchmarks/ray_rollouts.py [--tasks 2] [--trees 8] [--preset cpu|tiny] [--workers 0,1,2]
                                      [--vllm-python .venv-vllm/bin/python]

Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from sera.envs.registry import get_env
from sera.train.config import load_config
from sera.train.loop import open_sampling
from sera.train.sampler_setup import serving_base_if_needed
from sera.train.sampling import InFlight
from sera.train.setup import load_model, make_learner, training_tasks

CONFIG = "configs/main/textcraft-cpu.yaml"


def completion_tokens(groups) -> int:
    return sum(len(step.completion_token_ids or ()) for group in groups for tree in group
               for node in tree.nodes.values() for step in node.steps)


def overrides(workers: int, args: argparse.Namespace) -> list[str]:
    cpus = os.cpu_count() or 1
    keys = [f"rollout.trees_per_task={args.trees}", f"rollout.concurrency={args.trees * args.tasks}"]
    if args.vllm_python:
        keys += ["sampler.backend=vllm", f"sampler.vllm.python={args.vllm_python}", "model.finetune=lora",
                 "sampler.vllm.kv_cache_gib=2"]
    if workers:
        per_worker = 0.5 if args.vllm_python else cpus / workers
        keys += ["ray.address=local", f"ray.workers={workers}", f"ray.worker_cpus={per_worker:g}"]
    return keys


def measure(workers: int, args: argparse.Namespace) -> tuple[dict, list]:
    import ray

    cfg = load_config(CONFIG, preset=args.preset, overrides=overrides(workers, args))
    if workers:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="sera-ray-bench-") as out:
            model, tokenizer = load_model(cfg)
            spec = get_env(cfg.environment.name)
            base_dir = serving_base_if_needed(cfg, Path(out), model, tokenizer, False)
            learner = make_learner(cfg, model, tokenizer)
            tasks = training_tasks(cfg, spec)
            backend, sampler = open_sampling(cfg, Path(out), spec, learner, tokenizer, InFlight(), base_dir,
                                             lambda policy, task, k: policy)
            try:
                backend.sync(learner, 0)
                sampler.sample(tasks[args.tasks:2 * args.tasks], 0, "execution", 0)  # warm-up: other tasks
                start = time.perf_counter()
                groups = sampler.sample(tasks[:args.tasks], 0, "execution", 0)
                seconds = time.perf_counter() - start
            finally:
                backend.close()
    finally:
        if workers:
            ray.shutdown()
    trees = sum(len(g) for g in groups)
    tokens = completion_tokens(groups)
    return {"workers": workers, "cpus_per_worker": cfg.ray.worker_cpus if workers else None,
            "seconds": round(seconds, 2), "trees_per_s": round(trees / seconds, 3), "completion_tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1)}, groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--trees", type=int, default=8)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts; 0 = no Ray")
    parser.add_argument("--vllm-python", default=None, help="sample through a vLLM server (its venv's python)")
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
                      "sampler": "vllm" if args.vllm_python else "inprocess",
                      "tasks": args.tasks, "trees_per_task": args.trees, "runs": runs,
                      "same_trees": all(o == outputs[0] for o in outputs)}, indent=1))


if __name__ == "__main__":
    main()
