"""The bound on concurrent sandbox workers in one process (`SandboxSettings.max_workers`).

A counter, not an `asyncio.Semaphore`: sessions on different event loops (threads, tests)
share it, and a slot may be given back from a finalizer outside any loop.
"""

from __future__ import annotations

import asyncio
import threading
import time

from sera.sandbox.settings import settings

_POLL_S = 0.02


class NoWorkerSlot(Exception):
    """Every worker slot stayed taken for the whole wait; the message says so for the agent."""


class WorkerSlots:
    """Counts live workers against `settings().max_workers` (read at each acquire)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
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
        deadline = time.monotonic() + (settings().worker_wait_s if wait_s is None else wait_s)
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                limit = settings().max_workers
                raise NoWorkerSlot(
                    f"SandboxBusy: all {limit} sandbox workers of this process stayed busy for "
                    f"{settings().worker_wait_s:g} s (limit: SERA_SANDBOX_MAX_WORKERS={limit}); the cell did not run."
                )
            await asyncio.sleep(_POLL_S)

    def release(self) -> None:
        with self._lock:
            self.in_use = max(0, self.in_use - 1)


worker_slots = WorkerSlots()
"""The process-wide slots."""
