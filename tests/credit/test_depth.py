"""Depth inverse-frequency weights (§7.3)."""

from __future__ import annotations

import pytest

from sera.credit import depth_weights


def test_hand_case_and_total_weight_equals_datum_count():
    # depth 0: 2 datums of one trajectory (T=1); depth 1: 3 datums of a, b (T=2); depth 2: T=1.
    # u = [1, 1/2, 1]; sum D_d u_d = 2 + 1.5 + 1 = 4.5; Z = 6 / 4.5 = 4/3.
    weights = depth_weights([0, 0, 1, 1, 1, 2], ["r", "r", "a", "b", "a", "c"])
    assert weights == pytest.approx([4 / 3, 4 / 3, 2 / 3, 2 / 3, 2 / 3, 4 / 3])
    assert sum(weights) == pytest.approx(6)


def test_level_totals_are_proportional_to_datums_per_trajectory():
    depths = [0] * 4 + [1] * 6 + [2] * 2
    ids = ["r"] * 4 + ["a", "a", "b", "b", "c", "c"] + ["d", "e"]
    weights = depth_weights(depths, ids)
    totals = [sum(w for w, d in zip(weights, depths) if d == level) for level in range(3)]
    # D/T per level: 4/1, 6/3, 2/2 -> 4 : 2 : 1, scaled to 12 datums.
    assert totals == pytest.approx([12 * 4 / 7, 12 * 2 / 7, 12 * 1 / 7])
    assert sum(weights) == pytest.approx(len(depths))


def test_one_depth_level_gives_unit_weights():
    assert depth_weights([1, 1, 1], ["a", "b", "b"]) == pytest.approx([1.0, 1.0, 1.0])
    assert depth_weights([], []) == []


def test_invalid_input_is_rejected():
    with pytest.raises(ValueError, match="3 items.*2"):
        depth_weights([0, 1, 1], ["r", "a"])
    with pytest.raises(ValueError, match=r"datum_depths\[1\]"):
        depth_weights([0, -1], ["r", "a"])
    with pytest.raises(ValueError, match="'a' appears at depth 1 and at depth 2"):
        depth_weights([0, 1, 2], ["r", "a", "a"])
