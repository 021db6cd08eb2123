"""The context policy of the paper's runs (sera-spec §2.3): make an over-long prompt fit.

One rule for every backend (`ContextPolicy.fit`):

1. Drop the oldest (assistant, observation) pairs after the first two messages (the system
   prompt and the task), oldest first, until the prompt fits.
2. If even the two head messages plus the newest turn are too long, cut token ids: keep the
   encoded head and as much of the newest tail as fits (`overflow="cut_tokens"`), or refuse
   with `prompt_too_long` (`overflow="refuse"`).

Dropping whole turns first keeps every remaining message intact, which keeps prefix merging of
training sequences possible for as long as possible. Step 2 needs the exact prompt ids, so it
needs a `render_ids` function (the chat template under the model's tokenizer); a backend that
can only estimate token counts can only refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sera.policy.errors import SamplerError
from sera.types import Message

HEAD_MESSAGES = 2
"""Messages never dropped: the system prompt and the first user message (the task)."""

TokenCounter = Callable[[list[Message]], int]
"""Prompt length of messages as the backend sends them (chat template and generation prompt)."""

RenderIds = Callable[[list[Message], bool], list[int]]
"""`render_ids(messages, add_generation_prompt)`: the prompt's token ids under the chat template."""

Overflow = Literal["cut_tokens", "refuse"]
"""What to do when the head plus the newest turn are still over the cap."""


@dataclass(frozen=True)
class FittedPrompt:
    """A prompt after dropping old turns (step 1 of the context policy)."""

    messages: list[Message]
    """The messages kept."""
    dropped_pairs: int
    """How many (assistant, user) pairs were dropped."""
    fits: bool
    """True when `messages` fit the cap; False means token-level head+tail truncation is needed."""


@dataclass(frozen=True)
class ContextFit:
    """A prompt after the whole context policy: what the backend must send."""

    messages: list[Message]
    """The messages kept (after a token cut: the messages the cut ids were rendered from)."""
    prompt_ids: list[int] | None
    """The exact prompt ids to send, when the policy renders ids; None for a counting-only
    policy (the backend sends `messages` and lets the server template them)."""
    dropped_pairs: int
    """How many (assistant, user) pairs were dropped."""
    token_cut: bool
    """True when `prompt_ids` is the head+tail cut of the rendered `messages`."""

    @property
    def changed(self) -> bool:
        """True when the prompt differs from the messages the caller gave."""
        return self.dropped_pairs > 0 or self.token_cut


@dataclass(frozen=True)
class ContextPolicy:
    """The one context policy of every sampler, parameterised by how it counts tokens."""

    count_tokens: TokenCounter
    """Prompt length of messages as the backend will send them."""
    render_ids: RenderIds | None = None
    """Exact prompt ids of messages; required by `overflow="cut_tokens"`. When given,
    `count_tokens` must equal `len(render_ids(messages, True))`."""
    overflow: Overflow = "cut_tokens"
    """Step 2: cut the ids head+tail, or refuse with `prompt_too_long`."""

    def __post_init__(self) -> None:
        if self.overflow not in ("cut_tokens", "refuse"):
            raise ValueError(f"overflow must be 'cut_tokens' or 'refuse', got {self.overflow!r}")
        if self.overflow == "cut_tokens" and self.render_ids is None:
            raise ValueError("overflow='cut_tokens' needs render_ids: a token cut needs the prompt's ids")

    @classmethod
    def from_renderer(cls, render_ids: RenderIds, overflow: Overflow = "cut_tokens") -> ContextPolicy:
        """The policy of a backend that renders exact prompt ids (counts are their length)."""
        return cls(lambda messages: len(render_ids(messages, True)), render_ids, overflow)

    def fit(self, messages: list[Message], cap: int | None) -> ContextFit:
        """Apply the policy to `messages` under `cap` prompt tokens (None: keep them whole).

        Raises `SamplerError("prompt_too_long")` when the prompt cannot be made to fit.
        """
        messages = list(messages)
        ids = self.render_ids(messages, True) if self.render_ids is not None else None
        if cap is None or (len(ids) if ids is not None else self.count_tokens(messages)) <= cap:
            return ContextFit(messages, ids, dropped_pairs=0, token_cut=False)
        fitted = drop_oldest_turns(messages, self.count_tokens, cap)
        ids = self.render_ids(fitted.messages, True) if self.render_ids is not None else None
        if fitted.fits:
            return ContextFit(fitted.messages, ids, fitted.dropped_pairs, token_cut=False)
        length = len(ids) if ids is not None else self.count_tokens(fitted.messages)
        if self.overflow == "refuse" or self.render_ids is None or ids is None:  # (None: counting only)
            raise SamplerError(
                "prompt_too_long",
                f"the prompt has {length} tokens after dropping {fitted.dropped_pairs} old turns, over "
                f"max_prompt_tokens={cap}, and this backend's context policy does not cut tokens "
                f"(overflow={self.overflow!r})",
            )
        if len(fitted.messages) <= HEAD_MESSAGES:
            raise SamplerError(
                "prompt_too_long",
                f"the system prompt and task alone take {length} tokens, over max_prompt_tokens={cap}",
            )
        head = self.render_ids(fitted.messages[:HEAD_MESSAGES], False)
        if ids[: len(head)] != head:
            raise SamplerError(
                "prompt_too_long",
                f"the prompt takes {length} tokens, over max_prompt_tokens={cap}, and cannot be cut by tokens: "
                "the chat template does not render the system prompt and task as a prefix of the prompt",
            )
        try:
            cut = keep_head_and_tail(ids, len(head), cap)
        except ValueError as error:
            raise SamplerError("prompt_too_long", str(error)) from error
        return ContextFit(fitted.messages, cut, fitted.dropped_pairs, token_cut=True)


def check_prompt_ids(prompt_ids: list[int], cap: int | None) -> None:
    """Raw prompt ids have no turns to drop: over the cap they are `prompt_too_long`."""
    if cap is not None and len(prompt_ids) > cap:
        raise SamplerError("prompt_too_long", f"{len(prompt_ids)} prompt token ids exceed max_prompt_tokens={cap}")


def drop_oldest_turns(messages: list[Message], count_tokens: TokenCounter, cap: int) -> FittedPrompt:
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
