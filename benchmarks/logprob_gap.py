"""Sampler-learner log-probability gap after updates, fp32 and bf16 (the weight-sync canary's bound).

For each model (`tiny`, `smollm2`) a `TorchLearner` and a `TransformersSampler` share one module
(as in `sera train`). After each of `--updates` CISPO steps on synthetic datums the canary runs
(`sera.serving.weight_sync.canary_gaps`): the sampler completes a fixed probe greedily in fp32, the
learner recomputes the log-probs of the same tokens

- `fp32`: in fp32 (what `sera train` checks against 1e-3);
- `bf16`: under bf16 autocast over the same fp32 weights (what a bf16 learner would compute; the
  sampler stays fp32). This CPU may lack native bf16: the learner's refusal is bypassed here,
  since only the numbers matter, not the speed.

Also the gap over the updates' own trained tokens (the ratio's denominator drift is zero by
construction in-process; reported to show it). Prints JSON.

    python benchmarks/logprob_gap.py [--models tiny,smollm2] [--updates 3]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import platform
import statistics

import torch

from sera.policy.transformers_sampler import TransformersSampler
from sera.serving.weight_sync import canary_gaps
from sera.train.learner import LearnerConfig, TorchLearner, cpu_supports_bf16, load_causal_lm

from learner_throughput import synthetic_datums  # noqa: E402  (same folder)


def load(name: str):
    if name == "tiny":
        from sera.testing.tiny import tiny_model_and_tokenizer

        return tiny_model_and_tokenizer(seed=0)
    return load_causal_lm(name)


def measure(name: str, updates: int, lr: float) -> dict:
    model, tokenizer = load(name)
    learner = TorchLearner(model, LearnerConfig(lr=lr, pad_id=tokenizer.pad_token_id or 0), tokenizer=tokenizer)
    sampler = TransformersSampler(learner.model, tokenizer)
    fp32_config = learner.config
    bf16_config = dataclasses.replace(fp32_config, dtype="bfloat16")
    rows = []
    try:
        for update in range(updates + 1):
            if update:
                datums = synthetic_datums(2, 256, len(tokenizer), seed=update)
                learner.train_step(datums)
            learner.config = fp32_config
            fp32 = canary_gaps(sampler, learner)
            learner.config = bf16_config
            bf16 = canary_gaps(sampler, learner)
            learner.config = fp32_config
            rows.append({"update": update, "fp32_max": fp32[0], "fp32_mean": fp32[1],
                         "bf16_max": bf16[0], "bf16_mean": bf16[1], "tokens": fp32[2]})
    finally:
        asyncio.run(sampler.close())
    return {"model": name, "lr": lr, "rows": rows,
            "fp32_max": max(r["fp32_max"] for r in rows), "bf16_max": max(r["bf16_max"] for r in rows),
            "bf16_mean": statistics.mean(r["bf16_mean"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--updates", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    results = [measure(m, args.updates, lr=1e-4 if m == "tiny" else 1e-5) for m in args.models.split(",")]
    print(json.dumps({"cpu": platform.processor() or platform.machine(), "native_bf16": cpu_supports_bf16(),
                      "torch": torch.__version__, "threads": torch.get_num_threads(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
