"""RAO execution reward per node (§6.3)."""

from __future__ import annotations

import pytest

from sera.credit import rao_reward


def test_lambda_zero_is_own_success():
    assert rao_reward(True) == 1.0
    assert rao_reward(False, [True, True]) == 0.0


def test_child_bonus_counts_only_labelled_children():
    # 2 of 3 labelled children succeeded; the unlabelled one is in neither count.
    assert rao_reward(True, [True, False, None, True], lam=0.5) == pytest.approx(1 + 0.5 * 2 / 3)
    assert rao_reward(False, [True, True], lam=0.5) == pytest.approx(0.5)


def test_no_labelled_child_means_no_bonus():
    assert rao_reward(True, [None, None], lam=0.5) == 1.0
    assert rao_reward(False, [], lam=0.5) == 0.0


def test_unlabelled_node_has_no_reward():
    assert rao_reward(None, [True], lam=0.5) is None


def test_invalid_input_is_rejected():
    with pytest.raises(ValueError, match="lam"):
        rao_reward(True, lam=float("nan"))
    with pytest.raises(ValueError, match=r"child_successes\[1\]"):
        rao_reward(True, [True, "yes"], lam=0.5)
