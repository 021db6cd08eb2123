"""The in-process sampler against this CPU's limit for the same work, side by side in one run.

For each dtype (fp32, bf16) it takes the same `--requests` agent-like chat prompts and samples
`--new-tokens` tokens for each at temperature 1:

- **limit**: one plain batched `model.generate` over the whole batch (left-padded, KV cache,
  no stop checks, exactly `--new-tokens` each): what transformers does with a static batch; its
  prefill alone (one batched forward over the padded prompts) is timed too, so the decode rate
  is the rest;
- **sampler**: `TransformersSampler` with every request sent at once (continuous batching, each
  prompt prefilled in its own row, per-request seeds and stop checks).

It prints one JSON object with both rates in completion tokens/s and the sampler's ratio to the
limit. Run it alone on the machine (two compute jobs on 2 cores ruin every figure). Usage:
  python benchmarks/sampler_limit.py [--requests 16] [--new-tokens 64] [--dtypes fp32,bf16]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import time
from pathlib import Path

import torch

from sera.policy.models import load_model
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.policy import SamplingParams

_spec = importlib.util.spec_from_file_location("sampler_batching", Path(__file__).with_name("sampler_batching.py"))
_batching = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_batching)  # its agent-like prompts, so both benchmarks measure the same work
agent_prompt = _batching.agent_prompt
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def plain_generate(model, tokenizer, prompts: list[list[int]], new_tokens: int) -> dict:
    """One static left-padded batch through `model.generate`: prefill and whole-run rates."""
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        model.generate(ids[:, -8:], attention_mask=mask[:, -8:], max_new_tokens=2, do_sample=False, pad_token_id=pad)
        start = time.perf_counter()
        model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
        prefill_s = time.perf_counter() - start
        torch.manual_seed(0)
        start = time.perf_counter()
        model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=True, temperature=1.0, top_k=0, pad_token_id=pad)
        total_s = time.perf_counter() - start
    tokens = len(prompts) * new_tokens
    return {"wall_s": round(total_s, 2), "completion_tokens": tokens, "tokens_per_s": round(tokens / total_s, 1),
            "prefill_s": round(prefill_s, 2), "prefill_tokens_per_s": round(sum(map(len, prompts)) / prefill_s),
            "decode_tokens_per_s": round(tokens / max(total_s - prefill_s, 1e-9), 1)}


async def sampler_run(model, tokenizer, messages, new_tokens: int) -> dict:
    sampler = TransformersSampler(model, tokenizer, max_batch_size=len(messages))
    await sampler(messages[0], SamplingParams(max_tokens=2, seed=0))  # warm-up allocations
    sampling = [SamplingParams(temperature=1.0, max_tokens=new_tokens, seed=i) for i in range(len(messages))]
    start = time.perf_counter()
    completions = await asyncio.gather(*(sampler(m, s) for m, s in zip(messages, sampling)))
    wall = time.perf_counter() - start
    await sampler.close()
    tokens = sum(len(c.token_ids) for c in completions)
    return {"wall_s": round(wall, 2), "completion_tokens": tokens, "tokens_per_s": round(tokens / wall, 1),
            "prompt_token_ids": [c.prompt_token_ids for c in completions]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--dtypes", default="fp32,bf16")
    args = parser.parse_args()
    messages = [agent_prompt(i) for i in range(args.requests)]
    results = []
    for name in args.dtypes.split(","):
        model, tokenizer = load_model("smollm2", dtype=DTYPES[name])
        model.eval()
        ours = asyncio.run(sampler_run(model, tokenizer, messages, args.new_tokens))
        limit = plain_generate(model, tokenizer, ours.pop("prompt_token_ids"), args.new_tokens)
        results.append({"dtype": name, "limit_plain_generate": limit, "sampler": ours,
                        "sampler_to_limit": round(ours["tokens_per_s"] / limit["tokens_per_s"], 2)})
    print(json.dumps({"cpu": _cpu_name(), "torch_threads": torch.get_num_threads(), "requests": args.requests,
                      "new_tokens": args.new_tokens, "results": results}, indent=2))


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
