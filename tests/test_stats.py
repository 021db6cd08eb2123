"""`sera.stats`: the one Stat record, the headline rule and the band order every report uses."""

from __future__ import annotations

import math

import pytest

from sera.stats import HEADLINE_WEIGHTS, Stat, band_key, headline_weights, weighted_rate


def test_stat_has_no_spread_for_one_run_and_a_sample_std_for_more() -> None:
    one = Stat.of([0.5])
    assert (one.mean, one.std, one.n, one.values) == (0.5, None, 1, (0.5,))
    two = Stat.of([0.25, 0.75], tasks=4)
    assert two.mean == 0.5 and two.std == pytest.approx(0.5 / math.sqrt(2)) and two.tasks == 4
    assert Stat.of([]) == Stat(mean=None, std=None, n=0, values=())


def test_stat_json_names_tasks_only_where_recorded() -> None:
    assert Stat.of([1.0, 0.0]).to_json() == {"mean": 0.5, "std": pytest.approx(math.sqrt(0.5)), "n": 2, "values": [1.0, 0.0]}
    assert Stat.of([1.0], tasks=3).to_json()["tasks"] == 3


def test_headline_weights_cover_known_bands_only() -> None:
    assert headline_weights("textcraft-synth", ["easy", "hard"]) == {"easy": 147, "hard": 136}
    assert headline_weights("textcraft-synth", ["easy", "odd"]) is None  # a band outside the rule: pooled
    assert headline_weights("textcraft-synth", []) is None
    assert headline_weights("other-env", ["easy"]) is None
    assert HEADLINE_WEIGHTS["textworld-sync"][0] == "four-band macro average"


def test_weighted_rate_reweights_the_bands_present() -> None:
    weights = HEADLINE_WEIGHTS["textcraft-synth"][1]
    assert weighted_rate({"easy": 1.0, "medium": 0.0}, weights) == pytest.approx(147 / 360)
    assert weighted_rate({"easy": 0.5, "medium": 0.5, "hard": 0.5, "extreme": 0.5}, weights) == pytest.approx(0.5)


def test_bands_sort_by_difficulty_then_by_name() -> None:
    assert sorted(["zeta", "hard", "easy", "alpha", "extreme", "medium"], key=band_key) == \
        ["easy", "medium", "hard", "extreme", "alpha", "zeta"]
