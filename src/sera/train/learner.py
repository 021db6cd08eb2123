"""The learner: datums + a loss name in, one optimizer step out (trainer-design §3.1 item 6, §3.2).

The seam (`Learner`) is shaped like tinker's and prime-rl's: `forward_backward(datums, loss)`
accumulates gradients, `optim_step()` clips and steps AdamW, `save_for_sampler(path)` writes what
a sampler loads, `state_dict()` / `load_state_dict()` checkpoint it, and
`sequence_logprobs(prompt, completion)` serves the weight-sync canary. `train_step` is the two
calls in a row with timing and memory. An FSDP2 (`sera.train.fsdp_learner.FsdpLearner`) or
Tinker-backed learner replaces `TorchLearner` behind the same methods; the loop sees only
`Datum`s and a loss name.

**Normalisation (sera-spec §7.4, `sera.train.losses`).** The loss of one `forward_backward` call
is the token mean over *all* trained tokens M of the datums passed, `(1/|M|) Σ_{t∈M} ℓ_t`. The
call splits the datums into micro-batches (`sera.train.batching`) and back-propagates each
micro-batch's token-mean loss times `|M_mb| / |M|`, so the accumulated gradient is that of one
big batch. Pass a whole training step in one call (the paper: one minibatch, one optimizer step
per step). Every trained token counts in |M|, including those of datums whose
`advantage × weight` is 0: they add nothing to the numerator but dilute the mean, as in the
reference (its loss mask ignores advantages).

**Log-probabilities only at trained positions.** The base model returns hidden states; those at
the positions whose next token is trained are gathered and only they go through `lm_head`, so
the `[tokens × vocabulary]` logits of the whole batch never exist.

**π_old is the sampler.** Ratios are taken against `Datum.sampler_logprobs` (no old-policy
forward pass; `recompute_logprob=false` in the reference). A trained token without a sampler
log-probability (NaN: scripted or SFT data) uses the current log-probability, detached, as π_old
(ratio 1); such tokens are left out of the ratio and sampler-gap statistics.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import math
import os
import re
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
import torch.utils.checkpoint
from safetensors import SafetensorError
from torch import nn

from sera.checkpoints.lora import LoraSettings, wrap_lora
from sera.train.batching import PAPER_MAX_TOKENS_PER_MICROBATCH, MicroBatch, make_microbatch, microbatches
from sera.train.datums import Datum
from sera.train.hardware import cpu_supports_bf16
from sera.train.losses import LOSSES

SchedulerFactory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]
"""Builds the learning-rate scheduler from the optimizer; stepped once per optimizer step."""

RATIO_BAND = (0.9, 1.1)
"""Importance ratios outside this band are counted in `StepStats.ratio_outside`."""


# -- configuration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearnerConfig:
    """How the learner trains; defaults are the paper's optimizer (sera-spec §7.5)."""

    loss: str = "cispo"
    """Default loss name, a key of `sera.train.losses.LOSSES` (`cispo`, `ppo_clip`, `pg`, `sft`)."""
    loss_options: Mapping[str, float] = field(default_factory=dict)
    """Default keyword options of the loss (e.g. `clip_high` for CISPO)."""
    lr: float = 3e-6
    """AdamW learning rate (before the scheduler's factor)."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW β1, β2."""
    eps: float = 1e-8
    """AdamW ε."""
    weight_decay: float = 0.017
    """AdamW decoupled weight decay."""
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this; None computes the norm without clipping."""
    max_tokens_per_microbatch: int = PAPER_MAX_TOKENS_PER_MICROBATCH
    """Token budget of one micro-batch, padding included (`sera.train.batching`)."""
    dtype: str = "float32"
    """`float32`, or `bfloat16` autocast over fp32 master weights (CUDA, or a CPU with AVX-512 BF16/AMX)."""
    device: str = "cpu"
    """`cpu`, `cuda` or `cuda:N`."""
    gradient_checkpointing: bool = False
    """Recompute layer activations in the backward pass (less memory, ~30% more compute)."""
    lora: LoraSettings | None = None
    """Train a LoRA adapter instead of every weight."""
    pad_id: int = 0
    """Token id used for right padding (never attended to, never trained)."""
    head_chunk_tokens: int | None = None
    """If set, the LM head runs over trained positions in chunks of this many tokens, each
    recomputed in the backward pass, so at most one chunk's logits are alive at a time."""


# -- records -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForwardBackwardStats:
    """What one `forward_backward` call saw and computed."""

    loss: float
    """The step's loss: token mean over all trained tokens of the call."""
    trained_tokens: int
    """|M|: trained tokens of the call."""
    tokens: int
    """Real (not padding) tokens of the datums with a trained token."""
    padded_tokens: int
    """Tokens computed, padding included."""
    datums: int
    """Datums with at least one trained token."""
    microbatches: int
    """Forward/backward passes."""
    sampler_tokens: int
    """Trained tokens with a sampler log-probability (the ratio statistics are over these)."""
    ratio_mean: float
    """Mean of `exp(learner - sampler)` over `sampler_tokens` (0 when there are none)."""
    ratio_max: float
    """Largest such ratio (0 when none)."""
    ratio_outside: float
    """Share of such ratios outside `RATIO_BAND` (0 when none)."""
    logprob_gap: float
    """Mean |learner − sampler| log-probability over `sampler_tokens` (0 when none)."""
    kl_k1: float
    """Sampler–learner mismatch KL estimate k1 = mean(sampler − learner) (0 when none)."""
    kl_k3: float
    """Mismatch KL estimate k3 = mean(ρ − 1 − log ρ), ρ = exp(learner − sampler) (0 when none)."""


@dataclass(frozen=True)
class OptimStats:
    """What one `optim_step` did."""

    grad_norm: float
    """Global gradient norm before clipping."""
    lr: float
    """Learning rate the step used."""
    step: int
    """Optimizer steps taken so far, this one included."""


@dataclass(frozen=True)
class StepStats:
    """One training step: `forward_backward` then `optim_step`."""

    forward_backward: ForwardBackwardStats
    """Loss, token counts and ratio statistics."""
    optim: OptimStats
    """Gradient norm, learning rate, step count."""
    seconds: float
    """Wall time of the step."""
    tokens_per_s: float
    """Real tokens (padding excluded) per second of the step."""
    peak_memory_bytes: int
    """CUDA: max memory allocated during the step. CPU: the process's peak RSS so far."""

    def as_dict(self) -> dict[str, float]:
        """Flat metrics for `learner/` and `ratio/` logs."""
        flat: dict[str, float] = {**self.forward_backward.__dict__, **self.optim.__dict__}
        flat.update(seconds=self.seconds, tokens_per_s=self.tokens_per_s, peak_memory_bytes=self.peak_memory_bytes)
        return flat


# -- the seam ----------------------------------------------------------------------------------------


@runtime_checkable
class Learner(Protocol):
    """What the training loop needs from a learner backend (torch, FSDP2, Tinker-like)."""

    def forward_backward(
        self, datums: Sequence[Datum], loss: str | None = None, loss_options: Mapping[str, float] | None = None
    ) -> ForwardBackwardStats:
        """Accumulate the gradient of `loss` over `datums` (token mean over their trained tokens)."""
        ...

    def optim_step(self) -> OptimStats:
        """Clip, step the optimizer and the scheduler, and clear the gradients."""
        ...

    def train_step(
        self, datums: Sequence[Datum], loss: str | None = None, loss_options: Mapping[str, float] | None = None
    ) -> StepStats:
        """`forward_backward` then `optim_step`, timed."""
        ...

    def save_for_sampler(self, path: str | os.PathLike[str]) -> Path:
        """Write the weights (or adapter) a sampler loads into `path`, atomically."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Trainable weights, optimizer and scheduler state, step count."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        ...

    def sequence_logprobs(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> torch.Tensor:
        """Log-probability of each completion token under the current weights (float32, CPU)."""
        ...


# -- setup checks --------------------------------------------------------------------------------------


def resolve_device(device: str, dtype: str) -> torch.device:
    """The torch device, after checking CUDA exists and bf16 is worth running there."""
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {dtype!r}")
    target = torch.device(device)
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} asked for, but torch sees no CUDA device here; use device='cpu'")
        if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
            raise RuntimeError("this CUDA device does not support bfloat16; use dtype='float32'")
    elif target.type == "cpu":
        if dtype == "bfloat16" and not cpu_supports_bf16():
            raise RuntimeError(
                "bf16 autocast needs a CPU with AVX-512 BF16 or AMX; this one reports "
                f"{torch.backends.cpu.get_cpu_capability()} (bf16 would run 6-15x slower than fp32): "
                "use dtype='float32'"
            )
    else:
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
    return target


def load_causal_lm(source: str | os.PathLike[str]) -> tuple[nn.Module, Any]:
    """`(model, tokenizer)` in fp32 from `smollm2` (the embedded default) or a local folder with
    a config.json (the tokenizer is None when the folder has none, as a weights-only folder);
    anything else is a one-line FileNotFoundError."""
    from sera.policy.models import DEFAULT_ALIASES, load_model

    text = str(source)
    if text in DEFAULT_ALIASES:
        return load_model(text, dtype="float32", device="cpu")
    folder = Path(text).expanduser()
    if not folder.exists():
        raise FileNotFoundError(f"model path {text!r} does not exist (pass a local model folder or 'smollm2')")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model path {text!r} has no config.json: not a transformers model folder")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    # transformers 5 builds an empty tokenizer from the config alone: look for the files first.
    files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    has_tokenizer = any((folder / name).is_file() for name in files)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True) if has_tokenizer else None
    return model, tokenizer


def _enable_checkpointing(model: nn.Module) -> None:
    """Activation checkpointing, non-reentrant: it needs no input that requires grad, so it also
    works under LoRA, whose frozen embeddings give none."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _constant(_: int) -> float:
    return 1.0


def constant_schedule(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    """The default scheduler: the configured learning rate at every step (the paper's)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, _constant)


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: max allocated since the last reset; CPU: the process's peak resident set size."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB


# -- the torch learner ---------------------------------------------------------------------------------


class TorchLearner:
    """A transformers causal LM trained in this process (CPU or one CUDA device)."""

    def __init__(
        self,
        model: nn.Module,
        config: LearnerConfig = LearnerConfig(),
        *,
        tokenizer: Any = None,
        scheduler: SchedulerFactory = constant_schedule,
    ) -> None:
        """Wrap `model` (an in-memory causal LM, used in place: LoRA is injected into it and it is
        moved to the device; it trains in the dtype its parameters have, fp32 for the masters)."""
        if config.loss not in LOSSES:
            raise ValueError(f"unknown loss {config.loss!r}; use one of {sorted(LOSSES)}")
        self.config = config
        self.device = resolve_device(config.device, config.dtype)
        self.tokenizer = tokenizer
        model = model.to(self.device)
        if config.gradient_checkpointing:
            _enable_checkpointing(model)
        if config.lora is not None:
            model = wrap_lora(model, config.lora)
        self.model = model
        self._start_optimizer(model, scheduler)

    def _start_optimizer(self, trained: nn.Module, scheduler: SchedulerFactory) -> None:
        """AdamW (and its schedule) over `trained`'s parameters that need gradients; step 0."""
        c = self.config
        self._params = [p for p in trained.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self._params, lr=c.lr, betas=c.betas, eps=c.eps, weight_decay=c.weight_decay)
        self.scheduler = scheduler(self.optimizer)
        self.steps = 0

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str] | nn.Module,
        config: LearnerConfig = LearnerConfig(),
        *,
        tokenizer: Any = None,
        scheduler: SchedulerFactory = constant_schedule,
    ) -> TorchLearner:
        """A learner on `smollm2`, a local model folder, or an in-memory model."""
        resolve_device(config.device, config.dtype)  # fail before loading weights
        if not isinstance(model, nn.Module):
            model, loaded_tokenizer = load_causal_lm(model)
            tokenizer = tokenizer if tokenizer is not None else loaded_tokenizer
        return cls(model, config, tokenizer=tokenizer, scheduler=scheduler)

    # -- log-probabilities -------------------------------------------------------------------------

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        enabled = self.config.dtype == "bfloat16"
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=enabled)

    def _causal_lm(self) -> nn.Module:
        """The transformers model under a peft wrapper (LoRA layers are injected in place)."""
        model = self.model
        if hasattr(model, "peft_config"):
            model = model.get_base_model()
        return model

    def token_logprobs(self, batch: MicroBatch) -> torch.Tensor:
        """`[N]` float32 log-probabilities of the micro-batch's trained tokens (masked LM head)."""
        with self._autocast():
            return masked_logprobs(self._causal_lm(), batch, self.device, self.config.head_chunk_tokens)

    @contextlib.contextmanager
    def _mode(self, training: bool) -> Iterator[None]:
        """Train or eval mode for the block, then the mode the model had (a sampler may share it)."""
        was = self.model.training
        self.model.train(training)
        try:
            yield
        finally:
            self.model.train(was)

    def sequence_logprobs(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> torch.Tensor:
        """Log-probability of each completion token given everything before it, as the learner
        computes it (same autocast, masked head): float32 on the CPU, shape `[len(completion)]`."""
        if not prompt_ids or not completion_ids:
            raise ValueError("sequence_logprobs needs a non-empty prompt and completion")
        n_prompt, n_completion = len(prompt_ids), len(completion_ids)
        probe = Datum(
            tokens=tuple(prompt_ids) + tuple(completion_ids),
            mask=(False,) * n_prompt + (True,) * n_completion,
            sampler_logprobs=(math.nan,) * (n_prompt + n_completion),
            advantage=0.0,
            depth=0,
            trajectory_id="probe",
            node_id="probe",
            stage="probe",
            steps=(),
        )
        with torch.no_grad(), self._mode(False):
            return self.token_logprobs(make_microbatch([probe], [0], pad_id=self.config.pad_id)).float().cpu()

    # -- training ------------------------------------------------------------------------------------

    def forward_backward(
        self, datums: Sequence[Datum], loss: str | None = None, loss_options: Mapping[str, float] | None = None
    ) -> ForwardBackwardStats:
        """Accumulate the gradient of the token-mean `loss` over all trained tokens of `datums`
        (see the module docstring); gradients add up until `optim_step`."""
        name = loss or self.config.loss
        if name not in LOSSES:
            raise ValueError(f"unknown loss {name!r}; use one of {sorted(LOSSES)}")
        loss_fn = LOSSES[name]
        options = dict(self.config.loss_options if loss_options is None else loss_options)
        batches = microbatches(datums, self.config.max_tokens_per_microbatch, pad_id=self.config.pad_id)
        total = sum(b.trained_tokens for b in batches)
        step_loss = 0.0
        gaps: list[torch.Tensor] = []
        with self._mode(True):
            for batch in batches:
                logprobs = self.token_logprobs(batch)
                sampler = batch.sampler_logprobs.to(self.device)
                known = ~torch.isnan(sampler)
                old = torch.where(known, sampler, logprobs.detach())  # no sampler value: ratio 1
                ones = torch.ones_like(logprobs, dtype=torch.bool)
                value = loss_fn(logprobs, old, batch.advantages.to(self.device), ones, **options)
                scaled = value * (batch.trained_tokens / total)  # |M_mb| / |M|: one big batch's mean
                scaled.backward()
                step_loss += float(scaled.detach())
                gap = (logprobs.detach() - sampler)[known].float().cpu()
                gaps.append(gap)
        counts = {
            "trained_tokens": total,
            "tokens": sum(b.real_tokens for b in batches),
            "padded_tokens": sum(b.padded_tokens for b in batches),
            "datums": sum(len(b.datum_indices) for b in batches),
            "microbatches": len(batches),
        }
        return summarize_pass(step_loss, counts, torch.cat(gaps) if gaps else torch.zeros(0))

    def optim_step(self) -> OptimStats:
        """Clip the accumulated gradient, step AdamW and the scheduler, clear the gradients.

        A non-finite gradient norm raises FloatingPointError with the gradients cleared and the
        weights untouched."""
        limit = self.config.max_grad_norm if self.config.max_grad_norm is not None else math.inf
        norm = float(torch.nn.utils.clip_grad_norm_(self._params, limit))
        if not math.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"gradient norm is {norm}; step skipped, gradients cleared")
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return OptimStats(grad_norm=norm, lr=lr, step=self.steps)

    def train_step(
        self, datums: Sequence[Datum], loss: str | None = None, loss_options: Mapping[str, float] | None = None
    ) -> StepStats:
        """One training step: `forward_backward` over all of `datums`, then `optim_step`."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        fb = self.forward_backward(datums, loss, loss_options)
        optim = self.optim_step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - start
        return StepStats(
            forward_backward=fb,
            optim=optim,
            seconds=seconds,
            tokens_per_s=fb.tokens / seconds if seconds > 0 else 0.0,
            peak_memory_bytes=peak_memory_bytes(self.device),
        )

    # -- state -----------------------------------------------------------------------------------------

    @property
    def is_lora(self) -> bool:
        """True when the trained weights are a LoRA adapter."""
        return self.config.lora is not None

    def _trainable_state(self) -> dict[str, torch.Tensor]:
        if self.is_lora:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.model)
        return self.model.state_dict()

    def state_dict(self) -> dict[str, Any]:
        """A snapshot (copies, on the CPU) of the trained weights (the adapter with LoRA),
        optimizer, scheduler and step count."""
        weights = {name: tensor.detach().to("cpu", copy=True) for name, tensor in self._trainable_state().items()}
        return {
            "lora": self.is_lora,
            "weights": weights,
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "scheduler": self.scheduler.state_dict(),
            "steps": self.steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a `state_dict()` snapshot taken from a learner of the same model and setup."""
        if bool(state["lora"]) != self.is_lora:
            raise ValueError(f"state is {'LoRA' if state['lora'] else 'full'}, this learner is the other kind")
        if self.is_lora:
            from peft import set_peft_model_state_dict

            outcome = set_peft_model_state_dict(self.model, state["weights"])
            if getattr(outcome, "unexpected_keys", None):
                raise ValueError(f"adapter state has unexpected keys {outcome.unexpected_keys[:5]}")
        else:
            self.model.load_state_dict(state["weights"], strict=True)
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])

    def close(self) -> None:
        """Nothing to release: the learner is this process (a sharded one ends its followers)."""

    def save_for_sampler(self, path: str | os.PathLike[str]) -> Path:
        """Write what a sampler loads into the folder `path`: the full model (safetensors +
        config) or, with LoRA, the peft adapter (`adapter_model.safetensors` +
        `adapter_config.json`), plus the tokenizer when the learner has one.

        The folder is written under a temporary sibling name and renamed into place, so readers
        never see a partial folder; an existing folder at `path` is replaced."""
        def write(staging: Path) -> None:
            self.model.save_pretrained(staging)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(staging)

        return write_folder_atomically(path, write)


def write_folder_atomically(path: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Run `write(staging)` on a temporary sibling folder of `path`, then rename it into place
    (replacing an existing folder), so readers never see a partial folder; on an error the
    staging folder is removed and `path` is left as it was."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        try:
            write(staging)
        except SafetensorError as exc:
            raise safetensors_os_error(exc) from exc
        staging.chmod(0o755)
        if target.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            target.rename(retired / target.name)
            staging.rename(target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


_OS_ERROR_TAIL = re.compile(r"I/O error: (?P<text>.*) \(os error (?P<errno>\d+)\)")


def safetensors_os_error(exc: Exception) -> OSError:
    """The OSError inside a safetensors write failure. safetensors raises its own exception type
    for a failed write (`Error while serializing: I/O error: No space left on device (os error
    28)`), which callers that handle `OSError` (a full disk) would otherwise let through as a
    traceback."""
    found = _OS_ERROR_TAIL.search(str(exc))
    if found is None:
        return OSError(errno.EIO, str(exc))
    return OSError(int(found["errno"]), found["text"])


def summarize_pass(loss: float, counts: Mapping[str, int], gap: torch.Tensor) -> ForwardBackwardStats:
    """The stats of one `forward_backward` call from its loss, token/datum counts (the integer
    fields of `ForwardBackwardStats` by name) and the learner − sampler log-probability gaps of
    its trained tokens that have a sampler value."""
    ratio = torch.exp(gap)
    low, high = RATIO_BAND
    some = ratio.numel() > 0
    return ForwardBackwardStats(
        loss=loss,
        **counts,
        sampler_tokens=int(ratio.numel()),
        ratio_mean=float(ratio.mean()) if some else 0.0,
        ratio_max=float(ratio.max()) if some else 0.0,
        ratio_outside=float(((ratio < low) | (ratio > high)).float().mean()) if some else 0.0,
        logprob_gap=float(gap.abs().mean()) if some else 0.0,
        kl_k1=float((-gap).mean()) if some else 0.0,
        kl_k3=float((ratio - 1 - gap).mean()) if some else 0.0,
    )


def masked_logprobs(lm: nn.Module, batch: MicroBatch, device: torch.device, chunk: int | None) -> torch.Tensor:
    """`[N]` float32 log-probabilities of `batch`'s trained tokens under the causal LM `lm`: the
    decoder's hidden states at trained positions only go through the LM head, in chunks of
    `chunk` tokens recomputed in the backward pass when `chunk` is set (see `LearnerConfig`)."""
    ids = batch.input_ids.to(device)
    attention = batch.attention_mask.to(device)
    rows, cols = batch.rows.to(device), batch.cols.to(device)
    targets = batch.targets.to(device)
    hidden = lm.get_decoder()(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
    picked = hidden[rows, cols]  # [N, H]: only the positions whose next token is trained
    head = lm.get_output_embeddings()
    softcap = getattr(lm.config, "final_logit_softcapping", None)
    if chunk is None or picked.shape[0] <= chunk or not torch.is_grad_enabled():
        return _head_logprobs(head, picked, targets, softcap)
    parts = [
        torch.utils.checkpoint.checkpoint(_head_logprobs, head, h, t, softcap, use_reentrant=False)
        for h, t in zip(picked.split(chunk), targets.split(chunk))
    ]
    return torch.cat(parts)


def _head_logprobs(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, softcap: float | None
) -> torch.Tensor:
    """log softmax(head(hidden))[target] in float32, for `[N, H]` hidden states."""
    logits = head(hidden).float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)


__all__ = [
    "RATIO_BAND",
    "ForwardBackwardStats",
    "Learner",
    "LearnerConfig",
    "LoraSettings",
    "OptimStats",
    "StepStats",
    "TorchLearner",
    "constant_schedule",
    "cpu_supports_bf16",
    "load_causal_lm",
    "masked_logprobs",
    "peak_memory_bytes",
    "resolve_device",
    "summarize_pass",
    "write_folder_atomically",
]
