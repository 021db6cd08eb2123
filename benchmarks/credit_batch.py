"""Cost of credit per 64-tree batch, and of counterfactual collection per rollout (oracle policy).

Trees come from the scripted oracles (TextCraft-Synth and TextWorld-Sync) with a seeded share of
children giving up (`SabotagedPolicy`, so groups are mixed), the scripted rubric writer/scorer,
and token ids from the tiny in-process tokenizer. Labels of counterfactual branches come from the
environments' verifiers (TextWorld: our subtask checks, instead of an external judge).

Reported, side by side in one run (`--no-tokens`: collection only, without the tokenizer's cost):
- per stage, the wall time of `build_batch` over 8 tasks x 8 rollouts (datums, tokens);
- per environment, the wall time of a rubric-stage rollout (B = 8, <= 16 copies) against a plain
  rollout of the same tasks, with world copies, fork groups and policy calls per rollout.

    python benchmarks/credit_batch.py [--tasks 8] [--rollouts 8] [--out benchmarks/results/credit_batch.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from sera.envs.registry import get_env
from sera.testing.sabotage import SabotagedPolicy
from sera.testing.tiny import tiny_tokenizer
from sera.policy.tokenizing_policy import TokenizingPolicy
from sera.rubric.scripted import RubricOracle
from sera.runtime.config import RuntimeConfig
from sera.train.collect import Collector
from sera.train.method import get_method
from sera.train.stage_data import build_batch

PROTOCOL = {"textcraft-synth": "codeact", "textworld-sync": "text"}
SPLIT = {"textcraft-synth": "val", "textworld-sync": "train"}


def pick_tasks(env, n: int):
    tasks = env.load_split(SPLIT[env.name])
    medium = [t for t in tasks if t.difficulty == "medium"]
    return medium[:: max(1, len(medium) // n)][:n]


async def collect(env, tasks, stage, rollouts, tokenizer, concurrency=4):
    method = get_method("sera")
    settings = replace(env, training=replace(env.training, label_source="verifier"))
    gate = asyncio.Semaphore(concurrency)

    async def one(task, k):
        agent = SabotagedPolicy(env.oracle(tasks), rate=0.3, seed=k, protocol=PROTOCOL[env.name])
        policy = RubricOracle(agent) if tokenizer is None else TokenizingPolicy(RubricOracle(agent), tokenizer)
        collector = Collector(policy, method, settings, RuntimeConfig(sampling=env.sampling))
        async with gate:
            t0 = time.perf_counter()
            tree = await collector.collect(task, env.root_env(task), stage, seed=k)
            return tree, time.perf_counter() - t0

    results = await asyncio.gather(*(one(t, k) for t in tasks for k in range(rollouts)))
    groups = [[tree for tree, _ in results[i * rollouts:(i + 1) * rollouts]] for i in range(len(tasks))]
    return groups, [s for _, s in results], settings


def credit_cost(groups, stage, settings, tokenizer, repeats=3):
    method = get_method("sera")
    best, batch = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        batch = build_batch(groups, stage, method, settings.training, decode=tokenizer.decode)
        best = min(best, time.perf_counter() - t0)
    return {
        "trees": sum(len(g) for g in groups),
        "seconds": round(best, 4),
        "datums": len(batch.datums),
        "tokens": sum(len(d.tokens) for d in batch.datums),
        "trainable_tokens": sum(d.n_trainable for d in batch.datums),
        "counts": dict(batch.counts),
    }


def per_rollout(groups, seconds):
    trees = [t for g in groups for t in g]
    return {
        "rollouts": len(trees),
        "wall_s_mean": round(statistics.mean(seconds), 3),
        "world_clones_mean": statistics.mean(t.counters.get("world_clones", 0) for t in trees),
        "world_clones_max": max(t.counters.get("world_clones", 0) for t in trees),
        "fork_groups_mean": statistics.mean(len(t.fork_groups) for t in trees),
        "agents_mean": statistics.mean(len(t.nodes) for t in trees),
        "policy_calls_mean": statistics.mean(
            t.counters.get("policy_calls", 0) + t.counters.get("rubric_calls", 0) + t.counters.get("score_calls", 0)
            for t in trees
        ),
    }


async def main(args) -> dict:
    tokenizer = None if args.no_tokens else tiny_tokenizer()
    report: dict = {}
    for name in ("textworld-sync", "textcraft-synth"):
        env = get_env(name)
        tasks = pick_tasks(env, args.tasks)
        out: dict = {"credit_per_batch": {}, "collection": {}}
        for stage in ("execution", "delegation", "rubric_generation"):
            groups, seconds, settings = await collect(env, tasks, stage, args.rollouts, tokenizer)
            if tokenizer is not None:
                out["credit_per_batch"][stage] = credit_cost(groups, stage, settings, tokenizer)
            out["collection"][stage] = per_rollout(groups, seconds)
            print(name, stage, out["credit_per_batch"].get(stage, {}).get("seconds"), "s credit;",
                  out["collection"][stage], flush=True)
        rt, plain = out["collection"]["rubric_generation"], out["collection"]["delegation"]
        out["rubric_rollout_vs_plain_wall_ratio"] = round(rt["wall_s_mean"] / plain["wall_s_mean"], 2)
        report[name] = out
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--out", default="benchmarks/results/credit_batch.json")
    parser.add_argument("--no-tokens", action="store_true",
                        help="collect without token ids (times the rollouts alone; no credit cost)")
    args = parser.parse_args()
    result = asyncio.run(main(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: r["rubric_rollout_vs_plain_wall_ratio"] for k, r in result.items()}))
