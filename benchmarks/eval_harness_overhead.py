"""The evaluation harness's own cost per task: `sera.eval.harness.evaluate` against the bare runtime.

The same tasks, the same scripted oracle, the same paper-protocol settings, seeds and
concurrency run side by side in one process, alternating (bare, harness, bare, harness, ...) so
that a noisy machine affects both alike:

- **bare**: `sera.runtime.rollout.run_rollout` for every task, `concurrency` at once, trees kept
  in memory;
- **harness**: `evaluate(...)` into a fresh folder: fingerprint, lock, resume check, every tree
  made JSON-safe and written atomically, progress bar off, summary written (the partial summary
  rewritten at most once a second, the default).

`--summary-modes` adds harness variants that differ only in how often the partial `summary.json`
is rewritten (`summary_every_s`), in the same alternation: `end` (None: at the start and the end
only), `every` (0: after every finished tree), `throttled` (the default, 1 s). Their ratios to
`end` are the cost of the mid-run rewrites.

Prints JSON: per environment, the median wall seconds of each over `--repeats`, per task, the
difference per task and the ratio harness / bare.

    python benchmarks/eval_harness_overhead.py [--env textcraft-synth --env textworld-sync] [--limit 64] [--repeats 3]
    python benchmarks/eval_harness_overhead.py --env textcraft-synth --limit 200 --repeats 3 --summary-modes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from sera.envs.registry import get_env
from sera.eval.harness import SUMMARY_EVERY_S, evaluate
from sera.eval.protocol import resolve_settings
from sera.eval.seeds import sample_seed
from sera.runtime.rollout import run_rollout

SPLIT = {"textcraft-synth": "val", "textworld-sync": "test"}
SUMMARY_MODES = {"end": None, "every": 0.0, "throttled": SUMMARY_EVERY_S}
"""`--summary-modes`: harness variant -> `summary_every_s`."""


async def bare(tasks, policy, spec, config, concurrency: int, seed: int = 0) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(task):
        rollout_seed = sample_seed(seed, task.id, 0)
        async with gate:
            return await run_rollout(task, policy, spec.root_env(task),
                                     replace(config, sampling=replace(config.sampling, seed=rollout_seed)), seed=rollout_seed)

    start = time.perf_counter()
    trees = await asyncio.gather(*(one(t) for t in tasks))
    assert len(trees) == len(tasks)
    return time.perf_counter() - start


async def harness(tasks, policy, spec, config, concurrency: int, out: Path, summary_every_s: float | None = SUMMARY_EVERY_S) -> float:
    start = time.perf_counter()
    summary = await evaluate(tasks, policy, spec.root_env, out, env_name=spec.name, split=SPLIT[spec.name],
                             policy_name="oracle", config=config, concurrency=concurrency, show_progress=False,
                             summary_every_s=summary_every_s)
    assert summary.overall.tasks == len(tasks)
    return time.perf_counter() - start


def measure(env: str, limit: int | None, repeats: int, concurrency: int, modes: bool = False) -> dict:
    spec = get_env(env)
    tasks = spec.load_split(SPLIT[env])
    tasks = tasks[:limit] if limit else tasks
    config = resolve_settings("paper", env, spec.sampling).config
    policy = spec.oracle(tasks)
    times: dict[str, list[float]] = {"bare": [], "harness": [], **({f"summary_{m}": [] for m in SUMMARY_MODES} if modes else {})}
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bare(tasks[:4], policy, spec, config, concurrency))  # warm caches (recipes, modules)
        for r in range(repeats):
            times["bare"].append(asyncio.run(bare(tasks, policy, spec, config, concurrency)))
            times["harness"].append(asyncio.run(harness(tasks, policy, spec, config, concurrency, Path(tmp) / f"r{r}")))
            for mode, every in SUMMARY_MODES.items() if modes else ():
                times[f"summary_{mode}"].append(asyncio.run(harness(tasks, policy, spec, config, concurrency,
                                                                    Path(tmp) / f"{mode}{r}", every)))
            print(f"repeat {r}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = {}
    if modes:
        extra["summary_rewrite_ratio"] = {m: med[f"summary_{m}"] / med["summary_end"] for m in SUMMARY_MODES}
        extra["summary_s"] = {m: med[f"summary_{m}"] for m in SUMMARY_MODES}
    return {
        "env": env, "tasks": len(tasks), "repeats": repeats, "concurrency": concurrency,
        "bare_s": med["bare"], "harness_s": med["harness"],
        "bare_per_task_ms": 1000 * med["bare"] / len(tasks), "harness_per_task_ms": 1000 * med["harness"] / len(tasks),
        "overhead_per_task_ms": 1000 * (med["harness"] - med["bare"]) / len(tasks),
        "ratio": med["harness"] / med["bare"], **extra, "all_s": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", action="append", choices=sorted(SPLIT), help="environment (repeatable; default both)")
    parser.add_argument("--limit", type=int, default=64, help="first N tasks of the split (0: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts at once (sera eval's default)")
    parser.add_argument("--summary-modes", action="store_true",
                        help="also time the partial summary's rewrite modes (end / every tree / throttled), side by side")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    results = [measure(env, args.limit or None, args.repeats, args.concurrency, args.summary_modes)
               for env in args.env or sorted(SPLIT)]
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
