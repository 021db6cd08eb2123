"""Kernel isolation of the sandbox workers: namespaces, an empty root, no capabilities.

What every worker gets, as root and as an ordinary user alike (no setuid helper, no daemon;
only unprivileged user namespaces, in the kernel since 3.8 and on by default in most
distributions):

- a user namespace (ordinary users only; root needs none) that maps just the caller's own
  uid and gid, so the fork server may create the other namespaces;
- a mount namespace whose root is an empty, read-only tmpfs (pivot_root, the old root
  detached): no host file can be named, /proc included;
- a pid namespace of the fork server, so the kernel kills every worker when the fork server
  exits, however it exits; and one nested pid namespace per worker, in which the worker is the
  only process: it cannot name, signal or trace the host, the fork server or other workers;
- a network and an IPC namespace per worker: no interface but a downed loopback, no abstract
  unix sockets or SysV objects shared with anyone;
- no capabilities left in the worker (dropped before any cell runs) and no_new_privs.

The fork server calls `enter_namespaces` and `make_empty_root` once, then for each worker
`new_pid_namespace` before forking and `isolate_worker` in the child. Each step reports what
took effect in `IsolationReport`; `missing` names what a worker would run without.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from dataclasses import dataclass

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_MNT_DETACH = 0x2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}.get(os.uname().machine)
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

REQUIRED = ("no_new_privs", "mount_namespace", "empty_root", "pid_namespace", "network_namespace", "no_privileges")
"""Mechanisms a worker must have for sera to run model code without `--unsafe-sandbox`."""


@dataclass
class IsolationReport:
    """What the kernel isolation of a worker consists of (True: in force)."""

    no_new_privs: bool = False
    """PR_SET_NO_NEW_PRIVS: no privilege gain through exec."""
    user_namespace: bool = False
    """A private user namespace (used by ordinary users; root does without)."""
    mount_namespace: bool = False
    """A private mount namespace (needed for the empty root)."""
    empty_root: bool = False
    """The root directory is an empty read-only tmpfs; the host's tree is detached."""
    pid_namespace: bool = False
    """Workers live in the fork server's pid namespace, each in a nested one of its own."""
    network_namespace: bool = False
    """Each worker has its own network namespace (a downed loopback only)."""
    ipc_namespace: bool = False
    """Each worker has its own IPC namespace."""
    no_privileges: bool = False
    """The worker holds no capabilities and is not root (set per worker, before any cell)."""
    errors: list[str] = dataclasses.field(default_factory=list)
    """Why a step failed, one short line per failure."""

    def missing(self) -> list[str]:
        """The `REQUIRED` mechanisms not in force."""
        return [name for name in REQUIRED if not getattr(self, name)]

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


class _Libc:
    """The few libc calls needed, raising OSError instead of returning -1."""

    def __init__(self) -> None:
        self._lib = ctypes.CDLL(None, use_errno=True)

    def call(self, name: str, *args: object) -> int:
        result = getattr(self._lib, name)(*args)
        if result == -1:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{name}: {os.strerror(errno)}")
        return int(result)


_libc: _Libc | None = None


def libc() -> _Libc:
    """The process's libc (loaded once; the fork server loads it before its root goes away)."""
    global _libc
    if _libc is None:
        _libc = _Libc()
    return _libc


def enter_namespaces(report: IsolationReport) -> None:
    """Make the calling process (the fork server's parent) own new mount, pid and user namespaces.

    Call before forking the fork server proper: the pid namespace applies to children only.
    """
    try:
        libc().call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        report.no_new_privs = True
    except OSError as exc:
        report.errors.append(str(exc))
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWPID
    try:
        if uid == 0:
            libc().call("unshare", flags)
        else:
            libc().call("unshare", flags | CLONE_NEWUSER)
            report.user_namespace = True
            # Map only our own ids: nothing inside can become anyone else on the host.
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        report.mount_namespace = report.pid_namespace = True
    except OSError as exc:
        report.errors.append(f"namespaces: {exc}")


def limit_nested_user_namespaces(report: IsolationReport) -> None:
    """Inside our own user namespace, forbid workers to create more (they would regain capabilities)."""
    if report.user_namespace:
        try:
            _write("/proc/sys/user/max_user_namespaces", "0")
        except OSError as exc:
            report.errors.append(f"max_user_namespaces: {exc}")


def make_empty_root(path: str, report: IsolationReport) -> None:
    """Replace the root of this mount namespace with an empty read-only tmpfs mounted on `path`."""
    if not report.mount_namespace or _SYS_PIVOT_ROOT is None:
        return
    try:
        call = libc().call
        call("mount", b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)  # nothing propagates back
        call("mount", b"none", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, b"size=16k,mode=0711")
        os.mkdir(os.path.join(path, "old"))
        call("syscall", _SYS_PIVOT_ROOT, path.encode(), os.path.join(path, "old").encode())
        os.chdir("/")
        call("umount2", b"/old", _MNT_DETACH)
        os.rmdir("/old")
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        call("mount", b"none", b"/", None, flags, None)
        report.empty_root = True
    except OSError as exc:
        report.errors.append(f"empty root: {exc}")


def new_pid_namespace(own_pid_ns_fd: int) -> None:
    """Make the next child of the calling process the only process (pid 1) of a new pid namespace.

    `own_pid_ns_fd` is the caller's own /proc/self/ns/pid: a process may create one pid
    namespace for its children, so it first returns to its own before unsharing the next.
    """
    libc().call("setns", own_pid_ns_fd, CLONE_NEWPID)
    libc().call("unshare", CLONE_NEWPID)


def isolate_worker(report: IsolationReport) -> None:
    """In a freshly forked worker: own session, own network and IPC namespaces.

    Capabilities are dropped later (`drop_capabilities`), after the limits that need them.
    """
    os.setsid()  # kill(0, ...) now reaches only this process
    try:
        libc().call("unshare", CLONE_NEWNET | CLONE_NEWIPC)
        report.network_namespace = report.ipc_namespace = True
    except OSError as exc:
        report.errors.append(f"network namespace: {exc}")


def drop_capabilities() -> bool:
    """Clear every capability of the calling process; True once none is left."""
    if _SYS_CAPSET is None:
        return False
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable for two 32-bit words: all zero
    try:
        libc().call("syscall", _SYS_CAPSET, header, data)
    except OSError:
        return False
    return True


def set_parent_death_signal(signum: int) -> None:
    """Deliver `signum` to this process when its parent exits (reset by every uid change)."""
    libc().call("prctl", PR_SET_PDEATHSIG, signum, 0, 0, 0)


def proc_status_field(proc_fd: int, key: str) -> str | None:
    """The value of `key:` in this process's /proc status, read through an open /proc fd (the
    worker keeps one after its root is emptied); None when the kernel does not report it."""
    status = os.open("self/status", os.O_RDONLY, dir_fd=proc_fd)
    try:
        text = os.read(status, 1 << 16).decode("ascii", "replace")
    finally:
        os.close(status)
    for line in text.splitlines():
        if line.startswith(f"{key}:"):
            return line.split(":", 1)[1].strip()
    return None


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
