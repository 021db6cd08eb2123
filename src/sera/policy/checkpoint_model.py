"""Trained weights as `--policy hf --model DIR`: a `sera train` checkpoint or a sampler folder.

`DIR` may be:

- a `sera train` run directory (`config.yaml` + `checkpoints/`): its newest checkpoint;
- its `checkpoints/` folder (the one `latest` names), or one `checkpoints/step_NNNNNN/`.
  The checkpoint is validated against its manifest (`sera.checkpoints.store.load_latest` /
  `load_checkpoint`: every file present, sizes and sha256). The run's `config.yaml` names the
  base model (`model.name`: a local folder, `smollm2`, a name in the local transformers cache,
  or `tiny`, the seeded random test model); `learner.pt` holds `TorchLearner.state_dict()`:
  `weights` (every parameter, or with `lora: true` the peft adapter's) — the base model is
  loaded and the weights applied (strictly: a key that does not fit is an error), an adapter
  is merged into the base — for a LoRA run started with `--init-from`, into the model of the
  checkpoint its `init_from.json` names (checked by its sha256), since the adapter was trained
  on those weights;
- a folder written by `TorchLearner.save_for_sampler`: the full model (`config.json`, weights,
  tokenizer) loads as any model folder; a peft adapter (`adapter_config.json`) is merged into the
  base its config names (`base_model_name_or_path`).

Anything else (a model name, an ordinary model folder) is not handled here (`resolve` returns
None). Problems are one-line `CheckpointModelError`s naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from sera.checkpoints.lora import wrap_lora
from sera.checkpoints.run_model import RunModel, RunModelError
from sera.checkpoints.store import MANIFEST, CheckpointError, load_checkpoint, load_latest

LEARNER_FILE = "learner.pt"
"""The learner's state in a `sera train` checkpoint."""
RUN_CONFIG = "config.yaml"
"""The run's config in a `sera train` run directory."""
INIT_RECORD = "init_from.json"
"""In a `sera train` run directory started with `--init-from`: the checkpoint whose weights
started it (`path`, `checkpoint`, `identity`, `base`)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
"""Any of these means a folder has a tokenizer."""
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CheckpointModelError(ValueError):
    """The folder given as `--model` cannot be loaded; the message is one line."""


@dataclass(frozen=True)
class CheckpointSource:
    """Where trained weights come from, resolved (and validated) before any model is loaded."""

    kind: Literal["train", "adapter"]
    """`train`: a `sera train` checkpoint; `adapter`: a peft adapter folder."""
    path: Path
    """The checkpoint directory (`step_NNNNNN`) or the adapter folder."""
    config: Path | None
    """The run's `config.yaml` (`train` only)."""
    base: str
    """The base model the weights apply to."""
    identity: str
    """What the run fingerprint records: `step_000124 learner.pt sha256:...` or the adapter's path."""


def resolve(model: str) -> CheckpointSource | None:
    """The trained weights `model` names, validated; None when it is a plain model name or folder."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    if (path / "adapter_config.json").is_file():
        return _adapter(path)
    if (path / "config.json").is_file():  # a full model folder, e.g. from save_for_sampler
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise CheckpointModelError(
                f"{path} has weights but no tokenizer files ({', '.join(TOKENIZER_FILES)}): save_for_sampler writes "
                f"them only when the learner has a tokenizer; copy the base model's tokenizer files into it"
            )
        return None
    if (path / RUN_CONFIG).is_file() or (path / "checkpoints").is_dir():
        run, ckpt_dir = path, path / "checkpoints"
    elif (path / "latest").is_file() or path.name == "checkpoints":
        run, ckpt_dir = path.parent, path
    elif (path / MANIFEST).is_file() or (path / LEARNER_FILE).is_file():
        run, ckpt_dir = path.parent.parent, None
    else:
        return None
    try:
        checkpoint = load_checkpoint(path) if ckpt_dir is None else load_latest(ckpt_dir)
    except CheckpointError as exc:
        raise CheckpointModelError(f"--model {model}: {str(exc).split('; pass allow_fallback')[0]}") from None
    if checkpoint is None:
        raise CheckpointModelError(f"--model {model}: {ckpt_dir} holds no checkpoint yet (sera train writes one "
                                   f"every checkpoint.every updates and at the end)")
    entries = {f.name: f for f in checkpoint.manifest.files}
    if LEARNER_FILE not in entries:
        raise CheckpointModelError(f"--model {model}: checkpoint {checkpoint.path} has no {LEARNER_FILE} "
                                   f"(it has {', '.join(sorted(entries))})")
    config = run / RUN_CONFIG
    if not config.is_file():
        raise CheckpointModelError(
            f"--model {model}: checkpoint {checkpoint.path} has no run config: {config} is missing (it names the "
            f"base model); pass a checkpoint inside the run directory sera train wrote"
        )
    base = _run_model(config).name
    identity = f"{checkpoint.path.name} {LEARNER_FILE} sha256:{entries[LEARNER_FILE].sha256}"
    return CheckpointSource("train", checkpoint.path, config, base, identity)


def load_sampler(source: CheckpointSource, *, dtype: str = "float32", device: str = "cpu") -> Any:
    """A `TransformersSampler` over the base model with the trained weights applied."""
    from sera.policy.transformers_sampler import TransformersSampler

    if dtype not in _DTYPES:
        raise CheckpointModelError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    model, tokenizer = load_trained(source)
    return TransformersSampler(model.to(dtype=_DTYPES[dtype]), tokenizer, device=device)


def load_trained(source: CheckpointSource, *, merge: bool = True) -> tuple[torch.nn.Module, Any]:
    """`(model, tokenizer)` in fp32 on the CPU: the base with the weights applied (an adapter
    merged into it unless `merge=False`, which returns the peft model)."""
    if source.kind == "adapter":
        return _load_adapter(source, merge=merge)
    assert source.config is not None
    run = _run_model(source.config)
    init = _init_model(source) if run.lora is not None else None  # full weights replace every parameter
    model, tokenizer = init if init is not None else _base_model(run.name, seed=run.seed)
    try:
        state = torch.load(source.path / LEARNER_FILE, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # validated against its manifest, so this is a torch-level problem
        raise CheckpointModelError(f"{source.path / LEARNER_FILE} cannot be read: {type(exc).__name__}: {exc}") from None
    return apply_learner_weights(model, state, lora=run.lora, where=source.path / LEARNER_FILE, merge=merge), tokenizer


def read_init_record(record_file: Path) -> tuple[str, str]:
    """`(checkpoint, identity)` from an `INIT_RECORD` file; ValueError naming the file and the cause."""
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        return str(record["checkpoint"]), str(record["identity"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{record_file} cannot be read ({type(exc).__name__}: {exc})") from None


def _init_model(source: CheckpointSource) -> tuple[torch.nn.Module, Any] | None:
    """The merged model of the checkpoint a LoRA run was started from (`INIT_RECORD` beside its
    config), None for a run started from the base model. A record that cannot be read, or names a
    checkpoint that is gone or changed, is a `CheckpointModelError`: the adapter fits no other weights."""
    assert source.config is not None
    record_file = source.config.parent / INIT_RECORD
    if not record_file.is_file():
        return None
    try:
        checkpoint, identity = read_init_record(record_file)
    except ValueError as exc:
        raise CheckpointModelError(f"{exc}; it names the weights the LoRA adapter of {source.path} was trained on") from None
    init = resolve(checkpoint)
    if init is None or init.identity != identity:
        now = "gone" if init is None else f"now {init.identity}"
        raise CheckpointModelError(f"{source.path} is a LoRA adapter trained on {identity} in {checkpoint} "
                                   f"(its {record_file.name}), which is {now}; the adapter fits those weights only")
    return load_trained(init, merge=True)


def apply_learner_weights(
    model: torch.nn.Module, state: dict[str, Any], *, lora: Any, where: Path | str, merge: bool = True
) -> torch.nn.Module:
    """Load `TorchLearner.state_dict()`'s `weights` into `model` (a LoRA adapter through peft,
    with the run's `LoraSettings` `lora`; None for full weights). Strict: missing or extra keys
    are an error naming the first few."""
    if not isinstance(state, dict) or not isinstance(state.get("weights"), dict):
        raise CheckpointModelError(f"{where} holds no learner weights (expected TorchLearner.state_dict() with 'weights')")
    weights, is_lora = state["weights"], bool(state.get("lora"))
    if is_lora != (lora is not None):
        saved, config = ("a LoRA adapter", "full") if is_lora else ("full weights", "lora")
        raise CheckpointModelError(f"{where} holds {saved} but the run's config says model.finetune={config}")
    if not is_lora:
        outcome = model.load_state_dict(weights, strict=False)
        _check_keys(where, outcome.missing_keys, outcome.unexpected_keys)
        return model
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    peft_model = wrap_lora(model, lora)  # the learner's own wrapping: the adapter's names match
    expected = set(get_peft_model_state_dict(peft_model))
    outcome = set_peft_model_state_dict(peft_model, weights)
    _check_keys(where, sorted(expected - set(weights)), list(getattr(outcome, "unexpected_keys", []) or []))
    return peft_model.merge_and_unload() if merge else peft_model


def _check_keys(where: Path | str, missing: list[str], unexpected: list[str]) -> None:
    if missing or unexpected:
        raise CheckpointModelError(
            f"{where}: the weights do not fit the base model ({len(missing)} missing, e.g. {missing[:3]}; "
            f"{len(unexpected)} unexpected, e.g. {unexpected[:3]}); is the run's config.yaml the one that trained it?"
        )


def _run_model(path: Path) -> RunModel:
    try:
        return RunModel.from_config_file(path)
    except RunModelError as exc:
        raise CheckpointModelError(str(exc)) from None


def _base_model(name: str, *, seed: int = 0) -> tuple[torch.nn.Module, Any]:
    """The base model in fp32 on the CPU: a registered name (`tiny`, seeded as the run seeded it)
    or any model name/folder."""
    from sera.policy.model_registry import is_registered, load_registered

    if is_registered(name):
        return load_registered(name, seed=seed)
    from sera.policy.models import load_model

    try:
        return load_model(name, dtype="float32", device="cpu")
    except (OSError, ValueError) as exc:
        raise CheckpointModelError(f"the base model {name!r} cannot be loaded: {str(exc).splitlines()[0]}") from None


def _adapter(path: Path) -> CheckpointSource:
    config_path = path / "adapter_config.json"
    try:
        base = json.loads(config_path.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (ValueError, OSError, AttributeError) as exc:
        raise CheckpointModelError(f"{config_path} is unreadable: {exc}") from None
    if not base:
        raise CheckpointModelError(
            f"{config_path} names no base model (base_model_name_or_path); evaluate the sera train checkpoint "
            f"instead (its config.yaml names the base), or set the field to the base model's folder"
        )
    return CheckpointSource("adapter", path, None, str(base), f"adapter {path}")


def _load_adapter(source: CheckpointSource, *, merge: bool) -> tuple[torch.nn.Module, Any]:
    from peft import PeftModel

    model, tokenizer = _base_model(source.base)
    try:
        peft_model = PeftModel.from_pretrained(model, source.path, is_trainable=False)
    except Exception as exc:  # peft raises ValueError/KeyError/OSError for a bad adapter
        raise CheckpointModelError(f"the adapter {source.path} does not load onto {source.base!r}: "
                                   f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    if any((source.path / name).is_file() for name in TOKENIZER_FILES):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(source.path, local_files_only=True)
    return (peft_model.merge_and_unload() if merge else peft_model), tokenizer
