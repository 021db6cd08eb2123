"""Time per training step by phase, and peak RSS, for the `tiny` and `cpu` presets.

Each case is one `sera train` run (`run_train`) in a subprocess of its own, so its peak RSS is its
own; the phases are the loop's `time/*` fields of `metrics.jsonl` (sampling, save_trees, credit,
update, sync, eval, checkpoint, step), averaged over the run's steps (the first step is reported
apart: it pays for warm-up). Cases:

- `tiny-letters`: the letters world, tiny model (64 one-call trees a step);
- `tiny-textcraft`: TextCraft-Synth easy, tiny model, RAO; tree 0 of each task is played by the
  scripted expert (so that groups are mixed and every step trains, as in the loop tests);
- `cpu-textcraft`: the same with the `cpu` preset (SmolLM2-135M, 2 tasks x K=2, 8 calls x 256
  tokens).

    python benchmarks/train_step_phases.py [--cases tiny-letters,tiny-textcraft,cpu-textcraft] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "tiny-letters": ("configs/letters/rao.yaml", "tiny", False),
    "tiny-textcraft": ("configs/textcraft-synth/rao.yaml", "tiny", True),
    "cpu-textcraft": ("configs/textcraft-synth/rao.yaml", "cpu", True),
}
PHASES = ("sampling", "save_trees", "credit", "update", "sync", "eval", "checkpoint", "step")


def child(case: str, steps: int, out: str) -> None:
    from sera.envs.registry import get_env
    from sera.policy.tokenizing_policy import TokenizingPolicy
    from sera.train import loop
    from sera.train.config import load_config

    config, preset, expert = CASES[case]
    overrides = [f"max_steps={steps}", "checkpoint.every=1000", "logging.tensorboard=false", "steps.min_trainable_datums=1"]
    if case == "tiny-textcraft":
        overrides.append("rollout.max_calls_per_agent=4")  # the expert needs 4 calls for an easy task
    cfg = load_config(config, preset=preset, overrides=overrides)

    def tree_policy(policy, task, k):
        return TokenizingPolicy(get_env(task.env).oracle([task]), policy.tokenizer) if expert and k == 0 else policy

    start = time.perf_counter()
    loop.run_train(cfg, out, tree_policy=tree_policy, log=lambda line: None)
    print(json.dumps({"wall_s": time.perf_counter() - start,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def summarise(case: str, run: Path, reported: dict) -> dict:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rest = lines[1:] or lines
    return {
        "case": case, "steps": len(lines), "trained": sum(bool(r["trained"]) for r in lines),
        "first_step_s": {p: round(lines[0].get(f"time/{p}", 0.0), 3) for p in PHASES},
        "mean_step_s": {p: round(statistics.mean(r.get(f"time/{p}", 0.0) for r in rest), 3) for p in PHASES},
        "tokens_per_step": statistics.mean(r.get("tokens/policy/completion", 0) for r in lines),
        "trained_tokens_per_step": statistics.mean(r.get("trained_tokens", 0) for r in lines),
        **reported,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.out)
        return
    results = []
    for case in args.cases.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            proc = subprocess.run([sys.executable, __file__, "--child", case, "--steps", str(args.steps), "--out", str(run)],
                                  capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if proc.returncode:
                raise SystemExit(f"{case} failed:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
            results.append(summarise(case, run, json.loads(proc.stdout.strip().splitlines()[-1])))
    print(json.dumps({"cpu": platform.processor() or platform.machine(), "load_avg": os.getloadavg(),
                      "results": results}, indent=1))


if __name__ == "__main__":
    main()
