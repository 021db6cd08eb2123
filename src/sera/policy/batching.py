"""Dynamic batching: requests from many asyncio tasks are grouped into batches run by one thread.

Agents of many rollout trees call the model concurrently. Each call becomes a `PendingRequest`;
requests submitted during one turn of the event loop are handed to the worker together (a
`call_soon` flush, so that `asyncio.gather` of 32 calls forms one batch of 32 rather than a batch
of 1 followed by a batch of 31). The worker thread takes everything queued, up to
`max_batch_size`, as one batch and runs it to completion; requests arriving meanwhile wait for
the next batch. A request's future is resolved as soon as its own sequence finishes, not when
the whole batch ends, so a fast agent can act and queue its next call while slower rows still
decode. The model runs in that thread, so the event loop stays responsive.

The scheduler knows nothing about models: `run_batch(requests)` does the work, resolves requests
as they finish through `PendingRequest.resolve`, and returns the batch's record with the results
of the rows that finished last (resolved by the scheduler after recording the batch).
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
    """What one batch did: the scheduler's instrumentation (tests and benchmarks read it)."""

    size: int
    """Requests in the batch."""
    prompt_lens: tuple[int, ...]
    """Prompt length of each request, in batch order."""
    live_rows: tuple[int, ...]
    """Rows computed at each decode step after the prefill; it shrinks as sequences finish."""
    seconds: float
    """Wall-clock time of the batch in the worker thread."""


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


BatchOutcome = tuple[BatchRecord, list[tuple[PendingRequest[Any], Any]]]
"""What `run_batch` returns: the batch's record and the (request, result) pairs still to hand out."""

_STOP = object()
"""Queue sentinel that ends the worker thread."""


class BatchScheduler(Generic[PayloadT]):
    """Queue of pending requests and the worker thread that runs them in batches."""

    def __init__(
        self,
        run_batch: Callable[[list[PendingRequest[PayloadT]]], BatchOutcome],
        *,
        max_batch_size: int,
        fits: Callable[[list[PayloadT]], bool] | None = None,
        name: str = "sera-sampler",
    ) -> None:
        """`fits(payloads)` may refuse a larger batch (e.g. a memory budget); a batch always
        takes at least one request, and requests are taken in arrival order."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        self._fits = fits
        self._run_batch = run_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._staged: list[PendingRequest[PayloadT]] = []
        self._staged_lock = threading.Lock()
        self._closed = False
        self.records: list[BatchRecord] = []
        """One record per batch run, in order."""
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    async def submit(self, payload: PayloadT) -> Any:
        """Queue `payload` and wait for its result."""
        if self._closed:
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

    async def close(self) -> None:
        """Stop the worker after the batch it is running; queued requests fail with `endpoint_down`."""
        if self._closed:
            return
        self._closed = True
        self._flush()
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join)

    def _work(self) -> None:
        backlog: list[PendingRequest[PayloadT]] = []
        stopping = False
        while True:
            if not backlog and not stopping:
                item = self._queue.get()
                if item is _STOP:
                    stopping = True
                else:
                    backlog.extend(item)
            while not stopping:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                else:
                    backlog.extend(item)
            if stopping:
                for request in backlog:
                    request.fail(SamplerError("endpoint_down", "the sampler was closed before this request ran"))
                return
            batch, backlog = self._take_batch(backlog)
            if not batch:
                continue
            try:
                record, last_results = self._run_batch(batch)
                # Record first, then hand out the last results: whoever sees a result sees its batch.
                self.records.append(record)
                for request, result in last_results:
                    request.resolve(result)
            except BaseException as error:  # noqa: BLE001 - every waiting caller must hear of it
                for request in batch:
                    request.fail(error)
                if not isinstance(error, Exception):
                    raise

    def _take_batch(
        self, backlog: list[PendingRequest[PayloadT]]
    ) -> tuple[list[PendingRequest[PayloadT]], list[PendingRequest[PayloadT]]]:
        """The next batch (oldest first) and what stays queued; cancelled requests are dropped."""
        waiting = [request for request in backlog if not request.cancelled]
        batch: list[PendingRequest[PayloadT]] = []
        for request in waiting[: self.max_batch_size]:
            if batch and self._fits is not None and not self._fits([r.payload for r in batch + [request]]):
                break
            batch.append(request)
        return batch, waiting[len(batch) :]
