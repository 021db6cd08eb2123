"""RL steps on-policy vs sampling the next round during the update (`steps.max_offpolicy_versions`).

Two `sera train` runs of the same config from the same weights (`--init-from`, e.g. the SFT
folder of a `make run`: from the base model every step is skipped and nothing overlaps), one
with `steps.max_offpolicy_versions: 0`, one with 1, each in a subprocess of its own, one after
the other. Reported per run: wall time of the steps, the mean step time after the first, and the
mean sampling / update / wait-for-the-round-ahead / sync seconds; then the ratio of the mean step
times. On a CPU both phases compete for the same cores, so expect little; with a sampler on other
hardware (a vLLM server, Ray workers) the step approaches max(sampling, update). Run alone.

    python benchmarks/lookahead_steps.py --init-from runs/main/sft [--config configs/main/textcraft-cpu.yaml] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PHASES = ("sampling", "update", "wait_ahead", "sync")


def one_run(config: str, init_from: str, steps: int, versions: int, out: Path) -> dict:
    code = (
        "import sys; from sera.train.config import load_config; from sera.train.loop import run_train; "
        f"cfg = load_config({config!r}, overrides=['steps.max_steps={steps}', 'steps.max_offpolicy_versions={versions}', "
        "'steps.max_consecutive_skips=100'], host=True); "
        f"run_train(cfg, {str(out)!r}, init_from={init_from!r}, log=lambda line: None)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    later = records[1:] or records
    return {
        "max_offpolicy_versions": versions,
        "steps": len(records),
        "updates": sum(bool(r["trained"]) for r in records),
        "rounds_ahead": sum(r.get("offpolicy/ahead", 0) for r in records),
        "steps_wall_s": round(sum(r["time/step"] for r in records), 1),
        "mean_step_s_after_first": round(statistics.mean(r["time/step"] for r in later), 1),
        **{f"mean_{p}_s": round(statistics.mean(r.get(f"time/{p}", 0.0) for r in later), 1) for p in PHASES},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/main/textcraft-cpu.yaml")
    parser.add_argument("--init-from", required=True, help="an SFT (or train) run folder to start from")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lookahead-") as tmp:
        runs = [one_run(args.config, args.init_from, args.steps, versions, Path(tmp) / f"v{versions}")
                for versions in (0, 1)]
    print(json.dumps({
        "cpu": platform.processor() or platform.machine(), "config": args.config, "runs": runs,
        "step_ratio_ahead_vs_on_policy": round(runs[1]["mean_step_s_after_first"] / runs[0]["mean_step_s_after_first"], 2),
    }, indent=1))


if __name__ == "__main__":
    main()
