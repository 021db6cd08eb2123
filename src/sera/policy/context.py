"""The context policy of the paper's runs (sera-spec §2.3): make an over-long prompt fit.

Step 1 drops the oldest (assistant, observation) pairs after the first two messages (the system
prompt and the task), oldest first, until the prompt fits. Step 2, if even the two head messages
plus the newest turn are too long, works on token ids: keep the encoded head and as much of the
tail as fits. Dropping whole turns first keeps every remaining message intact, which keeps
prefix merging of training sequences possible for as long as possible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sera.types import Message

HEAD_MESSAGES = 2
"""Messages never dropped: the system prompt and the first user message (the task)."""


@dataclass(frozen=True)
class FittedPrompt:
    """A prompt after the context policy."""

    messages: list[Message]
    """The messages kept."""
    dropped_pairs: int
    """How many (assistant, user) pairs were dropped."""
    fits: bool
    """True when `messages` fit the cap; False means token-level head+tail truncation is needed."""


def drop_oldest_turns(
    messages: list[Message], count_tokens: Callable[[list[Message]], int], cap: int
) -> FittedPrompt:
    """Drop the oldest (assistant, user) pairs after the head until `count_tokens(...) <= cap`.

    The last message is never dropped (it is what the model must answer). `count_tokens` must
    count the prompt as the sampler will send it (chat template and generation prompt included).
    """
    if cap < 1:
        raise ValueError(f"prompt cap must be >= 1, got {cap}")
    kept = list(messages)
    dropped = 0
    while count_tokens(kept) > cap:
        body = kept[HEAD_MESSAGES:]
        # Need a full pair to drop and at least one message after it to answer.
        if len(body) < 3 or body[0].role != "assistant" or body[1].role != "user":
            return FittedPrompt(kept, dropped, fits=False)
        kept = kept[:HEAD_MESSAGES] + body[2:]
        dropped += 1
    return FittedPrompt(kept, dropped, fits=True)


def keep_head_and_tail(prompt_ids: list[int], head_len: int, cap: int) -> list[int]:
    """Token-level fallback: the first `head_len` ids, then the newest ids, `cap` in all.

    Raises ValueError when the head alone does not leave room for any tail token.
    """
    if len(prompt_ids) <= cap:
        return list(prompt_ids)
    if head_len >= cap:
        raise ValueError(
            f"the system prompt and task alone take {head_len} tokens, more than the prompt cap {cap}"
        )
    tail = cap - head_len
    return list(prompt_ids[:head_len]) + list(prompt_ids[-tail:])


def estimate_tokens(messages: list[Message]) -> int:
    """The reference's cheap estimate when no tokenizer is at hand: Σ(4 + len/4) + 2."""
    return sum(4 + len(m.content) // 4 for m in messages) + 2
