"""A policy whose calls all run on one event loop of its own, in a background thread.

An HTTP sampler (`OpenAISampler`) holds an async client bound to the event loop of its first
call; the training loop runs each round, the canary and each evaluation under a fresh
`asyncio.run`, whose loop is closed afterwards, so the second round would find the client's
loop gone ("Event loop is closed"). `ThreadedPolicy` keeps the sampler on one long-lived loop
and lets any caller's loop await it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message


class ThreadedPolicy:
    """Runs `inner`'s calls on a private event loop thread; other attributes are `inner`'s."""

    def __init__(self, inner: Any, name: str = "sampler-loop") -> None:
        self.inner = inner
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def __getattr__(self, name: str) -> Any:  # tokenizer, model, stats, ... of the sampler
        return getattr(self.inner, name)

    async def _on_loop(self, coroutine: Any) -> Any:
        if self._loop.is_closed():
            coroutine.close()
            raise RuntimeError("the sampler is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # the caller gave up (a timeout): stop the call on the sampler's loop too
            raise

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        """`inner(messages, sampling)`, run on the sampler's loop."""
        return await self._on_loop(self.inner(messages, sampling))

    async def complete_tokens(self, prompt_token_ids: list[int], sampling: SamplingParams) -> Completion:
        """`inner.complete_tokens(...)`, run on the sampler's loop."""
        return await self._on_loop(self.inner.complete_tokens(prompt_token_ids, sampling))

    def close_now(self) -> None:
        """Close `inner` on its loop, then stop the loop and its thread (idempotent, blocking)."""
        if self._loop.is_closed():
            return
        if hasattr(self.inner, "close"):
            asyncio.run_coroutine_threadsafe(self.inner.close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    async def close(self) -> None:
        """`close_now()` from a coroutine."""
        self.close_now()
