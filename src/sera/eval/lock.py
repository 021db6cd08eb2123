"""One evaluation per `--out` at a time: an exclusive `flock` on `OUT/run.lock`.

Two runs into one folder would race on the same trees and `.partial` files, so the second one
refuses at once, naming the pid written in the lock file by the first. The lock goes with the
process (the kernel drops it when the holder exits or is killed), so a crashed run never leaves
a folder locked; the file itself stays and is harmless.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sera.eval.errors import EvalSetupError

LOCK_FILE = "run.lock"
"""The lock file's name under `--out`."""


class RunLockedError(EvalSetupError):
    """Another evaluation holds the folder."""


@contextmanager
def run_lock(out_dir: Path) -> Iterator[None]:
    """Hold `out_dir`'s lock for the block; `RunLockedError` if another process holds it."""
    path = out_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise RunLockedError(
                f"{out_dir} is in use by another evaluation (pid {holder}); wait for it to finish or use another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
