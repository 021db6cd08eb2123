"""Stopping long async work on SIGINT or SIGTERM so that its `finally`s still run (summaries
written, policies closed), and closing a policy's connections when the work ends."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class Stopped(Exception):
    """SIGINT or SIGTERM stopped the work (`stoppable`)."""

    signum: int
    """The signal's number (the shell's exit status for it is 128 + signum)."""
    name: str
    """The signal's name, e.g. SIGINT."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.name = signal.Signals(signum).name


async def stoppable(work: Awaitable[T]) -> T:
    """Await `work`; SIGINT or SIGTERM cancels it (its `finally`s run: summaries written, policies
    closed) and raises `Stopped`. A second signal meets the default handler: it stops at once."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    received: list[int] = []
    signals = (signal.SIGINT, signal.SIGTERM)

    def stop(signum: int) -> None:
        received.append(signum)
        for sig in signals:
            loop.remove_signal_handler(sig)
        task.cancel()

    for sig in signals:
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise Stopped(received[0]) from None
        raise
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def closing(resource: object, work: Awaitable[T]) -> T:
    """Await `work`, then release the policy's (or judge's) connections or workers, when it has a
    `close`."""
    try:
        return await work
    finally:
        close = getattr(resource, "close", None)
        if close is not None:
            await close()
