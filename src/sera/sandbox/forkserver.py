"""Starts sandbox workers by forking a small, pre-initialised server process (a zygote).

The host may hold gigabytes (torch, model weights) and threads; forking it per worker would be
slow and would hand that memory to untrusted code. Instead one fork server per host process is
started fresh (`python -I`, a scrubbed environment, its own session), imports only the sandbox
worker module, sets the machine-level isolation that children inherit, and then forks one
child per worker on request. That isolation (each step best effort, reported in `isolation`):
no privilege gain through exec (PR_SET_NO_NEW_PRIVS); a private network namespace with only a
downed loopback (needs CAP_SYS_ADMIN); and an empty, unreadable root directory (chroot, needs
root), so even code that got past the language policy sees no files at all. Everything a
worker needs is imported before the chroot, and /dev/null and /proc are passed down as fds.
`multiprocessing`'s forkserver is not used because it re-imports the host's `__main__` in
every child.

Control protocol (SOCK_SEQPACKET, one JSON message per packet, replies in order):
``{"op": "spawn"}`` + one fd (the worker's channel) -> ``{"pid": int}``;
``{"op": "reap", "pid": int}`` -> SIGKILL if still running, wait -> ``{"status": int | null}``.
The fork server reaps only on request, so a pid stays valid until the host reaps it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

# Imports sera.sandbox without running sera/__init__.py, which may import heavy libraries.
_BOOTSTRAP = """\
import sys, types
fd, source_root, empty_root = int(sys.argv[1]), sys.argv[2], sys.argv[3]
package = types.ModuleType("sera")
package.__path__ = [source_root + "/sera"]
sys.modules["sera"] = package
sys.path.insert(0, source_root)
from sera.sandbox.forkserver import serve
serve(fd, empty_root)
"""


class ForkServerError(RuntimeError):
    """The fork server could not be started or stopped answering."""


class ForkServer:
    """Host-side handle of the fork server. Blocking and thread-safe: call it via `asyncio.to_thread`."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        source_root = str(Path(__file__).resolve().parents[2])  # the directory holding `sera`
        self._empty_root = tempfile.mkdtemp(prefix="sera-sandbox-root-")
        self._socket = ours
        self._lock = threading.Lock()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOTSTRAP, str(theirs.fileno()), source_root, self._empty_root],
                pass_fds=[theirs.fileno()],
                env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},  # no host secrets in workers' environ
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # terminal signals (Ctrl-C) go to the host only
                cwd="/",
            )
        except BaseException:
            ours.close()
            os.rmdir(self._empty_root)
            raise
        finally:
            theirs.close()
        try:
            self.isolation: dict[str, Any] = self._receive()
            """What machine-level isolation took effect: no_new_privs, network_namespace, empty_root."""
        except BaseException:
            self.close()
            raise

    def spawn(self, channel: socket.socket) -> int:
        """Fork a worker that talks over `channel` (the caller closes its copy); returns its pid."""
        with self._lock:
            self._send({"op": "spawn"}, fds=[channel.fileno()])
            return int(self._receive()["pid"])

    def reap(self, pid: int) -> int | None:
        """Kill the worker if it still runs and wait for it; its wait status (None if unknown)."""
        with self._lock:
            self._send({"op": "reap", "pid": pid})
            return self._receive()["status"]

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        """Stop the fork server; it kills any workers still running."""
        self._socket.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
        with contextlib.suppress(OSError):
            os.rmdir(self._empty_root)

    def _send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        try:
            socket.send_fds(self._socket, [json.dumps(message).encode()], fds or [])
        except OSError as exc:
            raise ForkServerError(f"fork server is gone: {exc}") from None

    def _receive(self) -> dict[str, Any]:
        try:
            data = self._socket.recv(4096)
        except OSError as exc:
            raise ForkServerError(f"fork server is gone: {exc}") from None
        if not data:
            raise ForkServerError(f"fork server exited (status {self._process.poll()})")
        reply = json.loads(data)
        if "error" in reply:
            raise ForkServerError(reply["error"])
        return reply


_server: ForkServer | None = None
_server_owner = 0  # pid that started `_server` (a forked host must start its own)
_server_lock = threading.Lock()


def get_fork_server() -> ForkServer:
    """The process-wide fork server, started on first use (blocking; seconds at most)."""
    global _server, _server_owner
    with _server_lock:
        if _server is None or _server_owner != os.getpid() or not _server.alive:
            _server, _server_owner = ForkServer(), os.getpid()
            missing = [name for name, held in _server.isolation.items() if not held]
            if missing:  # not silent: the rlimits still apply, but this machine gets less isolation
                logger.warning("sandbox workers run without: %s (needs root / capabilities)", ", ".join(missing))
        return _server


@atexit.register
def _stop_server() -> None:
    if _server is not None and _server_owner == os.getpid():
        _server.close()


# -- the fork server process ---------------------------------------------------------------------


def serve(control_fd: int, empty_root: str) -> None:
    """Main loop of the fork server process."""
    import gc

    from sera.sandbox import worker  # the preload: everything a worker needs, imported once

    control = socket.socket(fileno=control_fd)
    devnull = os.open(os.devnull, os.O_RDWR)  # opened before the chroot hides them
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    isolation, libc = _isolate_machine(empty_root)
    worker.hardening.close_import_system()  # last: _isolate_machine imports ctypes
    server_pid = os.getpid()
    gc.freeze()  # keep preloaded objects out of the collector: children then share these pages
    control.send(json.dumps(isolation).encode())
    children: set[int] = set()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 4096, 1)
        except OSError:
            break
        if not data:
            break  # the host is gone
        request = json.loads(data)
        if request["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                control.close()
                if libc is not None:  # die with the fork server, so no worker outlives its host
                    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                if os.getppid() != server_pid:
                    os._exit(1)
                worker.main(fds[0], devnull, proc)  # never returns
            os.close(fds[0])
            children.add(pid)
            reply: dict[str, Any] = {"pid": pid}
        elif request["op"] == "reap":
            reply = {"status": _reap(request["pid"]) if request["pid"] in children else None}
            children.discard(request["pid"])
        else:
            reply = {"error": f"unknown request {request['op']!r}"}
        control.send(json.dumps(reply).encode())
    for pid in children:
        _reap(pid)


def _reap(pid: int) -> int:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # a no-op on a child that already died (still a zombie)
    return os.waitpid(pid, 0)[1]


def _isolate_machine(empty_root: str) -> tuple[dict[str, Any], Any]:
    """Best-effort isolation inherited by every worker; reports what took effect, and libc."""
    report = {"no_new_privs": False, "network_namespace": False, "empty_root": False}
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        libc = None
    if libc is not None:
        report["no_new_privs"] = libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
        report["network_namespace"] = libc.unshare(CLONE_NEWNET) == 0
    if os.geteuid() == 0:
        try:
            os.chroot(empty_root)  # root-owned, mode 0700: workers (uid 65534) cannot even list it
            os.chdir("/")
            report["empty_root"] = True
        except OSError:
            pass
    return report, libc
