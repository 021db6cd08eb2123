"""Run a command as an unprivileged user (`nobody`) from a root test process.

The interpreter may live under a directory only root can enter (pyenv in /root). Rather than
loosen the host's permissions, the child gets a private mount namespace in which that
directory is replaced by a world-readable tmpfs that holds only the interpreter's prefix,
then drops to uid/gid 65534 and executes the command.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile
from pathlib import Path

NOBODY = 65534
_CLONE_NEWNS = 0x20000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000


def closed_ancestor(path: Path) -> Path | None:
    """The outermost ancestor of `path` that others may not enter, if any."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    encode = lambda v: None if v is None else v.encode()  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}")


def _become_nobody(prefix: Path, closed: Path | None, parked: str) -> None:
    """preexec_fn: hide the closed directory behind a tmpfs holding only `prefix` (kept visible
    through the empty directory `parked`), then drop root."""
    libc = ctypes.CDLL(None, use_errno=True)
    if closed is not None:
        if libc.unshare(_CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE, None)
        _mount(libc, str(prefix), parked, None, _MS_BIND | _MS_REC, None)
        _mount(libc, "none", str(closed), "tmpfs", 0, "mode=0755")
        os.makedirs(prefix, exist_ok=True)
        _mount(libc, parked, str(prefix), None, _MS_BIND | _MS_REC, None)
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def run_as_nobody(args: list[str], cwd: str, timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `args` as uid/gid 65534 (call as root only)."""
    prefix = Path(sys.base_prefix).resolve()
    closed = closed_ancestor(prefix / "bin")
    parked = tempfile.mkdtemp(prefix="sera-test-prefix-")  # made and removed here: the mount is the child's
    try:
        return subprocess.run(
            args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
            preexec_fn=lambda: _become_nobody(prefix, closed, parked),
        )
    finally:
        os.rmdir(parked)
