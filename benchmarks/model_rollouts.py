"""End-to-end tree rollouts per minute with a real model (no oracle): SmolLM2 on TextCraft-Synth.

Runs the in-process sampler (dynamic batching across every agent of every tree) on easy val
tasks through the full runtime and sandbox, and prints one JSON object: rollouts/min, model
calls, tokens/s, tree shapes and success. The machine's cores are shared by all concurrent
rollouts, so `--concurrency` is the batch the sampler can form.
Usage: python benchmarks/model_rollouts.py [--model smollm2] [--tasks 8] [--concurrency 8]
       [--max-calls 4] [--max-tokens 192] [--env textcraft-synth]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from sera.envs.registry import get_env
from sera.eval.harness import evaluate
from sera.policy.factory import fit_sampling
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.config import RuntimeConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--env", default="textcraft-synth")
    parser.add_argument("--split", default="val")
    parser.add_argument("--difficulty", default="easy")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-calls", type=int, default=4, help="policy calls per agent")
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()

    spec = get_env(args.env)
    tasks = [t for t in spec.load_split(args.split) if t.difficulty == args.difficulty][: args.tasks]
    load_start = time.perf_counter()
    sampler = TransformersSampler.load(args.model, dtype=args.dtype)
    load_s = time.perf_counter() - load_start
    sampling = replace(fit_sampling(spec.sampling, sampler), max_tokens=args.max_tokens, temperature=args.temperature)
    config = RuntimeConfig(max_calls_per_agent=args.max_calls, sampling=sampling)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = asyncio.run(evaluate(
            tasks, sampler, spec.root_env, Path(out), env_name=spec.name, split=args.split,
            policy_name=f"hf:{args.model}", config=config, concurrency=args.concurrency, show_progress=False,
        ))
        wall = time.perf_counter() - start
    records = sampler.batch_records
    counters = summary.counters
    print(json.dumps({
        "model": args.model, "dtype": args.dtype, "env": args.env, "tasks": len(tasks),
        "concurrency": args.concurrency, "max_calls_per_agent": args.max_calls, "max_tokens": args.max_tokens,
        "model_load_s": round(load_s, 1),
        "wall_s": round(wall, 1),
        "rollouts_per_min": round(60 * len(tasks) / wall, 2),
        "policy_calls": counters.get("policy_calls", 0),
        "completion_tokens": counters.get("completion_tokens", 0),
        "completion_tokens_per_s": round(counters.get("completion_tokens", 0) / wall, 1),
        "batches": len(records),
        "mean_batch_size": round(sum(r.size for r in records) / max(1, len(records)), 2),
        "successes": summary.overall.successes,
        "mean_agents_per_tree": round(summary.trees.mean_nodes, 2),
        "agents_by_depth": summary.trees.agents_by_depth,
    }, indent=1))


if __name__ == "__main__":
    main()
