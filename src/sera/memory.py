"""Handing freed memory back to the system.

glibc keeps the pages a long-lived process freed (a sampler's KV buffers and prefix cache, an
evaluation's trees, a learner's activations) in its arenas, so resident memory can ratchet up:
in one main job (sampled evaluations at concurrency 32, bf16) the process's peak had reached
16.6 GB when RL started and 24 GB during the last evaluation, where that evaluation alone, in a
process of its own, peaks at 7.6 GB. `sera pipeline` calls this after every phase, the in-process
sampler after freeing its caches (before each learner update).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable
from typing import Any


@functools.cache
def _malloc_trim() -> Callable[[int], Any] | None:
    """glibc's `malloc_trim`, looked up once (`find_library` may run a subprocess); None without it."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Collect garbage and return free heap pages to the system (glibc `malloc_trim`); False where
    the C library has no `malloc_trim` (musl, macOS), which only means nothing was trimmed."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
