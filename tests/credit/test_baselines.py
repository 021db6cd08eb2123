"""Leave-one-out baselines (§5.2 step 6, §6.2 step 4, §7.2) on hand-computed cases."""

from __future__ import annotations

import pytest

from sera.credit import execution_advantage, execution_baselines, loo_advantages, root_balanced_loo


def test_loo_compares_each_reward_with_the_mean_of_the_others():
    # 1 - mean(0, 0, 1) = 2/3; 0 - mean(1, 0, 1) = -2/3.
    assert loo_advantages([1, 0, 0, 1]) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert loo_advantages([-0.1, -0.5]) == pytest.approx([0.4, -0.4])


def test_loo_with_one_or_no_item():
    assert loo_advantages([0.7]) == [0.0]
    assert loo_advantages([]) == []


def test_loo_rejects_non_finite_rewards():
    with pytest.raises(ValueError, match=r"rewards\[1\]"):
        loo_advantages([0.0, float("nan")])


def test_root_balanced_loo_weighs_rollouts_not_events():
    # m = [0.75, 0 (no events), 0.3], sum 1.05, N = 3.
    # rollout 0 baseline (1.05 - 0.75)/2 = 0.15; rollout 2 baseline (1.05 - 0.3)/2 = 0.375.
    out = root_balanced_loo([[1.0, 0.5], [], [0.3]])
    assert len(out) == 3 and out[1] == []
    assert out[0] == pytest.approx([0.85, 0.35])
    assert out[2] == pytest.approx([-0.075])


def test_root_balanced_loo_two_rollouts_with_different_event_counts():
    # m = [1/3, 1.0]: each rollout's baseline is the other's mean.
    out = root_balanced_loo([[1.0, 0.0, 0.0], [1.0]])
    assert out[0] == pytest.approx([0.0, -1.0, -1.0])
    assert out[1] == pytest.approx([2 / 3])


def test_root_balanced_loo_single_rollout_subtracts_its_own_mean():
    assert root_balanced_loo([[1.0, 0.5]]) == [[0.25, -0.25]]
    assert root_balanced_loo([[]]) == [[]]
    assert root_balanced_loo([]) == []


def test_execution_baseline_is_mean_of_other_rollouts_root_rewards():
    assert execution_baselines([1.0, 0.0, 1.0]) == pytest.approx([0.5, 1.0, 0.5])
    assert execution_baselines([1.0]) == [1.0]
    assert execution_baselines([]) == []


def test_execution_advantage_centres_any_datum_of_the_rollout():
    # A child of rollout 1 (baseline 1.0) with rubric score 0.8.
    baselines = execution_baselines([1.0, 0.0, 1.0])
    assert execution_advantage(0.8, baselines[1]) == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="finite"):
        execution_advantage(float("inf"), 0.0)
