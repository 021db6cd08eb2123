"""The paper's context policy by hand: which turns are dropped, which tokens are kept, and
when the token cut is refused."""

from __future__ import annotations

import pytest

from sera.policy.context import ContextPolicy, check_prompt_ids, drop_oldest_turns, estimate_tokens, keep_head_and_tail
from sera.policy.errors import SamplerError
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


# -- ContextPolicy: the one rule of both samplers ----------------------------------------------


def render_chars(messages: list[Message], generation: bool) -> list[int]:
    """One id per character of a toy template: `[role]content`, then `[assistant]` to answer."""
    text = "".join(f"[{m.role}]{m.content}" for m in messages) + ("[assistant]" if generation else "")
    return [ord(c) for c in text]


def test_policy_under_the_cap_renders_the_prompt_unchanged() -> None:
    messages = conversation(2)
    fit = ContextPolicy.from_renderer(render_chars).fit(messages, cap=1000)
    assert fit.messages == messages and fit.prompt_ids == render_chars(messages, True)
    assert not fit.changed and not fit.token_cut
    assert ContextPolicy.from_renderer(render_chars).fit(messages, cap=None).prompt_ids == render_chars(messages, True)


def test_policy_drops_turns_then_cuts_head_and_tail() -> None:
    messages = conversation(3)[:-1] + [msg("user", "z" * 100)]  # the newest turn alone is too long
    head = render_chars(messages[:2], False)
    fit = ContextPolicy.from_renderer(render_chars).fit(messages, cap=len(head) + 30)
    kept = messages[:2] + messages[-2:]
    full = render_chars(kept, True)
    assert fit.messages == kept and fit.dropped_pairs == 2 and fit.token_cut and fit.changed
    assert fit.prompt_ids == full[: len(head)] + full[-30:]


def test_refuse_overflow_raises_where_cut_tokens_would_cut() -> None:
    messages = conversation(1)[:-1] + [msg("user", "z" * 100)]
    with pytest.raises(SamplerError) as caught:
        ContextPolicy.from_renderer(render_chars, overflow="refuse").fit(messages, cap=40)
    assert caught.value.kind == "prompt_too_long" and "overflow='refuse'" in str(caught.value)


def test_a_counting_only_policy_drops_turns_sends_no_ids_and_cannot_cut() -> None:
    policy = ContextPolicy(count_messages, overflow="refuse")
    fit = policy.fit(conversation(4), cap=6)
    assert [m.content for m in fit.messages] == ["S", "T", "a2", "o2", "a3", "o3"]
    assert fit.prompt_ids is None and fit.changed
    with pytest.raises(ValueError, match="render_ids"):
        ContextPolicy(count_messages)  # cut_tokens is the default and needs ids


def test_head_alone_over_the_cap_is_prompt_too_long() -> None:
    with pytest.raises(SamplerError) as caught:
        ContextPolicy.from_renderer(render_chars).fit([msg("system", "S" * 50), msg("user", "T")], cap=20)
    assert caught.value.kind == "prompt_too_long" and "system prompt and task alone" in str(caught.value)


def test_raw_prompt_ids_over_the_cap_are_prompt_too_long() -> None:
    check_prompt_ids([1, 2, 3], cap=3)
    check_prompt_ids([1, 2, 3], cap=None)
    with pytest.raises(SamplerError) as caught:
        check_prompt_ids([1, 2, 3], cap=2)
    assert caught.value.kind == "prompt_too_long"
