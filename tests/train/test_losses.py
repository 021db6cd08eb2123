"""CISPO, PPO-clip and policy-gradient losses (§7.4): values, gradients, masking, validation."""

from __future__ import annotations

import math

import pytest
import torch

from sera.train.losses import LOSSES, cispo_loss, policy_gradient_loss, ppo_clip_loss, ratio_stats

LN2 = math.log(2.0)


def hand_batch():
    """One sequence, ratios [1, 2, 0.5, e^10], advantage 2 for every token."""
    logprobs = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.0, -2.0 - LN2, -0.5 + LN2, -13.0]], dtype=torch.float64)
    return logprobs, old


def test_cispo_hand_value():
    logprobs, old = hand_batch()
    # Tokens 0-2: -(1/3)(1*2*-1 + 2*2*-2 + 0.5*2*-0.5) = 10.5/3.
    loss = cispo_loss(logprobs, old, 2.0, torch.tensor([[1, 1, 1, 0]]))
    assert loss.item() == pytest.approx(3.5)
    # All four: the e^10 ratio is clipped to 5: -(1/4)(-10.5 + 5*2*-3) = 40.5/4.
    loss = cispo_loss(logprobs, old, 2.0, torch.tensor([[1, 1, 1, 1]]))
    assert loss.item() == pytest.approx(10.125)


def test_cispo_gradient_is_clipped_ratio_times_advantage_over_token_count():
    torch.manual_seed(0)
    logprobs = (-torch.rand(3, 7, dtype=torch.float64) * 3).requires_grad_()
    old = logprobs.detach() + torch.randn(3, 7, dtype=torch.float64)
    old[0, 1] = logprobs[0, 1].detach() - 4.0  # ratio e^4 > 5: clipped
    mask = torch.rand(3, 7) > 0.3
    mask[0, 1] = True
    advantages = torch.tensor([1.5, -0.7, 0.3], dtype=torch.float64)

    cispo_loss(logprobs, old, advantages, mask).backward()

    weight = torch.exp(logprobs.detach() - old).clamp(0.0, 5.0)
    expected = -(weight * advantages[:, None] * mask) / mask.sum()
    torch.testing.assert_close(logprobs.grad, expected)
    assert logprobs.grad[0, 1].item() == pytest.approx(-5.0 * 1.5 / mask.sum().item())


def test_cispo_gradient_matches_finite_difference_of_a_reference():
    torch.manual_seed(1)
    logprobs = (-torch.rand(2, 5, dtype=torch.float64) * 2).requires_grad_()
    old = logprobs.detach() + torch.randn(2, 5, dtype=torch.float64) * 2
    mask = torch.tensor([[1, 1, 0, 1, 1], [0, 1, 1, 1, 0]], dtype=torch.bool)
    advantages = torch.randn(2, 5, dtype=torch.float64)
    weight = torch.exp(logprobs.detach() - old).clamp(0.0, 5.0)  # a constant in the reference

    def reference(lp: torch.Tensor) -> float:
        return float(-(weight * advantages * lp)[mask].sum() / mask.sum())

    cispo_loss(logprobs, old, advantages, mask).backward()
    eps = 1e-6
    numeric = torch.zeros_like(logprobs)
    for index in range(logprobs.numel()):
        bump = torch.zeros(logprobs.numel(), dtype=torch.float64)
        bump[index] = eps
        bump = bump.view_as(logprobs)
        base = logprobs.detach()
        numeric.view(-1)[index] = (reference(base + bump) - reference(base - bump)) / (2 * eps)
    torch.testing.assert_close(logprobs.grad, numeric, atol=1e-8, rtol=1e-6)
    assert reference(logprobs.detach()) == pytest.approx(cispo_loss(logprobs, old, advantages, mask).item())


def test_masked_tokens_get_no_gradient_even_with_nan_padding():
    logprobs, old = hand_batch()
    old = old.clone()
    old[0, 3] = float("nan")  # padding position, outside the mask
    old.requires_grad_()
    mask = torch.tensor([[True, True, True, False]])
    loss = cispo_loss(logprobs, old, 2.0, mask)
    loss.backward()
    assert torch.isfinite(loss)
    assert logprobs.grad[0, 3].item() == 0.0
    assert torch.isfinite(logprobs.grad).all()
    assert old.grad is None  # the old policy is a constant


def test_empty_mask_gives_a_differentiable_zero():
    logprobs, old = hand_batch()
    loss = cispo_loss(logprobs, old, 2.0, torch.zeros(1, 4, dtype=torch.bool))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(logprobs.grad, torch.zeros_like(logprobs))


def test_advantage_forms_agree():
    torch.manual_seed(2)
    logprobs = -torch.rand(2, 3, dtype=torch.float64)
    old = logprobs + 0.1
    mask = torch.ones(2, 3)
    per_sequence = torch.tensor([0.5, -1.0], dtype=torch.float64)
    expected = cispo_loss(logprobs, old, per_sequence[:, None].expand(2, 3), mask)
    assert cispo_loss(logprobs, old, per_sequence, mask).item() == pytest.approx(expected.item())
    assert cispo_loss(logprobs, old, per_sequence[:, None], mask).item() == pytest.approx(expected.item())
    scalar = cispo_loss(logprobs, old, 0.5, mask)
    assert scalar.item() == pytest.approx(cispo_loss(logprobs, old, torch.full((2, 3), 0.5), mask).item())
    flat = cispo_loss(logprobs[0], old[0], per_sequence[0], mask[0])
    assert flat.item() == pytest.approx(cispo_loss(logprobs[:1], old[:1], per_sequence[:1], mask[:1]).item())


def test_bad_input_is_rejected_with_the_shapes():
    logprobs, old = hand_batch()
    mask = torch.ones(1, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"old_logprobs shape \(1, 3\) != logprobs shape \(1, 4\)"):
        cispo_loss(logprobs, old[:, :3], 1.0, mask)
    with pytest.raises(ValueError, match=r"mask shape \(4,\)"):
        cispo_loss(logprobs, old, 1.0, mask[0])
    with pytest.raises(ValueError, match=r"advantages shape \(3,\)"):
        cispo_loss(logprobs, old, torch.ones(3), mask)
    with pytest.raises(ValueError, match="0/1"):
        cispo_loss(logprobs, old, 1.0, torch.full((1, 4), 0.5))
    nan_old = old.clone()
    nan_old[0, 0] = float("nan")
    with pytest.raises(ValueError, match="old_logprobs is NaN at 1 trainable"):
        cispo_loss(logprobs, nan_old, 1.0, mask)


def test_ppo_clip_hand_case():
    logprobs = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    old = -torch.log(torch.tensor([1.5, 0.5, 1.1], dtype=torch.float64))  # ratios 1.5, 0.5, 1.1
    advantages = torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64)
    loss = ppo_clip_loss(logprobs, old, advantages, torch.ones(3))
    # min terms: min(1.5, 1.26) = 1.26; min(-0.5, -0.8) = -0.8; min(-1.1, -1.1) = -1.1.
    assert loss.item() == pytest.approx(-(1.26 - 0.8 - 1.1) / 3)
    loss.backward()
    # Tokens 0 and 1 sit on the clipped branch (no gradient); token 2: d/dlp -(rho A)/3 = 1.1/3.
    torch.testing.assert_close(logprobs.grad, torch.tensor([0.0, 0.0, 1.1 / 3], dtype=torch.float64))


def test_policy_gradient_hand_case():
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -4.0]], requires_grad=True)
    loss = policy_gradient_loss(logprobs, torch.tensor([1.0, -2.0]), torch.tensor([[1, 1], [1, 0]]))
    assert loss.item() == pytest.approx(-(-1.0 - 2.0 + 1.0) / 3)


def test_registry_uses_one_signature():
    logprobs, old = hand_batch()
    mask = torch.ones(1, 4)
    assert set(LOSSES) == {"cispo", "ppo_clip", "pg", "sft"}
    for name, loss_fn in LOSSES.items():
        assert torch.isfinite(loss_fn(logprobs, old, 1.0, mask)), name
    assert LOSSES["pg"](logprobs, old, 1.0, mask).item() == pytest.approx(6.5 / 4)


def test_ratio_stats():
    logprobs, old = hand_batch()
    stats = ratio_stats(logprobs, old, torch.ones(1, 4))
    assert stats["ratio_mean"] == pytest.approx((1 + 2 + 0.5 + math.exp(10)) / 4)
    assert stats["ratio_max"] == pytest.approx(math.exp(10))
    assert stats["clipped_fraction"] == pytest.approx(0.25)
    assert stats["tokens"] == 4
    assert ratio_stats(logprobs, old, torch.zeros(1, 4))["tokens"] == 0


# -- sft ---------------------------------------------------------------------------------------


def test_sft_is_token_mean_nll_and_ignores_old_logprobs_and_advantages():
    from sera.train.losses import sft_loss

    logprobs = torch.tensor([[-1.0, -2.0, float("nan")], [-0.5, -4.0, -3.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    loss = sft_loss(logprobs, mask)
    assert loss.item() == pytest.approx((1.0 + 2.0 + 0.5 + 3.0) / 4)
    loss.backward()
    expected = torch.tensor([[-0.25, -0.25, 0.0], [-0.25, 0.0, -0.25]])
    assert torch.equal(logprobs.grad, expected)
    registered = LOSSES["sft"](logprobs, torch.full_like(logprobs, float("nan")), -3.0, mask)
    assert registered.item() == pytest.approx(loss.item())


def test_sft_empty_mask_is_zero_with_gradient_path():
    from sera.train.losses import sft_loss

    logprobs = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss = sft_loss(logprobs, torch.tensor([0, 0]))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(logprobs.grad, torch.zeros(2))


@pytest.mark.parametrize("name", ["cispo", "ppo_clip", "pg"])
def test_negative_scale_damps_only_the_push_down_of_worse_than_baseline_tokens(name: str) -> None:
    base = torch.tensor([[-0.5, -1.0], [-0.2, -2.0]])
    old = base.clone()
    advantages = torch.tensor([1.0, -1.0])  # row 0 better than its baseline, row 1 worse
    mask = torch.ones(2, 2, dtype=torch.bool)

    def grad(**options):
        logprobs = base.clone().requires_grad_(True)
        LOSSES[name](logprobs, old, advantages, mask, **options).backward()
        return logprobs.grad

    full, half, none = grad(), grad(negative_scale=0.5), grad(negative_scale=0.0)
    assert torch.equal(full[0], half[0]) and torch.equal(full[0], none[0])  # better-than-baseline: unchanged
    assert torch.allclose(half[1], full[1] * 0.5) and torch.all(none[1] == 0) and torch.all(full[1] != 0)
    with pytest.raises(ValueError, match="negative_scale"):
        grad(negative_scale=1.5)


def test_negative_scale_reaches_the_learner_only_when_set() -> None:
    from sera.testing.tiny import tiny_model_and_tokenizer
    from sera.train.config import load_config
    from sera.train.setup import learner_config

    _, tokenizer = tiny_model_and_tokenizer(seed=1)
    assert "negative_scale" not in learner_config(load_config(None), tokenizer).loss_options
    assert learner_config(load_config(None, overrides=["loss.negative_scale=0"]), tokenizer).loss_options == {
        "clip_low": 0.0, "clip_high": 5.0, "negative_scale": 0.0}
