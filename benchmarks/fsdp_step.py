"""One training step, FSDP2 over 2 processes vs one process, on the same work (CPU, gloo, fp32).

`single`: `TorchLearner.train_step` in one spawned process with `--threads` torch threads, and
`single_rank_threads` with one rank's share of them (`--threads // world`).
`fsdp`: `FsdpLearner.train_step` in `--world` spawned processes (gloo) with `--threads // world`
threads each, so `single` and `fsdp` use the same cores. The same datums and random initial weights for both;
model `tiny` (`sera.testing.tiny`) or `smollm2` (SmolLM2-135M's shape, random weights, nothing
downloaded). Reported: median step seconds over `--repeats` after `--warmup`, real tokens/s, the
ratio fsdp/single seconds (above 1: FSDP is slower), and the largest weight difference after
the timed steps (the two runs take the same updates). Prints JSON.

On CPU this measures the price of sharding (all-gathers, reduce-scatters, the all-reduce of |M|,
padding passes) against splitting the work; a multi-GPU machine is where FSDP2 pays off.

    python benchmarks/fsdp_step.py [--model tiny|smollm2] [--datums 4] [--length 256]
        [--repeats 3] [--warmup 1] [--world 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import time

import torch

from sera.train.datums import Datum
from sera.train.distributed import run_local
from sera.train.learner import LearnerConfig, TorchLearner


def synthetic_datums(n: int, length: int, vocab: int, seed: int = 0) -> list[Datum]:
    """`n` datums of about `length` tokens: a 30% prompt, then 24-token blocks trained and not
    in turn; sampler log-probabilities near -2."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = length - (i % 3) * length // 8  # mixed lengths, as a real step has
        tokens = tuple(rng.randrange(3, vocab) for _ in range(size))
        prompt = int(0.3 * size)
        mask = tuple(p >= prompt and ((p - prompt) // 24) % 2 == 0 for p in range(size))
        sampler = tuple(-2.0 + rng.uniform(-0.1, 0.1) if m else math.nan for m in mask)
        out.append(Datum(tokens=tokens, mask=mask, sampler_logprobs=sampler, advantage=1.0 if i % 2 else -1.0,
                         depth=0, trajectory_id=f"b{i}", node_id=f"b{i}", stage="execution", steps=()))
    return out


def build_model(name: str) -> torch.nn.Module:
    """Random weights from seed 0 (identical in every process)."""
    if name == "tiny":
        from sera.testing.tiny import tiny_model_and_tokenizer

        return tiny_model_and_tokenizer(0, initializer_range=0.02)[0]
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(  # SmolLM2-135M's shape
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config)


def measure(rank: int, world: int, options: dict, sharded: bool) -> dict:
    """Run in each spawned process: warm-up and timed steps; rank 0's timings and weights."""
    model = build_model(options["model"])
    config = LearnerConfig(lr=1e-5, max_tokens_per_microbatch=options["microbatch_tokens"])
    if sharded:
        from sera.train.fsdp_learner import FsdpLearner

        learner: TorchLearner = FsdpLearner(model, config)
    else:
        learner = TorchLearner(model, config)
    datums = synthetic_datums(options["datums"], options["length"], model.config.vocab_size)
    seconds, tokens = [], 0
    for i in range(options["warmup"] + options["repeats"]):
        start = time.perf_counter()
        stats = learner.train_step(datums, "cispo")
        elapsed = time.perf_counter() - start
        if i >= options["warmup"]:
            seconds.append(elapsed)
            tokens = stats.forward_backward.tokens
    weights = learner.full_weights() if sharded else {n: t.detach().clone() for n, t in learner.model.state_dict().items()}
    return {"seconds": seconds, "tokens": tokens, "weights": weights if rank == 0 else {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--datums", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--microbatch-tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    options = {k: getattr(args, k) for k in ("model", "datums", "length", "microbatch_tokens", "repeats", "warmup")}
    results = {}
    share = max(1, args.threads // args.world)
    cases = (("single", 1, False, args.threads), ("single_rank_threads", 1, False, share), ("fsdp", args.world, True, share))
    for name, world, sharded, threads in cases:
        started = time.perf_counter()
        [first, *_] = run_local(measure, world, args=(options, sharded), timeout_s=3000, threads_per_rank=threads)
        median = statistics.median(first["seconds"])
        results[name] = {
            "processes": world, "threads_per_process": threads, "median_step_s": round(median, 4),
            "steps_s": [round(s, 4) for s in first["seconds"]], "tokens_per_s": round(first["tokens"] / median, 1),
            "wall_s_with_spawn": round(time.perf_counter() - started, 1), "weights": first["weights"],
        }
    single, fsdp = results["single"].pop("weights"), results["fsdp"].pop("weights")
    results["single_rank_threads"].pop("weights")
    report = {
        "options": options, "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2), **results,
        "ratio_fsdp_over_single_s": round(results["fsdp"]["median_step_s"] / results["single"]["median_step_s"], 3),
        "ratio_fsdp_over_single_rank_threads_s": round(
            results["fsdp"]["median_step_s"] / results["single_rank_threads"]["median_step_s"], 3
        ),
        "max_weight_diff": max(float((fsdp[n] - single[n]).abs().max()) for n in single),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
