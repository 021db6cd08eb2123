"""Token ids for a text-only policy: wrap a scripted policy (an oracle, a replay) so that its
steps carry the prompt and completion token ids a tokenizer gives, as a model's steps would.

The ids are what the learner would train on if these replies were the model's; there are no
sampler log-probabilities (a learner recomputes them, so the importance ratio starts at 1).
Used to build training data from scripted rollouts (tests, credit benchmarks, warm starts).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sera.policy.tokenizing import chat_ids
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.types import Usage


class TokenizingPolicy:
    """`inner`'s replies, with token ids from `tokenizer` (chat template for the prompt)."""

    def __init__(self, inner: Policy, tokenizer: Any) -> None:
        if tokenizer.chat_template is None:
            raise ValueError("the tokenizer has no chat template; prompt ids cannot be built")
        self.inner = inner
        self.tokenizer = tokenizer

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        completion = await self.inner(messages, sampling)
        prompt = chat_ids(self.tokenizer, completion.prompt_messages or messages)
        ids = list(self.tokenizer.encode(completion.text, add_special_tokens=False))
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)  # the turn ends as a model's would
        return replace(
            completion,
            token_ids=ids,
            logprobs=None,
            prompt_token_ids=prompt,
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(ids)),
        )
