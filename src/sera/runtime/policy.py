"""The policy protocol: an async call from chat messages and sampling settings to a completion.

Every backend (the scripted oracle, the in-process transformers sampler, an OpenAI-compatible
server) implements `Policy`. Token ids and log-probabilities are optional because only some
backends have them; training requires them, evaluation does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from sera.types import Message, Usage


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one model call."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    max_tokens: int = 512
    """Maximum completion tokens."""
    stop: tuple[str, ...] = ()
    """Stop sequences; the one that stopped generation is kept in the returned text and token
    ids, as generated (the turn history and the trained tokens are what the model produced)."""
    seed: int | None = None
    """Sampling seed, when the backend supports one."""
    max_prompt_tokens: int | None = None
    """Prompt cap: longer prompts go through the context policy (`sera.policy.context`);
    None keeps the prompt whole."""
    logprobs: bool = True
    """Ask for completion token ids and log-probabilities (training needs them)."""
    repetition_stop: int = 0
    """End a completion once its last this-many tokens repeat one unit of at most 16 tokens (a
    degenerate loop), finish reason `repetition` (`sera.policy.repetition`); 0: off."""


@dataclass(frozen=True)
class Completion:
    """What a policy returns for one call."""

    text: str
    """The completion text."""
    token_ids: list[int] | None = None
    """Completion token ids, when the backend has them."""
    logprobs: list[float] | None = None
    """Sampler log-probability of each completion token, aligned with `token_ids`."""
    prompt_token_ids: list[int] | None = None
    """Prompt token ids, when the backend has them."""
    prompt_messages: list[Message] | None = None
    """The prompt actually sent, when the backend changed it (context truncation)."""
    finish_reason: str | None = None
    """Why generation stopped: `stop`, `length`, ..."""
    usage: Usage = field(default_factory=Usage)
    """Token counts."""
    policy_version: int | None = None
    """The version of the trained weights that produced this completion (optimizer updates
    before it), when the caller knows it (training); None otherwise."""


@runtime_checkable
class Policy(Protocol):
    """An agent policy: one call per agent step."""

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        """Complete the conversation `messages`."""
        ...


@runtime_checkable
class Sampler(Policy, Protocol):
    """A model backend: a `Policy` that can also complete raw prompt token ids."""

    async def complete_tokens(self, prompt_token_ids: list[int], sampling: SamplingParams) -> Completion:
        """Complete a prompt given as token ids (no chat template applied)."""
        ...

    async def close(self) -> None:
        """Release workers, connections and models."""
        ...
