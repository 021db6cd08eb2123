"""Degenerate loops in a completion: the tail repeats one short unit of tokens over and over.

A small model that has not learned the reply format (the base SmolLM2 on an agent prompt writes
"1. 1. 1. ..." until the cap) spends every call's whole `max_tokens` on a loop. Such a reply is
unparseable long before the cap, so `SamplingParams.repetition_stop` ends it once the loop has
covered that many tokens (finish reason `repetition`). The check is exact token equality, so a
reply whose lines differ in any token (one tool call per line on different items) never trips it.
The authors' code has no such stop: it is off by default (`rollout.repetition_stop: 0`).
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_PERIOD = 16
"""Longest repeating unit, in tokens, that counts as a loop."""

REPETITION = "repetition"
"""The finish reason of a completion ended by the loop check."""


def loops_at_end(token_ids: Sequence[int], span: int, max_period: int = MAX_PERIOD, end: int | None = None) -> bool:
    """True when the `span` tokens before `end` (None: the last `span`) repeat one unit of at
    most `max_period` tokens.

    The unit must occur at least twice within the span (`period <= span // 2`), so a span shorter
    than two tokens never loops. Cost: per period tried, comparisons up to the first mismatch,
    which is almost always the first one.
    """
    end = len(token_ids) if end is None else end
    start = end - span
    if span < 2 or start < 0:
        return False
    for period in range(1, min(max_period, span // 2) + 1):
        if all(token_ids[i] == token_ids[i - period] for i in range(end - 1, start + period - 1, -1)):
            return True
    return False


def loop_cut(token_ids: Sequence[int], span: int, max_period: int = MAX_PERIOD) -> int | None:
    """Length of the shortest prefix of `token_ids` that ends in a loop of `span` tokens (where
    a sampler checking after every token would have stopped), or None when there is none."""
    return next((end for end in range(span, len(token_ids) + 1) if loops_at_end(token_ids, span, max_period, end)), None)


__all__ = ["MAX_PERIOD", "REPETITION", "loop_cut", "loops_at_end"]
