"""LoRA adapters: the settings a run trains with and the one wrapping both the learner and the
checkpoint loader use (peft)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class LoraSettings:
    """A peft LoRA adapter on the model (trainer-design §3.7)."""

    rank: int = 32
    """LoRA rank r."""
    alpha: float = 32.0
    """LoRA scaling numerator α (the update is scaled by α / r)."""
    dropout: float = 0.0
    """Dropout on the adapter input."""
    target_modules: str | tuple[str, ...] = "all-linear"
    """Modules to adapt: peft's `"all-linear"` (every linear layer but the output head) or names."""


def wrap_lora(model: nn.Module, settings: LoraSettings) -> nn.Module:
    """`model` with a peft LoRA adapter; the learner and the sampler-side loader both wrap with
    this, so a saved adapter's parameter names match when it is loaded again."""
    if importlib.util.find_spec("peft") is None:
        raise ImportError("LoRA needs the package peft (pip install 'peft>=0.21,<0.22'); or set lora=None")
    from peft import LoraConfig, get_peft_model

    targets = settings.target_modules
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
