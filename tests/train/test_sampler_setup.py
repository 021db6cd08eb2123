"""`sera.train.sampler_setup`: the trainer's `sampler` config turned into the plain values that
`sera.serving` takes (no server is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sera.serving.vllm_sync import VLLM_FP32_BOUND
from sera.serving.weight_sync import BF16_BOUND
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.train import sampler_setup
from sera.train.config import load_config

CONFIG = "configs/letters/rao.yaml"
LORA = ["model.finetune=lora", "model.lora_rank=8", "model.lora_alpha=16", "sampler.backend=vllm"]


def test_vllm_settings_carry_the_config_and_what_the_server_must_match_of_the_learner() -> None:
    cfg = load_config(CONFIG, overrides=[*LORA, "model.dtype=fp32", "sampler.vllm.dtype=fp32", "sampler.vllm.python=/py",
                                         "sampler.vllm.restarts=3", "sampler.vllm.extra_args=[--a,--b]"])
    v = sampler_setup.vllm_settings(cfg)
    assert (v.python, v.dtype, v.canary_bound, v.lora_rank, v.max_model_len) == (
        "/py", "float32", VLLM_FP32_BOUND, 8, cfg.rollout.context)
    assert (v.base_url, v.restarts, v.extra_args) == (None, 3, ("--a", "--b"))
    bf16 = sampler_setup.vllm_settings(load_config(CONFIG, overrides=[*LORA, "sampler.vllm.dtype=bf16"]))
    assert (bf16.dtype, bf16.canary_bound) == ("bfloat16", BF16_BOUND)


def test_the_vllm_python_falls_back_to_the_environment_then_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(CONFIG, overrides=LORA)
    monkeypatch.setenv("SERA_VLLM_PYTHON", "/env/python")
    assert sampler_setup.vllm_python(cfg) == "/env/python"
    monkeypatch.delenv("SERA_VLLM_PYTHON")
    assert sampler_setup.vllm_python(cfg) == str(Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python")


def test_only_a_server_sera_starts_gets_a_saved_base(tmp_path: Path) -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    inprocess = load_config(CONFIG)
    given = load_config(CONFIG, overrides=[*LORA, "sampler.vllm.base_url=http://127.0.0.1:1/v1"])
    assert sampler_setup.serving_base_if_needed(inprocess, tmp_path, model, tokenizer, False) is None
    assert sampler_setup.serving_base_if_needed(given, tmp_path, model, tokenizer, False) is None
    started = load_config(CONFIG, overrides=LORA)
    folder = sampler_setup.serving_base_if_needed(started, tmp_path, model, tokenizer, False)
    assert folder == tmp_path / "sampler_base" and (folder / "config.json").is_file()
