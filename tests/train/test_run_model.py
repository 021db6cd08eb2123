"""The sampler-side reader of a run's base model agrees with the trainer's config, and names bad fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from sera.checkpoints.run_model import RunModel, RunModelError
from sera.train.config import dump_config, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("overrides", [[], ["model.finetune=lora", "model.lora_rank=8", "model.lora_alpha=16"]])
def test_it_reads_what_the_trainer_resolved(tmp_path: Path, overrides: list[str]) -> None:
    cfg = load_config(CONFIGS / "letters" / "rao.yaml", preset="tiny", overrides=overrides)
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(cfg))
    run = RunModel.from_config_file(path)
    assert (run.name, run.seed) == (cfg.model.name, cfg.seed)
    if cfg.model.finetune == "lora":
        assert run.lora is not None and (run.lora.rank, run.lora.alpha) == (8, 16.0)
    else:
        assert run.lora is None


@pytest.mark.parametrize(("text", "named"), [
    ("model: [1]\nseed: 1\n", "no 'model' section"),
    ("model: {name: tiny, finetune: full}\nseed: one\n", "seed is 'one'"),
    ("model: {name: tiny, finetune: half}\nseed: 1\n", "model.finetune is 'half'"),
    ("model: {name: tiny, finetune: lora, lora_alpha: 8}\nseed: 1\n", "model.lora_rank is None"),
    ("model: {name: [tiny\n", "cannot be read as YAML"),
])
def test_a_bad_config_is_one_line_naming_the_field(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(RunModelError) as info:
        RunModel.from_config_file(path)
    assert named in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)
