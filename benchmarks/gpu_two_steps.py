"""Two `sera train` steps of a random-init Qwen3-4B-shaped model; sampling and learner speed, MFU.

Nothing can be downloaded on the GPU machine, so the model is built here from a hand-written
`Qwen3Config` with Qwen3-4B's shape (hidden 2560, 36 layers, 32 query / 8 KV heads of 128,
intermediate 9728, tied embeddings, rope theta 1e6) and random weights, saved with a tokenizer
that is already on the machine into `OUT/model`, and trained by `run_train` (TextCraft-Synth,
RAO, the `paper` preset scaled down by overrides) for `--steps` updates into `OUT/run`.

Vocabulary: the model's `vocab_size` is the tokenizer's length, not Qwen's 151,936. Random
weights sample every id with about equal odds, and an id the tokenizer lacks cannot be decoded,
so the padded vocabulary of the real model is not an option. The SmolLM2 tokenizer (49,152) makes
the model ~3.76B parameters instead of 4.02B; the in-process BPE tokenizer of `--tokenizer tiny`
(512) makes it ~3.63B. N in the MFU is the built model's own count.

Reported from `OUT/run/metrics.jsonl`, per step and for the last step (the first pays warm-up):
sampling tok/s (generated tokens / `time/sampling`), learner tok/s (`learner/tokens` /
`time/update`), MFU = 6·N·learner tokens / `time/update` / peak FLOP/s (`--peak-tflops`, default
989: the H100/H200 SXM dense bf16 figure; the FLOPs of attention, of recomputation under
gradient checkpointing and the LM head skipped at untrained positions are not counted; with LoRA,
as `--backend vllm` trains, the true cost is nearer 4N, so the figure reads high), the sync
time and the step's split into phases. One JSON line, then a table.

    python benchmarks/gpu_two_steps.py --out /tmp/gpu2 --backend inprocess   # a CUDA machine
    python benchmarks/gpu_two_steps.py --out /tmp/gpu2 --backend vllm        # + a vLLM python
    python benchmarks/gpu_two_steps.py --out /tmp/tiny --tiny                # any CPU, ~1 min
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

QWEN3_4B = dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                head_dim=128, intermediate_size=9728, max_position_embeddings=40960, rope_theta=1_000_000.0,
                rms_norm_eps=1e-6, tie_word_embeddings=True)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, max_position_embeddings=4096, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
            tie_word_embeddings=True)
CONFIG_FILE = Path(__file__).resolve().parents[1] / "configs" / "textcraft-synth" / "rao.yaml"
# The paper's shape of a call (TextCraft: 512 tokens, depth 3) but 2 easy tasks x K=4 trees of 4
# calls instead of 8 x 8 of 20, so that two steps fit a few minutes of one GPU.
GPU_OVERRIDES = ["batch_tasks=2", "K=4", "rollout.concurrency=8",
                 "environment.difficulty=easy", "model.microbatch_tokens=16384"]
COMMON_OVERRIDES = ["checkpoint.every=1000", "logging.tensorboard=false", "eval.every=0", "steps.min_trainable_datums=1",
                    "steps.max_refill_waves=0", "rollout.max_calls_per_agent=4"]
PHASES = ("sampling", "save_trees", "credit", "update", "sync", "checkpoint", "step")


class FlagError(SystemExit):
    """A flag combination that cannot run: one line on stderr, exit status 1."""

    def __init__(self, message: str) -> None:
        super().__init__(f"gpu_two_steps: {message}")


def mfu(params: int, tokens: float, seconds: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation of a training step: 6·N per token (forward 2N, backward 4N)."""
    if seconds <= 0 or peak_tflops <= 0:
        return 0.0
    return 6.0 * params * tokens / seconds / (peak_tflops * 1e12)


def check_flags(args: argparse.Namespace, cuda: bool, vllm_ok) -> None:
    """Refuse what cannot run, before anything is built. `vllm_ok()` is asked only when needed."""
    if args.steps < 1:
        raise FlagError(f"--steps must be at least 1 (got {args.steps})")
    if args.peak_tflops <= 0:
        raise FlagError(f"--peak-tflops must be positive (got {args.peak_tflops})")
    if args.tiny and args.backend == "vllm":
        raise FlagError("--tiny runs the in-process sampler on the CPU; drop --backend vllm")
    if not args.tiny and not cuda:
        raise FlagError("the Qwen3-4B shape needs a CUDA device (torch sees none); use --tiny on a CPU")
    if args.backend == "vllm" and not vllm_ok():
        raise FlagError("--backend vllm: no python that imports vllm (set $SERA_VLLM_PYTHON or --set sampler.vllm.python=...)")


def make_tokenizer(choice: str):
    """`tiny`: sera's in-process BPE (no files); `smollm2`: the converted SmolLM2 folder's; else a folder."""
    from transformers import AutoTokenizer

    if choice == "tiny":
        from sera.testing.tiny import tiny_tokenizer

        return tiny_tokenizer()
    if choice == "smollm2":
        from sera.policy.models import ensure_default_model

        return AutoTokenizer.from_pretrained(ensure_default_model(), local_files_only=True)
    if not Path(choice).is_dir():
        raise FlagError(f"--tokenizer {choice!r}: not 'tiny', 'smollm2' or a folder")
    return AutoTokenizer.from_pretrained(choice, local_files_only=True)


def build_model(folder: Path, shape: dict, tokenizer, cuda: bool) -> int:
    """Save a random-init Qwen3 of `shape` with `tokenizer` into `folder`; its parameter count."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **shape)
    torch.manual_seed(0)
    # On the GPU the 4B weights are drawn there in bf16 (seconds, 8 GB); the learner reloads them in fp32.
    with torch.device("cuda" if cuda else "cpu"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16 if cuda else torch.float32)
    params = sum(p.numel() for p in model.parameters())  # tied: the embedding once
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    if cuda:
        torch.cuda.empty_cache()  # the learner loads its own fp32 copy next: leave it the memory
    return params


def expert_tree_0(policy, task, k):
    """Tree 0 of each task is played by TextCraft's scripted expert: a random model fails every
    tree, a group of failures has no advantage, and the step would be skipped, not timed. The
    expert's few short calls are counted with the sampled tokens."""
    from sera.envs.registry import get_env
    from sera.policy.tokenizing_policy import TokenizingPolicy

    return TokenizingPolicy(get_env(task.env).oracle([task]), policy.tokenizer) if k == 0 else policy


def summarise(lines: list[dict], params: int, peak_tflops: float) -> dict:
    """Per-step speeds and the last step's, from the loop's metrics lines."""
    steps = []
    for r in lines:
        t = {p: r.get(f"time/{p}", 0.0) for p in PHASES}
        generated, learned = r.get("tokens/policy/completion", 0), r.get("learner/tokens", 0)
        steps.append({
            "step": r.get("step"), "trained": bool(r.get("trained")),
            "generated_tokens": generated, "prompt_tokens": r.get("tokens/policy/prompt", 0), "learner_tokens": learned,
            "sampling_tok_s": generated / t["sampling"] if t["sampling"] else 0.0,
            "learner_tok_s": learned / t["update"] if t["update"] else 0.0,
            "mfu": mfu(params, learned, t["update"], peak_tflops),
            "sync_s": t["sync"], "time_s": t,
            "sync_parts_s": {k[5:]: r[k] for k in ("sync/save_s", "sync/load_s", "sync/canary_s") if k in r},
            "peak_memory_gib": r.get("learner/peak_memory_bytes", 0) / 2**30,
        })
    return {"params": params, "peak_tflops": peak_tflops, "steps": steps, "last": steps[-1] if steps else None}


def table(summary: dict) -> str:
    """The summary as aligned text, one row per step."""
    head = f"{'step':>4} {'gen tok':>8} {'samp tok/s':>10} {'lrn tok':>8} {'lrn tok/s':>10} {'MFU %':>8} {'sync s':>7} " \
           + " ".join(f"{p[:9]:>9}" for p in PHASES)
    rows = [f"{s['step']:>4} {s['generated_tokens']:>8} {s['sampling_tok_s']:>10.1f} {s['learner_tokens']:>8} "
            f"{s['learner_tok_s']:>10.1f} {100 * s['mfu']:>8.3g} {s['sync_s']:>7.2f} "
            + " ".join(f"{s['time_s'][p]:>9.2f}" for p in PHASES) for s in summary["steps"]]
    return "\n".join([f"N = {summary['params']:,} parameters; peak {summary['peak_tflops']} TFLOP/s; times in s",
                      head, *rows])


def imports_vllm(python: str) -> bool:
    """Whether `python` (the one sera would start the server with) can import vllm."""
    try:
        return subprocess.run([python, "-c", "import vllm"], capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a new folder: OUT/model and OUT/run")
    parser.add_argument("--backend", choices=("vllm", "inprocess"), default=None,
                        help="sampler backend (default: vllm on a GPU, inprocess with --tiny)")
    parser.add_argument("--tiny", action="store_true", help="tiny Qwen3 on the CPU, fp32, in-process sampler")
    parser.add_argument("--tokenizer", default=None, help="tiny | smollm2 | a folder (default: tiny with --tiny, else smollm2)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="peak dense bf16 TFLOP/s (H100/H200 SXM: 989)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more config overrides")
    args = parser.parse_args(argv)
    args.backend = args.backend or ("inprocess" if args.tiny else "vllm")
    args.tokenizer = args.tokenizer or ("tiny" if args.tiny else "smollm2")
    return args


def overrides(args: argparse.Namespace, model_dir: Path) -> list[str]:
    """The config overrides of a run: scale, the built model, the backend, then `--set`."""
    scale = [] if args.tiny else [*GPU_OVERRIDES, "model.dtype=bf16", "model.device=cuda"]
    # The vLLM backend hot-loads LoRA adapters (full-weight sync is not built): rank 32, the paper's unused setting.
    lora = ["model.finetune=lora", "model.lora_rank=32", "model.lora_alpha=16"] if args.backend == "vllm" else []
    return [*COMMON_OVERRIDES, *scale, f"max_steps={args.steps}", f"model.name={model_dir}",
            f"sampler.backend={args.backend}", *lora, *args.set]


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    import torch

    from sera.train.config import ConfigError, load_config
    from sera.train.loop import run_train
    from sera.train.sampler_setup import vllm_python

    cuda = torch.cuda.is_available()
    out = Path(args.out)
    # The config first (a bad --set fails before minutes of model building); the folder it names is built below.
    try:
        cfg = load_config(CONFIG_FILE, preset="tiny" if args.tiny else "paper", overrides=overrides(args, out / "model"))
    except ConfigError as error:
        raise FlagError(str(error).splitlines()[0]) from None
    check_flags(args, cuda, lambda: imports_vllm(vllm_python(cfg)))
    if out.exists() and any(out.iterdir()):
        raise FlagError(f"--out {out} is not empty")
    try:
        tokenizer = make_tokenizer(args.tokenizer)
    except (OSError, ValueError) as error:  # no SmolLM2 package, a folder without tokenizer files
        raise FlagError(f"--tokenizer {args.tokenizer}: {str(error).splitlines()[0]}") from None
    start = time.perf_counter()
    params = build_model(out / "model", TINY if args.tiny else QWEN3_4B, tokenizer, cuda and not args.tiny)
    built = time.perf_counter() - start
    run_train(cfg, out / "run", tree_policy=expert_tree_0, log=lambda line: print(line, file=sys.stderr))
    lines = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    summary = {"device": torch.cuda.get_device_name() if cuda and not args.tiny else "cpu", "backend": args.backend,
               "tokenizer": args.tokenizer, "vocab": len(tokenizer), "build_s": built,
               "wall_s": time.perf_counter() - start, **summarise(lines, params, args.peak_tflops)}
    print(json.dumps(summary))
    print(table(summary))
    return summary


if __name__ == "__main__":
    main()
