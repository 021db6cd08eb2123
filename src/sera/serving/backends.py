"""Where rollouts are sampled: one interface for the in-process and the vLLM sampler.

A backend gives its caller (the training loop)
- `policy`: what the trees (and the periodic evaluation) sample from;
- `sync(learner, version)`: bring `policy` to the learner's weights after an update and run the
  canary (a backend is a `WeightSync`);
- `recover(reason)`: make `policy` usable again after an infrastructure failure, or raise
  `InfraFailure` (`sera.serving.errors`); `restarts` counts what that took;
- `where()`: where to look when sampling fails; `close()`: release it (stop a started server);
- `before_update()`: called while no call is in flight, just before the learner steps (the
  in-process sampler frees its KV buffers and prefix cache there: their keys belong to the old
  weights, and the learner's step needs the memory);
- `samples_during_update`: whether `policy` keeps serving its weights while the learner steps
  (its own copy, a server, Ray workers), so the next round may be sampled then
  (`steps.max_offpolicy_versions`, `sera.train.lookahead`).

`open_inprocess_backend`: a `TransformersSampler` over the learner's own module with
`SharedModuleSync`, or over a copy of it with `CopiedModuleSync` (bf16 or its own dtype; or an
unsharded replica beside an FSDP2 learner); there is nothing to restart, so a failed round is
only sampled again.
`sera.serving.vllm_backend.open_vllm_backend`: a server, LoRA hot-loading, restarts. Both take
plain values; `sera.train.sampler_setup` reads them from the trainer's config.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import torch

from sera.serving.weight_sync import CopiedModuleSync, SharedModuleSync, SyncReport, WeightSync


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

    @property
    def samples_during_update(self) -> bool:
        """`policy` does not read the learner's weights while they change."""
        ...


@dataclass
class InProcessBackend:
    """A `TransformersSampler` over the learner's module or a copy of it: nothing to restart."""

    policy: Any
    """The `TransformersSampler` over the learner's module or its copy."""
    shared: WeightSync
    """`SharedModuleSync` (the canary only) or `CopiedModuleSync` (copy, then the canary)."""
    restarts: int = 0
    """Always 0."""

    def sync(self, learner: Any, version: int) -> SyncReport:
        """Shared module: the canary; a copy: refresh it, then the canary."""
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

    @property
    def samples_during_update(self) -> bool:
        """Only over a copy: a sampler over the learner's own module would read weights mid-step."""
        return isinstance(self.shared, CopiedModuleSync)


def open_inprocess_backend(model: torch.nn.Module, tokenizer: Any, *, max_batch_size: int, prefix_cache_bytes: int,
                           bound: float, in_flight: Callable[[], int], bf16_copy: bool = False,
                           own_copy: bool = False,
                           weights: Callable[[], Mapping[str, torch.Tensor]] | None = None) -> InProcessBackend:
    """A `TransformersSampler` over `model` (the learner's own module) whose sync is the canary
    within `bound`, or over a copy of it that every sync refreshes: in bf16 with `bf16_copy`, in
    `model`'s dtype with `own_copy`.
    `weights` is for a learner whose module the sampler cannot run (sharded): `model` is then an
    unsharded replica the sampler runs (cast to bf16 with `bf16_copy`), and every sync copies
    `weights()` into it. `in_flight()` counts the sampler calls running (none may during a sync)."""
    from sera.policy.transformers_sampler import TransformersSampler

    def sampler(module: torch.nn.Module) -> Any:
        return TransformersSampler(module, tokenizer, max_batch_size=max_batch_size, prefix_cache_bytes=prefix_cache_bytes)

    if weights is None and not bf16_copy and not own_copy:
        policy = sampler(model)
        return InProcessBackend(policy=policy, shared=SharedModuleSync(policy, in_flight, bound))
    if weights is None:
        sampled = copy.deepcopy(model)
        weights = partial(_parameters, model)
    else:
        sampled = model
    if bf16_copy:
        sampled = sampled.to(torch.bfloat16)
    sampled.eval().requires_grad_(False)
    policy = sampler(sampled)
    return InProcessBackend(policy=policy, shared=CopiedModuleSync(policy, weights, sampled, in_flight, bound))


def _parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return dict(module.named_parameters())


__all__ = ["InProcessBackend", "SamplerBackend", "open_inprocess_backend"]
