"""The one counter system: declared names, and aggregates as sums of trees' counters."""

from __future__ import annotations

import pytest

from sera.counters import Counter, check_counter, sum_counters


def test_an_aggregate_is_the_sum_of_its_trees_counters():
    trees = [{"policy_calls": 3, "judge_calls": 1}, {"policy_calls": 2, "world_clones": 9}, {}]
    assert sum_counters(trees) == {"judge_calls": 1, "policy_calls": 5, "world_clones": 9}
    assert list(sum_counters(trees)) == sorted(sum_counters(trees))


def test_counter_names_are_declared_once():
    assert check_counter("tool_calls") is Counter.TOOL_CALLS
    assert len({c.value for c in Counter}) == len(Counter)
    with pytest.raises(ValueError, match="unknown counter 'judge_call'; declare it in sera.counters.Counter"):
        check_counter("judge_call")
