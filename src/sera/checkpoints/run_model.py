"""Which base model a trained run's weights belong to, read from the run's `config.yaml`.

A sampler that loads a run's checkpoint needs four facts the trainer's config holds: the base
model, the seed (a random-init base must be rebuilt exactly), and whether and how the weights are
a LoRA adapter. The run directory's `config.yaml` is the trainer's fully resolved config
(`sera.train.config.dump_config`), so these keys are always written out; this module reads only
them, so loading weights does not depend on the trainer's config schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sera.checkpoints.lora import LoraSettings


class RunModelError(ValueError):
    """The run's config does not say which model it trained; the message is one line."""


@dataclass(frozen=True)
class RunModel:
    """The base model of a trained run and the form of its weights."""

    name: str
    """`model.name`: a registered name, the embedded default alias or a model folder."""
    seed: int
    """`seed`: what a random-init base model was built with."""
    lora: LoraSettings | None
    """The adapter's settings when `model.finetune` is `lora`; None for full weights."""

    @classmethod
    def from_config_file(cls, path: str | Path) -> RunModel:
        """Read `model.name`, `model.finetune`, `model.lora_rank`, `model.lora_alpha` and `seed`."""
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise RunModelError(f"{path}: cannot be read as YAML ({str(exc).splitlines()[0]})") from None
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict):
            raise RunModelError(f"{path}: no 'model' section (expected the config.yaml a sera run wrote)")
        name = _field(path, model, "model.name", str)
        seed = _field(path, data, "seed", int)
        finetune = _field(path, model, "model.finetune", str)
        if finetune not in ("full", "lora"):
            raise RunModelError(f"{path}: model.finetune is {finetune!r}; expected 'full' or 'lora'")
        lora = None
        if finetune == "lora":
            lora = LoraSettings(rank=_field(path, model, "model.lora_rank", int),
                                alpha=float(_field(path, model, "model.lora_alpha", (int, float))))
        return cls(name=name, seed=seed, lora=lora)


def _field(path: Path, section: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = section.get(key.rsplit(".", 1)[-1])
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RunModelError(f"{path}: {key} is {value!r}; expected {getattr(kind, '__name__', 'a number')}")
    return value
