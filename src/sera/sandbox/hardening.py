"""Process isolation for a sandbox worker: what the OS lets it do once user code runs.

The second layer under the language policy. It assumes the worst (arbitrary code in the
worker) and limits the damage: no file writes (RLIMIT_FSIZE=0), no new processes or threads
(RLIMIT_NPROC=0 as an unprivileged user), no new file descriptors, hence no sockets and no
opened files (RLIMIT_NOFILE equal to the open fds, with no gaps below), bounded memory
(RLIMIT_AS, so a memory bomb is a MemoryError) and CPU (RLIMIT_CPU, a backstop to the host's
own timeout), no privileges (uid/gid 65534 when started as root, and no capabilities left in
any case) and a neutral cwd. The fork server adds the namespaces (see `isolation`): an empty
root, private pid, network and IPC namespaces, and no privilege gain through exec.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import signal
from typing import Any

from sera.sandbox import isolation

UNPRIVILEGED_ID = 65534
"""uid/gid the worker runs as when started as root (`nobody`/`nogroup` on most systems)."""
CHANNEL_FD = 3
"""File descriptor the worker's channel to the host is moved to."""
PROC_FD = 4
"""File descriptor of /proc until the limits are applied (the worker's root may have no /proc)."""
_FD_PROBE_LIMIT = 256
"""Highest fd number looked at when counting open descriptors."""


def close_import_system() -> None:
    """After the preload: no module can be loaded from files any more (only built-in ones).

    A lazy import inside the standard library then fails fast with ModuleNotFoundError instead
    of probing the (empty, unreadable) filesystem and leaking host paths in the error.
    """
    import importlib.machinery as machinery
    import sys

    sys.path.clear()
    sys.path_hooks.clear()
    sys.path_importer_cache.clear()
    sys.meta_path[:] = [f for f in sys.meta_path if f in (machinery.BuiltinImporter, machinery.FrozenImporter)]


def isolate_fds(channel_fd: int, devnull_fd: int, proc_fd: int) -> None:
    """Point 0-2 at /dev/null, the channel at `CHANNEL_FD`, /proc at `PROC_FD`; close the rest."""
    # Park the three above the target numbers first so that no dup2 overwrites another source.
    devnull, channel, proc = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 16) for fd in (devnull_fd, channel_fd, proc_fd))
    for target in (0, 1, 2):
        os.dup2(devnull, target)
    os.dup2(channel, CHANNEL_FD, inheritable=False)
    os.dup2(proc, PROC_FD, inheritable=False)
    os.closerange(PROC_FD + 1, _max_fd())


def _max_fd() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def apply_limits(memory_mb: int, cpu_lifetime_s: int, proc_fd: int | None = None) -> dict[str, Any]:
    """Apply rlimits, leave root, close /proc; returns a report of what is in force.

    Call this after everything the worker needs is set up (modules imported, event loop and
    its file descriptors created): afterwards no new fd can be opened. `proc_fd` is an open
    /proc directory (closed here); without one, /proc is opened by path.
    """
    os.chdir("/")
    os.umask(0o077)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file write then fails with EFBIG instead of killing
    if proc_fd is None:
        proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    baseline = _address_space_bytes(proc_fd)
    os.close(proc_fd)
    highest = _plug_fd_gaps()
    limits = {
        resource.RLIMIT_AS: baseline + memory_mb * 1024 * 1024,
        resource.RLIMIT_CPU: cpu_lifetime_s,
        resource.RLIMIT_FSIZE: 0,
        resource.RLIMIT_NPROC: 0,
        resource.RLIMIT_NOFILE: highest + 1,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_MEMLOCK: 0,
    }
    for which, value in limits.items():
        resource.setrlimit(which, (value, value))
    if os.getuid() == 0:
        try:
            os.setgroups([])
            os.setresgid(UNPRIVILEGED_ID, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
            os.setresuid(UNPRIVILEGED_ID, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
        except PermissionError as exc:  # root without CAP_SETUID/CAP_SETGID: never run cells as root
            raise RuntimeError(f"cannot drop root privileges to uid {UNPRIVILEGED_ID} ({exc})") from None
        if os.getuid() == 0 or os.geteuid() == 0:
            raise RuntimeError("failed to drop root privileges")
    no_capabilities = isolation.drop_capabilities()  # e.g. those a user namespace gave us
    # The uid change above reset the parent-death signal; without a pid namespace it is what
    # ends this worker when the fork server dies.
    with contextlib.suppress(OSError):
        isolation.set_parent_death_signal(signal.SIGKILL)
    return {
        "no_privileges": no_capabilities and os.getuid() != 0 and os.geteuid() != 0,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "cwd": os.getcwd(),
        "baseline_address_space_mb": round(baseline / 2**20, 1),
        "rlimits": {
            name: resource.getrlimit(getattr(resource, name))[1]
            for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_CORE")
        },
    }


def set_cell_cpu_budget(seconds: float) -> None:
    """Let the next cell use `seconds` more CPU before SIGXCPU (soft limit; the hard one stays)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(usage.ru_utime + usage.ru_stime + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _address_space_bytes(proc_fd: int) -> int:
    vm_size = isolation.proc_status_field(proc_fd, "VmSize")
    if vm_size is None:
        raise RuntimeError("VmSize missing from /proc/self/status")
    return int(vm_size.split()[0]) * 1024


def _plug_fd_gaps() -> int:
    """Fill unused fd numbers below the highest open one with /dev/null; returns the highest.

    RLIMIT_NOFILE bounds fd *numbers*, so a free number below the limit would still be usable.
    """
    open_fds = [fd for fd in range(_FD_PROBE_LIMIT) if _is_open(fd)]
    highest = max(open_fds)
    for fd in set(range(highest)) - set(open_fds):
        os.dup2(0, fd, inheritable=False)
    return highest


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True
