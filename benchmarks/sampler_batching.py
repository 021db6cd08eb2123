"""In-process sampler throughput: 32 concurrent agent-like calls vs the same calls one at a time.

For each model (the tiny random Qwen3, SmolLM2-135M fp32, SmolLM2-135M bf16) it sends N chat
prompts of a few hundred tokens (system prompt, task, a few CodeAct turns), `--new-tokens` new
tokens each at temperature 1 with per-request seeds, first all concurrently (dynamic batching)
and then sequentially, and reports completion tokens/s of both and their ratio. The sequential
run may use only the first `--sequential` requests (its rate, tokens/s, is what is compared).
It also reports how well the sampler's logprobs agree with an fp32 learner recompute
(`batched_sequence_logprobs`) for the batched completions: for the bf16 sampler this is the
bf16-vs-fp32 mismatch that the CISPO ratio sees. On a CPU where bf16 matmuls are slower than
fp32 (no AVX-512 BF16 / AMX), the bf16 throughput runs are skipped and only 4 requests of 32
tokens are sampled for the agreement figure.

Prints one JSON object. Usage:
  python benchmarks/sampler_batching.py [--models tiny,smollm2-fp32,smollm2-bf16]
      [--requests 32] [--new-tokens 64] [--sequential 4] [--threads 0]
On a shared 2-core machine, `--threads 1` avoids OpenMP oversubscription (measured 5-10x
slowdowns with 2 threads while another process was busy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import torch

from sera.train.logprobs import batched_sequence_logprobs
from sera.policy.models import load_model
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message

SYSTEM = (
    "You are an agent in a crafting game. Your inventory is sufficient, but intermediate items may be "
    "needed. Craft the targets on top of what you already hold. Recipes give fixed multiples; scale the "
    "ingredients. Delegate independent intermediate ingredients to subagents with launch_subagent, and "
    "always await them. Answer with one to three sentences in <thought>...</thought>, then code in "
    "<python>...</python>. The code runs in a Jupyter-like cell with the tools craft, get_inventory, "
    "get_recipe, launch_subagent and finish."
)


def agent_prompt(index: int) -> list[Message]:
    """System prompt, task, and 1-4 (action, observation) turns: 200-450 tokens."""
    messages = [
        Message(role="system", content=SYSTEM),
        Message(role="user", content=f"# Task\nCraft {index % 5 + 1} iron pickaxe. Budget: 20 steps.\n"
                "Provide your next action."),
    ]
    for turn in range(1 + index % 4):
        messages += [
            Message(role="assistant", content=f"<thought>I need sticks and ingots first (step {turn}).</thought>\n"
                    f"<python>print(get_recipe('iron pickaxe'))\ncraft('{turn + 2} stick')</python>"),
            Message(role="user", content=f"[Cell {turn + 1} Output]\nRecipe: 3 iron ingot + 2 stick -> 1 iron "
                    f"pickaxe\nCrafted {turn + 2} stick. Inventory: 4 oak planks, {turn} stick, 6 iron ingot\n"
                    "Provide your next action."),
        ]
    return messages


async def run_requests(sampler: TransformersSampler, prompts, sampling, *, concurrent: bool):
    start = time.perf_counter()
    if concurrent:
        completions = await asyncio.gather(*(sampler(p, s) for p, s in zip(prompts, sampling)))
    else:
        completions = [await sampler(p, s) for p, s in zip(prompts, sampling)]
    return list(completions), time.perf_counter() - start


def agreement(learner_model, completions: list[Completion]) -> dict[str, float]:
    """Sampler logprobs vs an fp32 learner recompute of the same tokens."""
    diffs = []
    with torch.no_grad():
        for start in range(0, len(completions), 4):  # small chunks: CPU memory of a 49k-vocab batch
            chunk = completions[start : start + 4]
            recomputed = batched_sequence_logprobs(learner_model, [(c.prompt_token_ids, c.token_ids) for c in chunk])
            diffs += [(r - torch.tensor(c.logprobs)).abs() for r, c in zip(recomputed, chunk)]
    flat = torch.cat(diffs)
    return {"max_abs_diff": round(flat.max().item(), 5), "mean_abs_diff": round(flat.mean().item(), 6)}


def bf16_matmul_is_fast() -> bool:
    """Whether bf16 matmuls beat fp32 here (CPUs without AVX-512 BF16/AMX emulate bf16 slowly)."""
    timings = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, w = torch.randn(256, 576, dtype=dtype), torch.randn(1536, 576, dtype=dtype)
        torch.nn.functional.linear(x, w)
        start = time.perf_counter()
        for _ in range(5):
            torch.nn.functional.linear(x, w)
        timings[dtype] = time.perf_counter() - start
    return timings[torch.bfloat16] < timings[torch.float32]


async def bench_model(name, model, tokenizer, learner_model, args, *, throughput: bool = True) -> dict:
    """Batched then sequential runs (only the batched run, for the agreement figure, when
    `throughput` is False)."""
    prompts = [agent_prompt(i) for i in range(args.requests)]
    sampling = [SamplingParams(temperature=1.0, max_tokens=args.new_tokens, seed=i) for i in range(args.requests)]
    sampler = TransformersSampler(model, tokenizer, max_batch_size=args.requests)
    await sampler(prompts[0], SamplingParams(max_tokens=2, seed=0))  # warm-up (first-call allocations)
    batched, batched_s = await run_requests(sampler, prompts, sampling, concurrent=True)
    print(f"{name}: batched {batched_s:.1f} s", file=sys.stderr, flush=True)
    n_seq = (args.sequential or args.requests) if throughput else 0
    sequential, sequential_s = await run_requests(sampler, prompts[:n_seq], sampling[:n_seq], concurrent=False)
    print(f"{name}: sequential ({n_seq} requests) {sequential_s:.1f} s", file=sys.stderr, flush=True)
    records = sampler.batch_records[1:]
    await sampler.close()
    batched_tokens = sum(len(c.token_ids) for c in batched)
    batched_rate = batched_tokens / batched_s
    prompt_lens = [len(c.prompt_token_ids) for c in batched]
    result = {
        "model": name,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "requests": args.requests,
        "prompt_tokens": {"min": min(prompt_lens), "mean": round(statistics.mean(prompt_lens)), "max": max(prompt_lens)},
        "batched": {
            "completion_tokens": batched_tokens, "wall_s": round(batched_s, 2), "tokens_per_s": round(batched_rate, 1),
            "batch_sizes": [r.size for r in records[:3]],
        },
    }
    if throughput:
        sequential_tokens = sum(len(c.token_ids) for c in sequential)
        sequential_rate = sequential_tokens / sequential_s
        result["sequential"] = {
            "requests": n_seq, "completion_tokens": sequential_tokens, "wall_s": round(sequential_s, 2),
            "tokens_per_s": round(sequential_rate, 1),
        }
        result["speedup"] = round(batched_rate / sequential_rate, 2)
    else:
        result["throughput_skipped"] = "bf16 matmuls are slower than fp32 on this CPU (no bf16 acceleration)"
    result["logprob_agreement_vs_fp32_learner"] = agreement(learner_model, batched)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,smollm2-fp32,smollm2-bf16")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--sequential", type=int, default=4,
                        help="requests in the one-at-a-time run of SmolLM2 (the tiny model always runs all)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    smollm2_fp32 = None
    for name in args.models.split(","):
        if name == "tiny":
            model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=128, num_layers=4)
            run_args = argparse.Namespace(**{**vars(args), "sequential": 0})
            results.append(asyncio.run(bench_model(name, model, tokenizer, model, run_args)))
        elif name in ("smollm2-fp32", "smollm2-bf16"):
            if smollm2_fp32 is None:
                smollm2_fp32 = load_model("smollm2", dtype="float32")
            learner, tokenizer = smollm2_fp32
            if name == "smollm2-fp32":
                results.append(asyncio.run(bench_model(name, learner, tokenizer, learner, args)))
                continue
            model = load_model("smollm2", dtype="bfloat16")[0]
            if bf16_matmul_is_fast():
                results.append(asyncio.run(bench_model(name, model, tokenizer, learner, args)))
            else:  # emulated bf16 would take many minutes: only a small run for the agreement figure
                small = argparse.Namespace(**{**vars(args), "requests": 4, "new_tokens": 32})
                results.append(asyncio.run(bench_model(name, model, tokenizer, learner, small, throughput=False)))
        else:
            parser.error(f"unknown model {name!r}; choose from tiny, smollm2-fp32, smollm2-bf16")
    print(json.dumps({"torch_threads": torch.get_num_threads(), "new_tokens": args.new_tokens, "results": results},
                     indent=2))


if __name__ == "__main__":
    main()
