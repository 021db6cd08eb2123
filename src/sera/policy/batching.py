"""Handing requests from many asyncio tasks to the one thread that runs the model.

Agents of many rollout trees call the model concurrently. Each call becomes a `PendingRequest`;
requests submitted during one turn of the event loop are handed over together (a `call_soon`
flush, so that `asyncio.gather` of 32 calls arrives as one group of 32 rather than 1 then 31).
The worker (`sera.policy.engine`) takes what is queued whenever it can admit more rows, also in
the middle of decoding other rows, and resolves each request's future as soon as its own
sequence finishes, so a fast agent acts and queues its next call while slower rows still decode.
The model runs in that thread, so the event loop stays responsive.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sera.policy.errors import SamplerError

PayloadT = TypeVar("PayloadT")


@dataclass(frozen=True)
class BatchRecord:
    """What one busy period of the worker did, from its first request after being idle until no
    sequence was left (the engine's instrumentation; tests and benchmarks read it)."""

    size: int
    """Requests served in the period."""
    prompt_lens: tuple[int, ...]
    """Prompt length of each request, in admission order."""
    live_rows: tuple[int, ...]
    """Rows computed at each decode step; it grows as requests join and shrinks as they finish."""
    seconds: float
    """Wall-clock time of the period in the worker thread."""
    joined: int = 0
    """Requests admitted while other rows were already decoding."""
    reused_tokens: int = 0
    """Prompt tokens whose keys/values came from the prefix cache."""
    prefilled_tokens: int = 0
    """Prompt tokens computed by a prefill."""


class PendingRequest(Generic[PayloadT]):
    """One queued call: its payload and the future of the asyncio task that waits for it."""

    def __init__(self, payload: PayloadT, loop: asyncio.AbstractEventLoop) -> None:
        self.payload = payload
        self._loop = loop
        self._future: asyncio.Future[Any] = loop.create_future()

    @property
    def cancelled(self) -> bool:
        """True when the caller stopped waiting (its task was cancelled): the row can be dropped."""
        return self._future.cancelled()

    def resolve(self, result: Any) -> None:
        """Hand `result` to the waiting task (thread-safe)."""
        self._post(lambda: self._future.set_result(result))

    def fail(self, error: BaseException) -> None:
        """Raise `error` in the waiting task (thread-safe)."""
        self._post(lambda: self._future.set_exception(error))

    def _post(self, settle: Callable[[], None]) -> None:
        def settle_if_pending() -> None:
            if not self._future.done():
                settle()

        try:
            self._loop.call_soon_threadsafe(settle_if_pending)
        except RuntimeError:
            pass  # the caller's event loop is closed: nobody is waiting any more


class SamplerClosed(Exception):
    """The queue was closed: the worker must stop."""


class RequestQueue(Generic[PayloadT]):
    """Requests waiting for the worker thread."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._staged: list[PendingRequest[PayloadT]] = []
        self._staged_lock = threading.Lock()
        self.closed = False
        """True once `close` was called: new submissions are refused."""

    async def submit(self, payload: PayloadT) -> Any:
        """Queue `payload` and wait for its result."""
        if self.closed:
            raise SamplerError("endpoint_down", "the sampler is closed")
        loop = asyncio.get_running_loop()
        request = PendingRequest(payload, loop)
        with self._staged_lock:
            first = not self._staged
            self._staged.append(request)
        if first:
            # Let every task that is ready in this loop turn submit too, then hand them over at once.
            loop.call_soon(self._flush)
        return await request._future

    def _flush(self) -> None:
        with self._staged_lock:
            staged, self._staged = self._staged, []
        if staged:
            self._queue.put(staged)

    def close(self) -> None:
        """Refuse new requests and tell the worker to stop."""
        if self.closed:
            return
        self.closed = True
        self._flush()
        self._queue.put(_STOP)

    def take(self, *, block: bool) -> list[PendingRequest[PayloadT]]:
        """Everything handed over so far (waiting for something when `block`); raises
        `SamplerClosed`, after the requests that came before it, once the queue is closed."""
        taken: list[PendingRequest[PayloadT]] = []
        stop = False
        if block:
            item = self._queue.get()
            stop = item is _STOP
            if not stop:
                taken.extend(item)
        while not stop:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            stop = item is _STOP
            if not stop:
                taken.extend(item)
        if stop:
            raise SamplerClosed(taken)
        return taken


_STOP = object()
"""Queue sentinel that ends the worker thread."""
