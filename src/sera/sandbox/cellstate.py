"""Host-side state of the cell in flight: its compute clock, output buffer and open tool calls."""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any


class ComputeClock:
    """Time a cell spends on its own: wall time minus time with at least one tool call open."""

    def __init__(self) -> None:
        self._spent = 0.0
        self._since = time.monotonic()
        self._open: set[int] = set()

    @property
    def running(self) -> bool:
        return not self._open

    def spent(self) -> float:
        return self._spent + (time.monotonic() - self._since if self.running else 0.0)

    def call_started(self, call_id: int) -> None:
        if self.running:
            self._spent += time.monotonic() - self._since
        self._open.add(call_id)

    def call_finished(self, call_id: int) -> None:
        if call_id in self._open:
            self._open.discard(call_id)
            if self.running:
                self._since = time.monotonic()


class OutputBuffer:
    """Output of one cell, kept up to `limit` characters and counted beyond."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[str] = []
        self._size = 0
        self.dropped = 0
        self.cut = False
        """Text was cut (possibly by the worker, which then stops sending it)."""

    def add(self, text: str, cut: bool = False) -> None:
        self.cut = self.cut or cut
        room = self._limit - self._size
        kept = text[: max(room, 0)]
        self.dropped += len(text) - len(kept)
        if kept:
            self._parts.append(kept)
            self._size += len(kept)

    def text(self) -> str:
        return "".join(self._parts)


class CellState:
    """State of the cell in flight: output, clock, open tool calls, completion."""

    def __init__(self, max_output_chars: int, context: contextvars.Context) -> None:
        self.output = OutputBuffer(max_output_chars)
        self.clock = ComputeClock()
        self.context = context  # tools run in the caller's context (contextvars), one copy per call
        self.tasks: dict[int, asyncio.Task[Any]] = {}
        self.tool_calls = 0
        self.sanitized = False  # a tool call's string arguments had unsafe characters escaped
        self.done: dict[str, Any] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._woken = False

    def call_started(self, call_id: int) -> None:
        # No wake-up: the watcher's pending timer fires at the old deadline and finds the clock paused.
        self.tool_calls += 1
        self.clock.call_started(call_id)

    def call_finished(self, call_id: int) -> None:
        paused = not self.clock.running
        self.clock.call_finished(call_id)
        if paused and self.clock.running:
            self.wake()  # the watcher waits without a timer while the clock is paused

    def wake(self) -> None:
        """Make the watcher re-check the cell (finished, worker dead, clock changed)."""
        self._woken = True
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def wait(self) -> None:
        """Wait for the next `wake` (returns at once if one happened since the last wait)."""
        if not self._woken:
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
        self._woken = False
