"""Getting the learner's new weights to the sampler, and checking that they arrived.

After every update the loop calls `WeightSync.sync(learner, version)` before the next round
samples. An implementation makes the sampler generate with the learner's current weights and
then runs the **canary**: the sampler completes a fixed probe greedily with log-probabilities,
the learner recomputes the log-probabilities of the same tokens, and the largest difference must
stay within a bound (fp32: 1e-3). A failed canary raises `CanaryError`: sampling with weights
other than the trained ones would make every later importance ratio wrong, silently.

`SharedModuleSync` is the in-process case: the sampler runs the learner's own `nn.Module`, so the
weights are already there; the sync only checks that no sampler call straddles the update and
runs the canary. `CopiedModuleSync` is the in-process case with the sampler's own copy of the
module (bf16 beside fp32 masters; unsharded beside an FSDP2 learner): the sync copies the weights over first.
`sera.serving.vllm_sync.VLLMAdapterSync` is the vLLM case (save the LoRA adapter, hot-load it
under a versioned name, route the next round to it, then the canary).
Every failure of a sync is a `SyncError` (`CanaryError` among them) with a one-line message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message

PROBE: tuple[Message, ...] = (
    Message(role="system", content="You are a careful assistant."),
    Message(role="user", content="List three tools a carpenter uses, then say done."),
)
"""The canary's fixed prompt (any text works; it only has to be the same every time)."""
PROBE_TOKENS = 12
"""Tokens the canary generates and compares."""
PROBE_SAMPLING = SamplingParams(temperature=0.0, max_tokens=PROBE_TOKENS, logprobs=True, seed=0)
"""How the sampler completes the probe: greedy, with log-probabilities."""
FP32_BOUND = 1e-3
"""Largest sampler-learner log-prob difference accepted in fp32 (the issue's bound)."""
BF16_BOUND = 0.25
"""Default bound when the learner computes in bf16 autocast and the sampler does not; see
docs/training.md for the measured gaps it covers."""


class SyncError(RuntimeError):
    """The sampler could not be brought to the learner's weights; one line saying why."""


class CanaryError(SyncError):
    """The sampler's log-probabilities of the probe differ from the learner's past the bound."""


@dataclass(frozen=True)
class SyncReport:
    """What one sync did."""

    version: int
    """The policy version the sampler now serves."""
    seconds: float
    """Wall time of the sync, canary included."""
    canary_gap: float
    """Largest |sampler - learner| log-probability over the probe's tokens."""
    canary_mean_gap: float
    """Mean |sampler - learner| over the probe's tokens."""
    canary_tokens: int
    """Probe tokens compared."""
    save_s: float | None = None
    """Seconds to write the weights (adapter) the sampler loads; None when nothing is written."""
    load_s: float | None = None
    """Seconds for the sampler to load them and switch to them; None when nothing is loaded."""
    canary_s: float | None = None
    """Seconds of the canary (the sampler's probe completion and the learner's recompute)."""
    adapter: str | None = None
    """The adapter name the sampler now serves; None without adapters."""

    def as_metrics(self) -> dict[str, float | str]:
        """The `sync/` keys of a metrics line (the optional ones only when set)."""
        line: dict[str, float | str] = {"sync/canary_gap": self.canary_gap, "sync/canary_mean_gap": self.canary_mean_gap}
        for key in ("save_s", "load_s", "canary_s", "adapter"):
            if getattr(self, key) is not None:
                line[f"sync/{key}"] = getattr(self, key)
        return line


class WeightSync(Protocol):
    """Makes the sampler serve the learner's current weights as policy `version`."""

    def sync(self, learner: Any, version: int) -> SyncReport:
        """Push (or check) the weights, run the canary, and report; raises `CanaryError`."""
        ...


def check_idle(in_flight: Callable[[], int], version: int) -> None:
    """RuntimeError when sampler calls are in flight: a sync must not change weights under them."""
    busy = in_flight()
    if busy:
        raise RuntimeError(f"{busy} sampler calls in flight during the weight sync to version {version}")


def canary_gaps(sampler: Any, learner: Any, sampling: SamplingParams | None = None) -> tuple[float, float, int]:
    """(max gap, mean gap, tokens) between the sampler's log-probs of a greedy probe completion and
    the learner's recompute of the same tokens."""
    completion: Completion = asyncio.run(sampler(list(PROBE), sampling or PROBE_SAMPLING))
    return completion_gaps(completion, learner)


def completion_gaps(completion: Completion, learner: Any) -> tuple[float, float, int]:
    """(max gap, mean gap, tokens) between a sampler's probe completion (made elsewhere, e.g. by a
    Ray worker) and the learner's recompute of the same tokens."""
    if not completion.token_ids or completion.logprobs is None or completion.prompt_token_ids is None:
        raise CanaryError("the canary needs a sampler that reports prompt ids, token ids and logprobs")
    recomputed = learner.sequence_logprobs(completion.prompt_token_ids, completion.token_ids).tolist()
    gaps = [abs(a - b) for a, b in zip(completion.logprobs, recomputed)]
    return max(gaps), sum(gaps) / len(gaps), len(gaps)


def check_canary(sampler: Any, learner: Any, version: int, bound: float) -> tuple[float, float, int]:
    """`canary_gaps`, raising `CanaryError` when the largest gap is over `bound`."""
    worst, mean, n = canary_gaps(sampler, learner)
    if worst > bound:
        raise CanaryError(
            f"canary failed after the update to policy version {version}: the sampler's log-probs of the "
            f"probe differ from the learner's by up to {worst:.3g} (mean {mean:.3g} over {n} tokens; "
            f"bound {bound:g}); the sampler is not generating with the trained weights"
        )
    return worst, mean, n


class SharedModuleSync:
    """The in-process sampler shares the learner's module: nothing to copy, only checks."""

    def __init__(self, sampler: Any, idle: Callable[[], int], bound: float = FP32_BOUND) -> None:
        """`idle()` returns the sampler calls in flight (must be 0 during an update and a sync)."""
        self.sampler = sampler
        self.in_flight = idle
        self.bound = bound

    def sync(self, learner: Any, version: int) -> SyncReport:
        start = time.perf_counter()
        check_idle(self.in_flight, version)
        worst, mean, n = check_canary(self.sampler, learner, version, self.bound)
        seconds = time.perf_counter() - start
        return SyncReport(version=version, seconds=seconds, canary_gap=worst, canary_mean_gap=mean, canary_tokens=n,
                          canary_s=seconds)


class CopiedModuleSync:
    """The in-process sampler runs its own copy of the learner's module (bf16 beside the learner's
    fp32 masters, for speed; an unsharded replica beside a sharded learner): the sync copies the
    learner's current weights into it, then runs the canary."""

    def __init__(self, sampler: Any, weights: Callable[[], Mapping[str, torch.Tensor]], copy: torch.nn.Module,
                 idle: Callable[[], int], bound: float) -> None:
        """`weights()` returns the learner's current weights by parameter name (its module's
        parameters, or a sharded learner's gathered full weights), `copy` is the sampler's module;
        `idle()` returns the sampler calls in flight (must be 0 during a sync)."""
        self.sampler, self.weights, self.copy, self.in_flight, self.bound = sampler, weights, copy, idle, bound

    def sync(self, learner: Any, version: int) -> SyncReport:
        start = time.perf_counter()
        check_idle(self.in_flight, version)
        copy_weights(self.weights(), self.copy)
        copied = time.perf_counter()
        worst, mean, n = check_canary(self.sampler, learner, version, self.bound)
        end = time.perf_counter()
        return SyncReport(version=version, seconds=end - start, canary_gap=worst, canary_mean_gap=mean, canary_tokens=n,
                          load_s=copied - start, canary_s=end - copied)


def copy_weights(weights: Mapping[str, torch.Tensor], target: torch.nn.Module) -> None:
    """Copy `weights` into `target`'s parameters of the same names (cast to their dtype); every
    parameter of `target` must be there, else `SyncError` naming the first that is missing."""
    theirs = dict(target.named_parameters())
    missing = sorted(theirs.keys() - weights.keys())
    if missing:
        raise SyncError(f"the sampler's copy of the model no longer matches the learner's: parameter {missing[0]!r}")
    with torch.no_grad():
        for name, param in theirs.items():
            param.copy_(weights[name])
