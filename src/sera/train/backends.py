"""Where the loop's rollouts are sampled: the sampler backend seam (`sampler.backend`).

A backend gives the loop
- `policy`: what the trees (and the periodic evaluation) sample from;
- `sync(learner, version)`: bring `policy` to the learner's weights after an update and run the
  canary (a backend is the loop's `WeightSync`);
- `recover(reason)`: make `policy` usable again after an infrastructure failure, or raise
  `InfraFailure` (`sera.train.infra`); `restarts` counts what that took;
- `where()`: where to look when sampling fails; `close()`: release it (stop a started server);
- `before_update()`: called while no call is in flight, just before the learner steps (the
  in-process sampler frees its KV buffers and prefix cache there: their keys belong to the old
  weights, and the learner's step needs the memory).

`inprocess`: a `TransformersSampler` over the learner's own module with `SharedModuleSync`;
there is nothing to restart, so a failed round is only sampled again. `vllm`:
`sera.train.vllm_backend` (a server, LoRA hot-loading, restarts).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from sera.train.config import TrainConfig
from sera.train.learner import TorchLearner
from sera.train.sampling import InFlight
from sera.train.weight_sync import BF16_BOUND, FP32_BOUND, SharedModuleSync, SyncReport, WeightSync


class SamplerBackend(Protocol):
    """What the loop needs from where rollouts are sampled (module docstring)."""

    policy: Any
    """The sampler the trees call."""
    restarts: int
    """Server restarts done in this run."""

    def sync(self, learner: Any, version: int) -> SyncReport:
        """Bring `policy` to the learner's weights as `version`, with the canary; `SyncError` if not."""
        ...

    def recover(self, reason: str) -> None:
        """Make `policy` usable again after an infrastructure failure; `InfraFailure` when it cannot."""
        ...

    def where(self) -> str:
        """Where to look when sampling fails, as a clause ("see the vLLM server log ...")."""
        ...

    def close(self) -> None:
        """Release the sampler (stop a server sera started)."""
        ...

    def before_update(self) -> None:
        """The learner is about to step (no call in flight)."""
        ...


@dataclass
class InProcessBackend:
    """A `TransformersSampler` sharing the learner's module: nothing copied, nothing to restart."""

    policy: Any
    """The `TransformersSampler` over the learner's module."""
    shared: WeightSync
    """`SharedModuleSync`: the canary only."""
    restarts: int = 0
    """Always 0."""

    def sync(self, learner: Any, version: int) -> SyncReport:
        """The weights are already there (one module): the canary."""
        return self.shared.sync(learner, version)

    def recover(self, reason: str) -> None:
        """Nothing to restart: the round is sampled once more as it is."""

    def where(self) -> str:
        """The in-process sampler has no log of its own."""
        return "the in-process sampler has nothing to restart"

    def close(self) -> None:
        """Stop the sampler's batching worker."""
        asyncio.run(self.policy.close())

    def before_update(self) -> None:
        """Free the KV buffers and the prefix cache (stale after the update anyway)."""
        self.policy.release_memory()


def serving_base_if_needed(cfg: TrainConfig, out: Path, model: torch.nn.Module, tokenizer: Any,
                           initialized: bool) -> Path | None:
    """The base model folder of a vLLM server sera starts (`vllm_backend.serving_base`); None for
    `inprocess` and for a server given by `sampler.vllm.base_url` (it serves what it serves: the
    canary checks that it is the learner's base). Call it before the learner injects LoRA into `model`."""
    if cfg.sampler.backend != "vllm" or cfg.sampler.vllm.base_url is not None:
        return None
    from sera.train.vllm_backend import serving_base

    return serving_base(cfg, out, model, tokenizer, initialized)


def open_backend(cfg: TrainConfig, out: Path, learner: TorchLearner, tokenizer: Any, inflight: InFlight,
                 base_dir: Path | None) -> SamplerBackend:
    """The backend `cfg.sampler.backend` names (a vLLM server is started or reached here)."""
    if cfg.sampler.backend == "inprocess":
        from sera.policy.transformers_sampler import TransformersSampler

        # Rows beyond the trees: children and rubric calls run beside their parents.
        policy = TransformersSampler(learner.model, tokenizer, max_batch_size=2 * max(1, cfg.rollout.concurrency),
                                     prefix_cache_bytes=int(cfg.sampler.prefix_cache_gib * 1024**3))
        bound = BF16_BOUND if cfg.model.dtype == "bf16" else FP32_BOUND
        return InProcessBackend(policy=policy, shared=SharedModuleSync(policy, lambda: inflight.count, bound))
    from sera.train.vllm_backend import open_vllm_backend

    return open_vllm_backend(cfg, out, tokenizer, inflight, base_dir)
