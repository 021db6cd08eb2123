"""Learner throughput against a plain transformers training step, and the masked LM head's gain.

For each model (`tiny`: `sera.testing.tiny`; `smollm2`: the embedded SmolLM2-135M-Instruct),
each mode (`full` fine-tune, `lora` r=32 on all linear layers) and each dtype (`float32`;
`bfloat16` autocast only where the CPU has AVX-512 BF16/AMX, or on CUDA), over the same synthetic
datums (merged-agent shape: a prompt, then alternating trained and untrained blocks):

- `learner`: `TorchLearner.train_step` (masked head, CISPO, clip, AdamW);
- `plain`: `model(input_ids).logits` → log-softmax → gather at trained positions → the same
  CISPO token mean → backward → clip → AdamW, the textbook transformers step;
- `head_full` / `head_masked`: forward + backward only, full logits vs hidden states gathered
  at trained positions before `lm_head` (time and peak memory).

Learner and plain steps alternate in one subprocess (load from other jobs hits both alike); each
head case runs in a subprocess of its own so that its peak RSS (`resource`) is its own. Reported:
median step seconds over `--repeats` after `--warmup`, tokens/s, peak RSS and the peak above
the RSS after setup; per (model, mode, dtype) the ratio learner/plain tokens/s (goal ≥ 0.8) and
the masked head's time and memory gain. Prints JSON.

    python benchmarks/learner_throughput.py [--models tiny,smollm2] [--modes full,lora]
        [--datums 2] [--length 384] [--repeats 2] [--tiny-repeats 20] [--warmup 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from sera.train.batching import microbatches
from sera.train.datums import Datum
from sera.train.learner import LearnerConfig, LoraSettings, TorchLearner, cpu_supports_bf16
from sera.train.losses import cispo_loss

KINDS = ("throughput", "head_full", "head_masked")


def synthetic_datums(n: int, length: int, vocab: int, seed: int = 0) -> list[Datum]:
    """`n` datums of `length` tokens: 30% prompt, then blocks of 24 tokens, trained and not in
    turn (completions and observations of a merged agent); sampler logprobs near -2."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tokens = tuple(rng.randrange(3, vocab) for _ in range(length))
        prompt = int(0.3 * length)
        mask = tuple(p >= prompt and ((p - prompt) // 24) % 2 == 0 for p in range(length))
        sampler = tuple(-2.0 + rng.uniform(-0.1, 0.1) if m else math.nan for m in mask)
        out.append(Datum(tokens=tokens, mask=mask, sampler_logprobs=sampler, advantage=1.0 if i % 2 else -1.0,
                         depth=0, trajectory_id=f"b{i}", node_id=f"b{i}", stage="execution", steps=()))
    return out


def current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def load(model_name: str):
    if model_name == "tiny":
        from sera.testing.tiny import tiny_model_and_tokenizer

        model, _ = tiny_model_and_tokenizer(0, initializer_range=0.02)
        return model
    from sera.policy.models import load_model

    model, _ = load_model(model_name, dtype="float32")
    return model


def run_case(case: dict) -> dict:
    """One measurement in this process (called in the subprocess)."""
    torch.manual_seed(0)
    model = load(case["model"])
    lora = LoraSettings(rank=32, alpha=32) if case["mode"] == "lora" else None
    config = LearnerConfig(lr=1e-6, dtype=case["dtype"], lora=lora, max_tokens_per_microbatch=10**9)
    learner = TorchLearner(model, config)  # the plain cases reuse its (peft-wrapped) model and optimizer
    datums = synthetic_datums(case["datums"], case["length"], model.config.vocab_size)
    [batch] = microbatches(datums, 10**9)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=case["dtype"] == "bfloat16")
    learner.model.train()

    def plain_logprobs():
        with autocast:
            logits = learner.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1)  # [B, T, V]: what the masked head avoids
        return logprobs[batch.rows, batch.cols].gather(-1, batch.targets[:, None])[:, 0]

    def loss_of(logprobs):
        return cispo_loss(logprobs, batch.sampler_logprobs, batch.advantages, torch.ones_like(logprobs, dtype=torch.bool))

    def step(kind: str) -> None:
        if kind == "learner":
            learner.train_step(datums, "cispo")
            return
        logprobs = learner.token_logprobs(batch) if kind == "head_masked" else plain_logprobs()
        loss_of(logprobs).backward()
        if kind == "plain":
            torch.nn.utils.clip_grad_norm_(learner._params, 1.0)
            learner.optimizer.step()
        learner.optimizer.zero_grad(set_to_none=True)

    # `throughput` alternates learner and plain steps in one process, so load from other jobs
    # hits both alike; the head cases run alone, so that their peak RSS is their own.
    kinds = ("learner", "plain") if case["kind"] == "throughput" else (case["kind"],)
    setup_rss = current_rss()
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for i in range(case["warmup"] + case["repeats"]):
        for kind in kinds:
            start = time.perf_counter()
            step(kind)
            if i >= case["warmup"]:
                times[kind].append(time.perf_counter() - start)
    result = {**case, "tokens": batch.real_tokens, "trained_tokens": batch.trained_tokens}
    for kind in kinds:
        seconds = statistics.median(times[kind])
        result[f"{kind}_seconds"] = round(seconds, 4)
        result[f"{kind}_tokens_per_s"] = round(batch.real_tokens / seconds, 1)
    result["peak_rss_mb"] = round(peak_rss() / 2**20, 1)
    result["peak_above_setup_mb"] = round((peak_rss() - setup_rss) / 2**20, 1)
    return result


def spawn(case: dict) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--case", json.dumps(case)], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        return {**case, "error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"rc {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(results: list[dict]) -> list[dict]:
    by = {(r["model"], r["mode"], r["dtype"], r["kind"]): r for r in results if "error" not in r}
    rows = []
    for model, mode, dtype in sorted({k[:3] for k in by}):
        row = {"model": model, "mode": mode, "dtype": dtype}
        pair = by.get((model, mode, dtype, "throughput"))
        if pair:
            row["learner_tokens_per_s"] = pair["learner_tokens_per_s"]
            row["plain_tokens_per_s"] = pair["plain_tokens_per_s"]
            row["learner_over_plain"] = round(pair["learner_tokens_per_s"] / pair["plain_tokens_per_s"], 3)
        full, masked = by.get((model, mode, dtype, "head_full")), by.get((model, mode, dtype, "head_masked"))
        if full and masked:
            row["masked_head_speedup"] = round(full["head_full_seconds"] / masked["head_masked_seconds"], 3)
            row["peak_above_setup_mb_masked_vs_full"] = [masked["peak_above_setup_mb"], full["peak_above_setup_mb"]]
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--modes", default="full,lora")
    parser.add_argument("--dtypes", default="auto", help="comma list, or auto: float32 (+ bfloat16 if supported)")
    parser.add_argument("--datums", type=int, default=2)
    parser.add_argument("--length", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tiny-repeats", type=int, default=20, help="repeats for the tiny model (steps of ~50 ms)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return
    dtypes = ["float32"] + (["bfloat16"] if cpu_supports_bf16() else []) if args.dtypes == "auto" else args.dtypes.split(",")
    results = []
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            for dtype in dtypes:
                kinds = KINDS if mode == "full" else ("throughput",)  # the head gain does not depend on LoRA
                for kind in kinds:
                    case = {"model": model, "mode": mode, "dtype": dtype, "kind": kind, "datums": args.datums,
                            "length": args.length, "warmup": args.warmup,
                            "repeats": args.tiny_repeats if model == "tiny" else args.repeats}
                    results.append(spawn(case))
                    print(json.dumps(results[-1]), file=sys.stderr)
    report = {
        "machine": {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "bf16": cpu_supports_bf16(),
                    "threads": torch.get_num_threads(), "load_avg": os.getloadavg(), "python": platform.python_version()},
        "summary": summarise(results),
        "cases": results,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
