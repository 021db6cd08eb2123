"""Signals that stop a training run at a safe point instead of killing it mid-write.

`sera train` and `sera sft` both run their steps inside `stop_on_signals`: SIGINT (Ctrl-C) and
SIGTERM are only recorded, the loop notices them between steps, checkpoints and returns, and the
command exits with the shell's status for the signal (128 + its number). A second signal is
recorded too; the loop is already stopping.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
"""The signals a run stops on cleanly."""


@contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """While inside, SIGTERM and SIGINT only append themselves to the yielded list; the previous
    handlers come back afterwards. Off the main thread no handler can be set: the list stays
    empty (the caller stops the run another way)."""
    received: list[int] = []
    handlers = {}
    try:
        for sig in STOP_SIGNALS:
            handlers[sig] = signal.signal(sig, lambda signum, _frame: received.append(signum))
    except ValueError:
        pass
    try:
        yield received
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
