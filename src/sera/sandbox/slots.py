"""The bound on concurrent sandbox workers in one process (`SandboxSettings.max_workers`).

A counter, not an `asyncio.Semaphore`: sessions on different event loops (threads, tests)
share it, and a slot may be given back from a finalizer outside any loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time

from sera.sandbox.config import settings

_SAFETY_POLL_S = 0.5
"""Waiters also re-check this often, in case a wake-up went to a waiter that gave up."""


class NoWorkerSlot(Exception):
    """Every worker slot stayed taken for the whole wait; the message says so for the agent."""


class WorkerSlots:
    """Counts live workers against `settings().max_workers` (read at each acquire).

    Waiters queue in arrival order; each release wakes the oldest one on its own loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = collections.deque()
        self.in_use = 0
        """Workers holding a slot now."""

    def try_acquire(self) -> bool:
        with self._lock:
            if self.in_use >= settings().max_workers:
                return False
            self.in_use += 1
            return True

    async def acquire(self, wait_s: float | None = None) -> None:
        """Take a slot, waiting up to `wait_s` (default `settings().worker_wait_s`); NoWorkerSlot otherwise."""
        if self.try_acquire():
            return
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + (settings().worker_wait_s if wait_s is None else wait_s)
        while not self.try_acquire():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                limit = settings().max_workers
                raise NoWorkerSlot(
                    f"SandboxBusy: all {limit} sandbox workers of this process stayed busy for "
                    f"{settings().worker_wait_s:g} s (limit: SERA_SANDBOX_MAX_WORKERS={limit}); the cell did not run."
                )
            waiter = (loop, loop.create_future())
            with self._lock:
                self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter[1], min(remaining, _SAFETY_POLL_S))
            except asyncio.TimeoutError:
                pass
            finally:
                with self._lock, contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def release(self) -> None:
        with self._lock:
            self.in_use = max(0, self.in_use - 1)
            waiter = self._waiters.popleft() if self._waiters else None
        if waiter is not None:
            loop, future = waiter
            with contextlib.suppress(RuntimeError):  # that loop is closed: its waiter is gone too
                loop.call_soon_threadsafe(_wake, future)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


worker_slots = WorkerSlots()
"""The process-wide slots."""
