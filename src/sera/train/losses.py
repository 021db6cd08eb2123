"""Token-level losses (§7.4): CISPO (the paper's), PPO-clip, plain policy gradient, and SFT.

All losses are token means over the trainable tokens M of the whole batch:
`L = (1/|M|) Σ_{t ∈ M} ℓ_t`. When a learner splits a batch into microbatches it must weight
each microbatch loss by `|M_mb| / |M_total|` to reproduce the full-batch mean.
`negative_scale` (every policy loss) multiplies the negative advantages: 1 is the paper's; below 1
damps the push-down of worse-than-baseline trajectories (`loss.negative_scale`).
Shapes: `logprobs`, `old_logprobs`, `mask` are `[B, T]` or `[T]`; `advantages` is per token
(same shape), per sequence (`[B]`, broadcast over T) or a scalar. Positions outside M may hold
anything (padding, NaN): they are replaced before any arithmetic, so they reach neither the
value nor the gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch


Advantages = torch.Tensor | float
"""Per token (`logprobs`' shape), per sequence (`[B]` or `[B, 1]`), or one scalar."""


class _Batch(NamedTuple):
    logprobs: torch.Tensor  # 0 outside M, gradient flows inside M only
    old_logprobs: torch.Tensor  # detached; 0 outside M
    advantages: torch.Tensor  # per token, detached; 0 outside M
    tokens: int  # |M|


def _prepare(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: Advantages, mask: torch.Tensor,
    negative_scale: float = 1.0,
) -> _Batch:
    """Validate shapes and values, broadcast advantages (the negative ones times
    `negative_scale`), and blank out positions outside M."""
    if not 0.0 <= negative_scale <= 1.0:
        raise ValueError(f"need 0 <= negative_scale <= 1, got {negative_scale!r}")
    if logprobs.dim() not in (1, 2):
        raise ValueError(f"logprobs must be [B, T] or [T], got shape {tuple(logprobs.shape)}")
    for name, tensor in (("old_logprobs", old_logprobs), ("mask", mask)):
        if tensor.shape != logprobs.shape:
            raise ValueError(
                f"{name} shape {tuple(tensor.shape)} != logprobs shape {tuple(logprobs.shape)}"
            )
    if mask.dtype != torch.bool and not ((mask == 0) | (mask == 1)).all():
        raise ValueError("mask must be bool or hold only 0/1 values")
    m = mask.to(device=logprobs.device, dtype=torch.bool)
    adv = torch.as_tensor(advantages, dtype=logprobs.dtype, device=logprobs.device).detach()
    rows = logprobs.shape[0]
    if logprobs.dim() == 2 and tuple(adv.shape) in ((rows,), (rows, 1)):
        adv = adv.reshape(rows, 1)  # one advantage per sequence, broadcast over T below
    elif adv.dim() != 0 and adv.shape != logprobs.shape:
        raise ValueError(
            f"advantages shape {tuple(adv.shape)} fits neither logprobs shape "
            f"{tuple(logprobs.shape)} nor one value per sequence"
        )
    adv = adv.expand_as(logprobs)
    if negative_scale != 1.0:
        adv = torch.where(adv < 0, adv * negative_scale, adv)
    old = old_logprobs.detach().to(device=logprobs.device, dtype=logprobs.dtype)
    for name, tensor in (("old_logprobs", old), ("advantages", adv)):
        bad = int(torch.isnan(tensor[m]).sum())
        if bad:
            raise ValueError(f"{name} is NaN at {bad} trainable (mask=1) positions")
    zeros = torch.zeros_like(logprobs, requires_grad=False)
    return _Batch(
        logprobs=torch.where(m, logprobs, zeros),
        old_logprobs=torch.where(m, old, zeros),
        advantages=torch.where(m, adv, zeros),
        tokens=int(m.sum()),
    )


def _token_mean(per_token: torch.Tensor, batch: _Batch, logprobs: torch.Tensor) -> torch.Tensor:
    """Σ ℓ_t / |M|; an empty M gives a zero that still has a gradient path."""
    if batch.tokens == 0:
        return (logprobs * 0).sum()
    return per_token.sum() / batch.tokens


def cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: Advantages,
    mask: torch.Tensor,
    clip_low: float = 0.0,
    clip_high: float = 5.0,
    negative_scale: float = 1.0,
) -> torch.Tensor:
    """CISPO (§7.4).

    `L = -(1/|M|) Σ_{t ∈ M} sg(clip(ρ_t, clip_low, clip_high)) · A_t · log π_θ(a_t)` with
    `ρ_t = exp(log π_θ(a_t) - log π_old(a_t))`. The clipped ratio is a constant weight, so every
    token keeps the gradient `-(1/|M|) clip(ρ_t) A_t` (unlike PPO, clipping never zeroes it).
    """
    if not 0.0 <= clip_low <= clip_high:
        raise ValueError(f"need 0 <= clip_low <= clip_high, got {clip_low!r}, {clip_high!r}")
    batch = _prepare(logprobs, old_logprobs, advantages, mask, negative_scale)
    ratio = torch.exp(batch.logprobs.detach() - batch.old_logprobs)
    weight = ratio.clamp(clip_low, clip_high)
    return _token_mean(-(weight * batch.advantages * batch.logprobs), batch, logprobs)


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: Advantages,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.26,
    negative_scale: float = 1.0,
) -> torch.Tensor:
    """PPO-clip: token mean of `-min(ρ_t A_t, clip(ρ_t, 1 - eps_low, 1 + eps_high) A_t)`."""
    if not (0.0 <= eps_low < 1.0 and eps_high >= 0.0):
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low!r}, {eps_high!r}")
    batch = _prepare(logprobs, old_logprobs, advantages, mask, negative_scale)
    ratio = torch.exp(batch.logprobs - batch.old_logprobs)
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    surrogate = torch.minimum(ratio * batch.advantages, clipped * batch.advantages)
    return _token_mean(-surrogate, batch, logprobs)


def policy_gradient_loss(
    logprobs: torch.Tensor, advantages: Advantages, mask: torch.Tensor, negative_scale: float = 1.0
) -> torch.Tensor:
    """REINFORCE: token mean of `-A_t · log π_θ(a_t)` (on-policy; no ratio)."""
    batch = _prepare(logprobs, torch.zeros_like(logprobs), advantages, mask, negative_scale)
    return _token_mean(-(batch.advantages * batch.logprobs), batch, logprobs)


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Supervised fine-tuning: token mean of `-log π_θ(a_t)` over M (the NLL per trained token).

    Advantages and depth weights play no part: every trained token is imitated equally.
    """
    batch = _prepare(logprobs, torch.zeros_like(logprobs), 0.0, mask)
    return _token_mean(-batch.logprobs, batch, logprobs)


def _sft_with_old(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: Advantages, mask: torch.Tensor
) -> torch.Tensor:
    """`sft_loss` under the common signature (old log-probs and advantages are not used)."""
    return sft_loss(logprobs, mask)


def _policy_gradient_with_old(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: Advantages, mask: torch.Tensor,
    negative_scale: float = 1.0,
) -> torch.Tensor:
    """`policy_gradient_loss` under the common signature (the old log-probs are not used)."""
    return policy_gradient_loss(logprobs, advantages, mask, negative_scale)


LossFn = Callable[..., torch.Tensor]
"""`(logprobs, old_logprobs, advantages, mask, **options) -> scalar loss`."""

LOSSES: dict[str, LossFn] = {
    "cispo": cispo_loss,
    "ppo_clip": ppo_clip_loss,
    "pg": _policy_gradient_with_old,
    "sft": _sft_with_old,
}
"""Losses by config name, all callable as `(logprobs, old_logprobs, advantages, mask)`."""


@torch.no_grad()
def ratio_stats(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, clip_high: float = 5.0
) -> dict[str, float]:
    """Importance-ratio diagnostics over the trainable tokens: `ratio_mean`, `ratio_max`,
    `clipped_fraction` (share of tokens with ρ_t > clip_high) and `tokens` (|M|); all 0 when
    M is empty."""
    batch = _prepare(logprobs, old_logprobs, 0.0, mask)
    if batch.tokens == 0:
        return {"ratio_mean": 0.0, "ratio_max": 0.0, "clipped_fraction": 0.0, "tokens": 0}
    m = mask.to(device=logprobs.device, dtype=torch.bool)
    ratio = torch.exp(batch.logprobs - batch.old_logprobs)[m]
    return {
        "ratio_mean": float(ratio.mean()),
        "ratio_max": float(ratio.max()),
        "clipped_fraction": float((ratio > clip_high).float().mean()),
        "tokens": batch.tokens,
    }
