"""The loop check behind `SamplingParams.repetition_stop`: what counts as a degenerate loop."""

from __future__ import annotations

from sera.policy.repetition import MAX_PERIOD, loop_cut, loops_at_end


def test_a_short_unit_repeated_over_the_span_loops() -> None:
    one_dot = [16, 30] * 20  # "1. 1. 1. ..." as the base model writes it: period 2
    assert loops_at_end(one_dot, 32)
    assert loops_at_end([7] * 32, 32)
    assert loops_at_end(list(range(MAX_PERIOD)) * 4, 64)


def test_lines_that_differ_in_one_token_or_a_long_unit_do_not_loop() -> None:
    lines = [tok for item in range(10) for tok in (5, 6, 100 + item, 9)]  # one call per line, different items
    assert not loops_at_end(lines, 32)
    assert not loops_at_end(list(range(MAX_PERIOD + 1)) * 4, 64)  # a unit longer than MAX_PERIOD
    assert not loops_at_end([16, 30] * 10, 32)  # shorter than the span
    assert not loops_at_end([7] * 40, 1)


def test_loop_cut_is_where_a_per_token_check_first_fires() -> None:
    prose = list(range(100, 140))
    ids = prose + [16, 30] * 40
    end = loop_cut(ids, 32)
    assert end == len(prose) + 32  # the first 32-token window that is all loop
    assert loops_at_end(ids[:end], 32) and not loops_at_end(ids[:end - 1], 32)
    assert loop_cut(prose, 32) is None
