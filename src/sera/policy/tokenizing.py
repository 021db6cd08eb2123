"""Token ids of a chat under a tokenizer's template (shared by the in-process sampler and the test kit)."""

from __future__ import annotations

from typing import Any

from sera.types import Message


def chat_ids(tokenizer: Any, messages: list[Message], *, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of `messages` under the tokenizer's chat template."""
    ids = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in messages],
        add_generation_prompt=add_generation_prompt,
        tokenize=True,
        return_dict=False,
    )
    return list(ids)
