"""A `sera train` checkpoint (full weights or LoRA) and `save_for_sampler` folders as `--model`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from sera.cli import app
from sera.policy.checkpoint_model import CheckpointModelError, load_trained, resolve
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.checkpoints.store import save_checkpoint
from sera.train.config import dump_config, load_config
from sera.train.learner import LearnerConfig, LoraSettings, TorchLearner

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "textcraft-synth" / "rao.yaml"


def _train_run(root: Path, *, lora: bool = False) -> tuple[Path, dict[str, torch.Tensor]]:
    """A run directory as `sera train` writes it (config.yaml, checkpoints/step_000001/learner.pt)
    with weights that differ from the seeded base model; returns it and the saved weights."""
    overrides = ["model.finetune=lora", "model.lora_rank=4", "model.lora_alpha=8"] if lora else []
    cfg = load_config(CONFIG, preset="tiny", overrides=overrides)
    run = root / "run"
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(cfg))
    model, tokenizer = tiny_model_and_tokenizer(seed=cfg.seed)
    settings = LoraSettings(rank=4, alpha=8.0) if lora else None
    learner = TorchLearner(model, LearnerConfig(lora=settings), tokenizer=tokenizer)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in learner.model.parameters():
            if p.requires_grad:  # full: every weight; LoRA: the adapter (lora_B starts at zero)
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
    state = learner.state_dict()
    save_checkpoint(run / "checkpoints", {"learner.pt": lambda f: torch.save(state, f), "state.json": b"{}"},
                    step=1, version=1, round=1)
    return run, state["weights"]


def test_a_full_weights_checkpoint_loads_the_saved_weights(tmp_path):
    run, saved = _train_run(tmp_path)
    for given in (run, run / "checkpoints", run / "checkpoints" / "step_000001"):
        source = resolve(str(given))
        assert source is not None and source.base == "tiny" and source.identity.startswith("step_000001 learner.pt sha256:")
    model, _ = load_trained(source)
    loaded = model.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    base, _ = tiny_model_and_tokenizer(seed=load_config(run / "config.yaml").seed)
    assert not torch.equal(base.state_dict()["lm_head.weight"], loaded["lm_head.weight"]), "the weights were applied"


def test_a_lora_checkpoint_loads_the_adapter_and_merges_it(tmp_path):
    from peft import get_peft_model_state_dict

    run, saved = _train_run(tmp_path, lora=True)
    source = resolve(str(run))
    peft_model, _ = load_trained(source, merge=False)
    loaded = get_peft_model_state_dict(peft_model)
    assert saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)
    merged, _ = load_trained(source)
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, peft_model(ids).logits, atol=1e-4)


def test_checkpoint_problems_are_one_line_errors(tmp_path):
    run, _ = _train_run(tmp_path)
    learner = run / "checkpoints" / "step_000001" / "learner.pt"
    original = learner.read_bytes()
    data = bytearray(original)
    data[100] ^= 0xFF
    learner.write_bytes(bytes(data))
    with pytest.raises(CheckpointModelError, match="sha256 differs from the manifest"):
        resolve(str(run))
    learner.write_bytes(original)
    (run / "config.yaml").unlink()
    with pytest.raises(CheckpointModelError, match="has no run config: .*config.yaml is missing"):
        resolve(str(run / "checkpoints" / "step_000001"))
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    (empty / "config.yaml").write_text((CONFIG).read_text())
    with pytest.raises(CheckpointModelError, match="holds no checkpoint yet"):
        resolve(str(empty))


def test_save_for_sampler_folders(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    base = tmp_path / "base"
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    weights_only = TorchLearner(model).save_for_sampler(tmp_path / "weights-only")  # the learner has no tokenizer
    with pytest.raises(CheckpointModelError, match="has weights but no tokenizer files"):
        resolve(str(weights_only))
    assert resolve(str(base)) is None, "an ordinary model folder loads as before"
    learner = TorchLearner.load(base, LearnerConfig(lora=LoraSettings(rank=4, alpha=8.0)))
    with torch.no_grad():
        for name, p in learner.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.1)
    adapter = learner.save_for_sampler(tmp_path / "adapter")
    source = resolve(str(adapter))
    assert source is not None and source.kind == "adapter" and Path(source.base) == base
    from peft import get_peft_model_state_dict

    loaded, _ = load_trained(source, merge=False)
    want = get_peft_model_state_dict(learner.model)
    got = get_peft_model_state_dict(loaded)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": None}))
    with pytest.raises(CheckpointModelError, match="names no base model"):
        resolve(str(adapter))


def test_sera_eval_accepts_a_train_checkpoint(tmp_path):
    run, _ = _train_run(tmp_path)
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", "--policy", "hf", "--model", str(run), "--limit", "1", "--max-calls", "1", "--max-depth", "0",
        "--max-tokens", "4", "--out", str(out), "--no-progress",
    ])
    assert result.exit_code == 0, result.output
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["model"] == str(run) and recorded["model_weights"].startswith("step_000001 learner.pt sha256:")
    (run / "config.yaml").unlink()
    refused = CliRunner().invoke(app, ["eval", "--policy", "hf", "--model", str(run), "--limit", "1", "--out", str(tmp_path / "e2"), "--no-progress"])
    assert refused.exit_code == 2 and "has no run config" in " ".join(refused.output.split())
