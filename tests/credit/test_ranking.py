"""Rubric-writer rewards (§5.2 hinge ranking, §5.5 rank + dispersion) on hand-computed groups."""

from __future__ import annotations

import math

import pytest

from sera.credit import RankingDiagnostics, rank_dispersion_reward, ranking_diagnostics, ranking_reward

T, F = True, False


def test_every_success_clears_the_margin_gives_zero():
    # gaps 0.9-0.5=0.4 and 0.9-0.3=0.6, both >= 0.2 -> hinges 0, 0.
    assert ranking_reward([0.9, 0.5, 0.3], [T, F, F], margin=0.2) == 0.0


def test_hinge_mean_over_all_success_failure_pairs():
    # P = {0.6, 0.55}, N = {0.5, 0.3}: gaps 0.1, 0.3, 0.05, 0.25 -> hinges 0.1, 0, 0.15, 0.
    assert ranking_reward([0.6, 0.5, 0.3, 0.55], [T, F, F, T]) == pytest.approx(-0.25 / 4)


def test_tie_costs_the_full_margin_and_inversion_costs_more():
    assert ranking_reward([0.5, 0.5], [T, F], margin=0.2) == pytest.approx(-0.2)
    assert ranking_reward([0.2, 0.8], [T, F], margin=0.2) == pytest.approx(-0.8)
    assert ranking_reward([0.5, 0.5], [T, F], margin=0.0) == 0.0


@pytest.mark.parametrize(
    ("scores", "labels"),
    [([0.9, 0.1], [T, T]), ([0.9, 0.1], [F, F]), ([0.9, None], [T, F]), ([0.9, 0.1], [T, None]),
     ([], [])],
    ids=["all-success", "all-failure", "score-missing", "label-missing", "empty"],
)
def test_groups_without_supervision_give_none(scores, labels):
    assert ranking_reward(scores, labels) is None
    assert rank_dispersion_reward(scores, labels) is None
    assert ranking_diagnostics(scores, labels) is None


def test_items_with_missing_score_or_label_are_left_out():
    # The unlabelled 0.95 must not count (as a success it would add a pair), and the unscored
    # failure must not count either: the only pair is (0.6, 0.5).
    scores = [0.6, None, 0.5, 0.95]
    labels = [T, F, F, None]
    assert ranking_reward(scores, labels) == pytest.approx(-0.1)
    assert ranking_diagnostics(scores, labels).pairs == 1


def test_diagnostics_hand_case():
    diag = ranking_diagnostics([0.6, 0.5, 0.3, 0.55, 0.7], [T, F, F, T, F], margin=0.2)
    # gaps: 0.1, 0.3, -0.1, 0.05, 0.25, -0.15 -> hinges 0.1, 0, 0.3, 0.15, 0, 0.35
    assert diag == RankingDiagnostics(
        pairs=6,
        pairwise_accuracy=pytest.approx(4 / 6),
        margin_satisfaction=pytest.approx(2 / 6),
        mean_gap=pytest.approx(0.45 / 6),
        mean_hinge=pytest.approx(0.9 / 6),
    )
    assert ranking_reward([0.6, 0.5, 0.3, 0.55, 0.7], [T, F, F, T, F]) == pytest.approx(-0.9 / 6)


def test_rank_dispersion_hand_cases():
    # gap 0.1 -> order 0.1/0.2 = 0.5; pstdev(0.6, 0.5) = 0.05 -> disc 2*0.05 = 0.1.
    assert rank_dispersion_reward([0.6, 0.5], [T, F]) == pytest.approx(0.5 * 0.5 + 0.5 * 0.1)
    # gap 1 saturates order at 1; pstdev 0.5 -> 2*0.5 = 1 saturates disc.
    assert rank_dispersion_reward([1.0, 0.0], [T, F]) == pytest.approx(1.0)
    # inverted: order clipped at 0; disc from pstdev(0.2, 0.8, 0.5) = sqrt(0.06).
    expected = 0.5 * 0.0 + 0.5 * min(1.0, 2 * math.sqrt(0.06))
    assert rank_dispersion_reward([0.2, 0.8, 0.5], [T, F, None]) == pytest.approx(0.5 * 2 * 0.3)  # pstdev(0.2, 0.8)
    assert rank_dispersion_reward([0.2, 0.8, 0.5], [T, F, F]) == pytest.approx(expected)


def test_rank_dispersion_weights_are_applied():
    reward = rank_dispersion_reward([0.6, 0.5], [T, F], order_weight=1.0, dispersion_weight=0.0)
    assert reward == pytest.approx(0.5)


def test_invalid_input_is_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="3 items.*2"):
        ranking_reward([0.1, 0.2, 0.3], [T, F])
    with pytest.raises(ValueError, match=r"scores\[1\]"):
        ranking_reward([0.1, float("nan")], [T, F])
    with pytest.raises(ValueError, match=r"scores\[1\]"):
        ranking_reward([0.1, float("inf")], [T, None])
    with pytest.raises(ValueError, match="margin"):
        ranking_reward([0.1, 0.2], [T, F], margin=-0.1)
    with pytest.raises(ValueError, match="margin"):
        rank_dispersion_reward([0.1, 0.2], [T, F], margin=0.0)
    with pytest.raises(ValueError, match=r"labels\[0\]"):
        ranking_reward([0.1, 0.2], ["yes", F])
