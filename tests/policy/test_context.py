"""The paper's context policy by hand: which turns are dropped, which tokens are kept."""

from __future__ import annotations

import pytest

from sera.policy.context import drop_oldest_turns, estimate_tokens, keep_head_and_tail
from sera.types import Message


def msg(role: str, content: str) -> Message:
    return Message(role=role, content=content)  # type: ignore[arg-type]


def conversation(pairs: int) -> list[Message]:
    """system, task, then `pairs` (assistant a_i, user o_i) turns."""
    messages = [msg("system", "S"), msg("user", "T")]
    for i in range(pairs):
        messages += [msg("assistant", f"a{i}"), msg("user", f"o{i}")]
    return messages


def count_messages(messages: list[Message]) -> int:
    return len(messages)


def test_prompt_under_the_cap_is_unchanged() -> None:
    messages = conversation(3)
    fitted = drop_oldest_turns(messages, count_messages, cap=8)
    assert fitted.messages == messages and fitted.dropped_pairs == 0 and fitted.fits


def test_oldest_pairs_go_first_and_head_and_newest_turn_stay() -> None:
    messages = conversation(4)  # 10 messages
    fitted = drop_oldest_turns(messages, count_messages, cap=6)
    assert [m.content for m in fitted.messages] == ["S", "T", "a2", "o2", "a3", "o3"]
    assert fitted.dropped_pairs == 2 and fitted.fits


def test_drops_down_to_head_plus_last_turn_then_reports_it_does_not_fit() -> None:
    messages = conversation(3)
    fitted = drop_oldest_turns(messages, count_messages, cap=3)
    # a2/o2 is the newest turn: the last message is never dropped, so the pair stays.
    assert [m.content for m in fitted.messages] == ["S", "T", "a2", "o2"]
    assert fitted.dropped_pairs == 2 and not fitted.fits


def test_a_body_that_does_not_start_with_a_pair_is_not_touched() -> None:
    messages = [msg("system", "S"), msg("user", "T"), msg("user", "extra"), msg("assistant", "a"), msg("user", "o")]
    fitted = drop_oldest_turns(messages, count_messages, cap=3)
    assert fitted.messages == messages and fitted.dropped_pairs == 0 and not fitted.fits


def test_counting_uses_the_given_function() -> None:
    messages = conversation(2)
    seen: list[int] = []

    def count(kept: list[Message]) -> int:
        seen.append(len(kept))
        return sum(len(m.content) for m in kept)

    fitted = drop_oldest_turns(messages, count, cap=6)  # S T a0 o0 a1 o1 = 2+4+4 = 10 chars
    assert [m.content for m in fitted.messages] == ["S", "T", "a1", "o1"]
    assert seen == [6, 4]


def test_invalid_cap_is_an_error() -> None:
    with pytest.raises(ValueError, match="cap"):
        drop_oldest_turns(conversation(1), count_messages, cap=0)


def test_keep_head_and_tail_keeps_head_then_newest_ids() -> None:
    ids = list(range(20))
    assert keep_head_and_tail(ids, head_len=3, cap=8) == [0, 1, 2, 15, 16, 17, 18, 19]


def test_keep_head_and_tail_is_identity_when_it_fits() -> None:
    ids = list(range(5))
    out = keep_head_and_tail(ids, head_len=3, cap=5)
    assert out == ids and out is not ids


def test_keep_head_and_tail_refuses_a_head_that_fills_the_cap() -> None:
    with pytest.raises(ValueError, match="prompt cap 4"):
        keep_head_and_tail(list(range(10)), head_len=4, cap=4)


def test_estimate_tokens_matches_the_reference_formula() -> None:
    messages = [msg("system", "x" * 10), msg("user", "y" * 3)]
    assert estimate_tokens(messages) == (4 + 2) + (4 + 0) + 2
