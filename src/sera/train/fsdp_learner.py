"""An FSDP2 learner: `TorchLearner`'s methods over a model sharded across a process group.

Every rank builds an `FsdpLearner` from the same model (same initial weights) inside a process
group (`sera.train.distributed`) and makes the same calls with the same arguments; the methods
are collectives. `fully_shard` wraps each decoder layer, then a root module that runs the masked
LM head (`sera.train.learner.masked_logprobs`), so the embeddings, final norm and a tied head
share the root's shard group and are gathered once per forward pass.

**Same update as one process.** A step's datums are split by rank (`datums[rank::world]`, so
mixed lengths spread evenly; a count that does not divide leaves some ranks one datum short). The token count |M| is
all-reduced *before* any backward pass, so each rank scales its micro-batch losses by
`|M_mb| / |M|` with the global |M|, and gradients are reduce-scattered as a sum (divide factor
1), not a mean: the accumulated gradient is the single-process one up to summation order. Ranks
with fewer micro-batches run zero-weighted dummy passes, because every forward and backward of a
sharded module is a collective. The clip norm is the norm of the full (sharded) gradient.

**bf16.** `dtype='bfloat16'` is a `MixedPrecisionPolicy`: parameters gathered and computed in
bf16, gradients reduced in fp32, fp32 master shards for AdamW (no autocast).

**State.** `state_dict()` and `save_for_sampler()` gather the full weights (and optimizer state)
to rank 0's CPU; only rank 0 holds them or writes, atomically (temporary folder, then rename),
and the other ranks wait at a barrier. LoRA is not supported here (use `TorchLearner`).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from sera.train.batching import MicroBatch, make_microbatch, microbatches
from sera.train.datums import Datum
from sera.train.learner import (
    ForwardBackwardStats,
    LearnerConfig,
    OptimStats,
    SchedulerFactory,
    TorchLearner,
    _enable_checkpointing,
    constant_schedule,
    masked_logprobs,
    resolve_device,
    summarize_pass,
    write_folder_atomically,
)
from sera.train.losses import LOSSES

_DUMMY = Datum(
    tokens=(0, 0), mask=(False, True), sampler_logprobs=(math.nan, math.nan), advantage=0.0, depth=0,
    trajectory_id="fsdp-pad", node_id="fsdp-pad", stage="fsdp-pad", steps=(),
)
"""The zero-weighted micro-batch a rank runs when it has fewer micro-batches than another."""


class _MaskedHeadRoot(nn.Module):
    """The FSDP root: calling it (not the decoder directly) runs the root's all-gather hooks."""

    def __init__(self, lm: nn.Module, chunk: int | None) -> None:
        super().__init__()
        self.lm = lm
        self.chunk = chunk

    def forward(self, batch: MicroBatch, device: torch.device) -> torch.Tensor:
        return masked_logprobs(self.lm, batch, device, self.chunk)


def _decoder_layers(lm: nn.Module) -> Sequence[nn.Module]:
    decoder = lm.get_decoder() if hasattr(lm, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"FsdpLearner shards the decoder's `layers`; {type(lm).__name__} has none")
    return layers


class FsdpLearner(TorchLearner):
    """`TorchLearner` with the model sharded by FSDP2 over the default process group (see the
    module docstring); every method is a collective."""

    def __init__(
        self,
        model: nn.Module,
        config: LearnerConfig = LearnerConfig(),
        *,
        tokenizer: Any = None,
        scheduler: SchedulerFactory = constant_schedule,
    ) -> None:
        """Shard `model` (used in place, fp32 masters) across the default process group."""
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "FsdpLearner needs an initialised process group "
                "(sera.train.distributed.init_process_group or run_local)"
            )
        if config.lora is not None:
            raise ValueError("FsdpLearner trains full weights; LoRA is not supported under FSDP2 (use TorchLearner)")
        if config.loss not in LOSSES:
            raise ValueError(f"unknown loss {config.loss!r}; use one of {sorted(LOSSES)}")
        self.config = config
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        device = resolve_device(config.device, config.dtype)
        backend = dist.get_backend()
        if device.type == "cuda":
            if backend != "nccl":
                raise ValueError(f"device {config.device!r} needs the nccl backend, the process group uses {backend!r}")
            device = device if device.index is not None else torch.device("cuda", self.rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        elif backend != "gloo":
            raise ValueError(f"device 'cpu' needs the gloo backend, the process group uses {backend!r}")
        self.device = device
        self.tokenizer = tokenizer
        model = model.to(device)
        layers = _decoder_layers(model)
        if config.gradient_checkpointing:
            _enable_checkpointing(model)  # per layer; recompute re-runs the layer's all-gather hook
        precision = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if config.dtype == "bfloat16"
            else MixedPrecisionPolicy()
        )
        for layer in layers:
            fully_shard(layer, mp_policy=precision)
        self._root = _MaskedHeadRoot(model, config.head_chunk_tokens)
        fully_shard(self._root, mp_policy=precision)
        for module in self._root.modules():
            if isinstance(module, FSDPModule):
                # A plain sum over ranks (the losses carry the global 1/|M|); forcing SUM-only
                # collectives keeps it off PREMUL_SUM, which gloo lacks.
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
        self.model = model
        self._start_optimizer(self._root, scheduler)  # the root's parameters are the sharded ones

    # -- log-probabilities -------------------------------------------------------------------------

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()  # bf16 comes from the MixedPrecisionPolicy

    def token_logprobs(self, batch: MicroBatch) -> torch.Tensor:
        """`[N]` float32 log-probabilities of the micro-batch's trained tokens (a collective)."""
        return self._root(batch, self.device)

    # -- training --------------------------------------------------------------------------------------

    def _all_reduce(self, values: Sequence[float], op: dist.ReduceOp.RedOpType) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=op)
        return tensor.tolist()

    def forward_backward(
        self, datums: Sequence[Datum], loss: str | None = None, loss_options: Mapping[str, float] | None = None
    ) -> ForwardBackwardStats:
        """Accumulate this rank's share of the gradient of the token-mean `loss` over all trained
        tokens of `datums` (every rank passes the same full list); the stats are the whole step's."""
        name = loss or self.config.loss
        if name not in LOSSES:
            raise ValueError(f"unknown loss {name!r}; use one of {sorted(LOSSES)}")
        for n, datum in enumerate(datums):  # checked on the full list so that every rank raises alike
            if datum.mask and datum.mask[0]:
                raise ValueError(f"datum {n} ({datum.trajectory_id!r}): its first token is marked trained")
        loss_fn = LOSSES[name]
        options = dict(self.config.loss_options if loss_options is None else loss_options)
        share = list(datums[self.rank :: self.world_size])
        batches = microbatches(share, self.config.max_tokens_per_microbatch, pad_id=self.config.pad_id)
        local = [
            sum(b.trained_tokens for b in batches),
            sum(b.real_tokens for b in batches),
            sum(b.padded_tokens for b in batches),
            sum(len(b.datum_indices) for b in batches),
            len(batches),
        ]
        # |M| over all ranks before any backward: each rank's losses then carry the global mean.
        counts = [int(round(x)) for x in self._all_reduce(local, dist.ReduceOp.SUM)]
        rounds = int(self._all_reduce([len(batches)], dist.ReduceOp.MAX)[0])
        total = counts[0]
        step_loss = 0.0
        gaps: list[torch.Tensor] = []
        # Gradients are reduce-scattered after every micro-batch (FSDP2's default): skipping the
        # sync until the last one would keep a full unsharded gradient per rank, the memory that
        # sharding is for.
        with self._mode(True):
            for i in range(rounds):
                if i >= len(batches):  # keep the collectives in step with the busiest rank
                    dummy = self.token_logprobs(make_microbatch([_DUMMY], [0], pad_id=self.config.pad_id))
                    (dummy.sum() * 0.0).backward()
                    continue
                batch = batches[i]
                logprobs = self.token_logprobs(batch)
                sampler = batch.sampler_logprobs.to(self.device)
                known = ~torch.isnan(sampler)
                old = torch.where(known, sampler, logprobs.detach())  # no sampler value: ratio 1
                ones = torch.ones_like(logprobs, dtype=torch.bool)
                value = loss_fn(logprobs, old, batch.advantages.to(self.device), ones, **options)
                scaled = value * (batch.trained_tokens / total)
                scaled.backward()
                step_loss += float(scaled.detach())
                gaps.append((logprobs.detach() - sampler)[known].float().cpu())
        step_loss = self._all_reduce([step_loss], dist.ReduceOp.SUM)[0]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, torch.cat(gaps) if gaps else torch.zeros(0))
        names = ("trained_tokens", "tokens", "padded_tokens", "datums", "microbatches")
        return summarize_pass(step_loss, dict(zip(names, counts)), torch.cat(gathered))

    def optim_step(self) -> OptimStats:
        """Clip by the full gradient's norm, step AdamW on the shards and the scheduler, clear the
        gradients; a non-finite norm raises FloatingPointError on every rank, weights untouched."""
        limit = self.config.max_grad_norm if self.config.max_grad_norm is not None else math.inf
        grads = [p.grad for p in self._params if p.grad is not None]
        norm_tensor = torch.nn.utils.get_total_norm(grads, 2.0)
        if isinstance(norm_tensor, DTensor):
            norm_tensor = norm_tensor.full_tensor()  # the sharded partial norms, reduced
        norm = float(norm_tensor)
        if not math.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"gradient norm is {norm}; step skipped, gradients cleared")
        if math.isfinite(limit):
            torch.nn.utils.clip_grads_with_norm_(self._params, limit, norm_tensor)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return OptimStats(grad_norm=norm, lr=lr, step=self.steps)

    # -- state -----------------------------------------------------------------------------------------

    _FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The full weights on rank 0's CPU (an empty dict on the other ranks); a collective."""
        return get_model_state_dict(self.model, options=self._FULL)

    def broadcast_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Make every rank's shards rank 0's `weights` (a full state dict on rank 0; the other
        ranks pass an empty one): the ranks of one run start from the same model, whatever each
        loaded. A collective."""
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(self.model, dict(weights), options=options)

    def state_dict(self) -> dict[str, Any]:
        """Full weights and optimizer state (keyed by parameter name) gathered to rank 0's CPU,
        with the scheduler and step count; on the other ranks `weights` and `optimizer` are empty."""
        weights = self.full_weights()
        optimizer = get_optimizer_state_dict(self.model, self.optimizer, options=self._FULL)
        return {
            "lora": False,
            "weights": weights,
            "optimizer": optimizer if self.rank == 0 else {},
            "scheduler": self.scheduler.state_dict(),
            "steps": self.steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a `state_dict()` snapshot; only rank 0's copy is read (it is broadcast), so the
        other ranks may pass one with empty `weights` and `optimizer`."""
        if bool(state["lora"]):
            raise ValueError("state is LoRA; FsdpLearner trains full weights")
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(self.model, dict(state["weights"]), options=options)
        set_optimizer_state_dict(self.model, self.optimizer, dict(state["optimizer"]), options=options)
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])

    def save_for_sampler(self, path: str | os.PathLike[str]) -> Path:
        """Rank 0 writes the full model (safetensors + config, and the tokenizer) into the folder
        `path` atomically; the other ranks wait until it is in place."""
        weights = self.full_weights()
        target = Path(path)
        failure: BaseException | None = None
        if self.rank == 0:

            def write(staging: Path) -> None:
                self.model.save_pretrained(staging, state_dict=weights)
                if self.tokenizer is not None:
                    self.tokenizer.save_pretrained(staging)

            try:
                write_folder_atomically(target, write)
            except Exception as exc:  # noqa: BLE001 - re-raised below, after telling the others
                failure = exc
        # Rank 0's outcome reaches every rank, so a failed write is an error everywhere, not a hang.
        failed = self._all_reduce([1.0 if failure is not None else 0.0], dist.ReduceOp.MAX)[0] > 0
        if failure is not None:
            raise failure
        if failed:
            raise RuntimeError(f"rank 0 could not write {str(target)!r}; nothing was replaced")
        return target


__all__ = ["FsdpLearner"]
