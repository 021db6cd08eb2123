"""Starts sandbox workers by forking a small, pre-initialised server process (a zygote).

The host may hold gigabytes (torch, model weights) and threads; forking it per worker would be
slow and would hand that memory to untrusted code. Instead one fork server per host process is
started fresh (`python -I`, a scrubbed environment, its own session), imports only the sandbox
worker module, and then forks one child per worker on request. `multiprocessing`'s forkserver
is not used because it re-imports the host's `__main__` in every child.

Process tree and isolation (see `isolation`; each step reported, `REQUIRED` ones enforced by
the host): the started process P creates a user (ordinary users only), mount and pid namespace
and forks S, the fork server proper, which is pid 1 of that pid namespace. S swaps its root for
an empty read-only tmpfs and forks every worker into a nested pid namespace of its own, where
the worker also gets its own session, network and IPC namespaces. Nothing outlives the host:
S exits when the host's end of the control socket closes (the host died, however it died), S
dies with P (parent-death signal), and when S, a pid namespace's init, exits, the kernel kills
every process in its namespace. /dev/null and /proc are opened before the root goes away and
passed down as fds (a worker closes /proc before any cell runs).

Control protocol (SOCK_SEQPACKET, one JSON message per packet, replies in order):
``{"op": "spawn"}`` + one fd (the worker's channel) -> ``{"pid": int}`` (the host's view of the pid);
``{"op": "reap", "pid": int}`` -> SIGKILL if still running, wait -> ``{"status": int | null}``.
The fork server reaps only on request, so a pid stays valid until the host reaps it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
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

WORKER_ENTRY = "sera.sandbox.worker:main"
"""What a forked worker runs: `module:function`, called with (channel fd, /dev/null fd, /proc fd, isolation)."""

# Imports sera.sandbox without running sera/__init__.py, which may import heavy libraries.
_BOOTSTRAP = """\
import sys, types
fd, source_root, empty_root, entry = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
package = types.ModuleType("sera")
package.__path__ = [source_root + "/sera"]
sys.modules["sera"] = package
sys.path[:0] = [source_root, *sys.argv[5:]]
from sera.sandbox.forkserver import bootstrap
bootstrap(fd, empty_root, entry)
"""


class ForkServerError(RuntimeError):
    """The fork server could not be started or stopped answering."""


class ForkServer:
    """Host-side handle of the fork server. Blocking and thread-safe: call it via `asyncio.to_thread`."""

    def __init__(self, entry: str = WORKER_ENTRY, extra_path: tuple[str, ...] = (), namespaces: bool = True) -> None:
        """Start a fork server; `entry` and `extra_path` let tests run their own worker code, and
        `namespaces=False` (benchmarks only: workers then fail the `REQUIRED` check) skips the
        kernel isolation."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        source_root = str(Path(__file__).resolve().parents[2])  # the directory holding `sera`
        remove_stale_roots()
        self._empty_root = tempfile.mkdtemp(prefix=_root_prefix(os.getpid()))
        self._socket = ours
        self._lock = threading.Lock()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOTSTRAP, str(theirs.fileno()), source_root, self._empty_root,
                 entry if namespaces else f"{entry}!plain",
                 *extra_path],
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
            """The fork server's part of `isolation.IsolationReport` (workers add their own)."""
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
    def pid(self) -> int:
        """Process id of the fork server's outer process (killing it stops everything)."""
        return self._process.pid

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


ROOT_PREFIX = "sera-sandbox-root-"
"""Names a fork server's mount point for its empty root (in the temp dir; also in its cmdline)."""


def _namespace_prefix() -> str:
    """`ROOT_PREFIX` + this pid namespace's id: pids are only comparable within one namespace."""
    try:
        return f"{ROOT_PREFIX}{os.stat('/proc/self/ns/pid').st_ino}-"
    except OSError:  # no namespace id to read: such names are never swept
        return f"{ROOT_PREFIX}x-"


def _root_prefix(host_pid: int) -> str:
    """The prefix of a host's directory: its pid after the namespace's, to tell a stale one."""
    return f"{_namespace_prefix()}{host_pid}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_roots(tmp: str | None = None) -> list[str]:
    """Remove the empty mount-point directories left by hosts of this pid namespace that died
    without `close` (SIGKILL, OOM); returns their paths.

    A live host's directory is never touched: removing a mount point in another mount namespace
    detaches that mount there. Only empty directories go (`rmdir`), and only ours to remove.
    """
    tmp = tmp or tempfile.gettempdir()
    ours = _namespace_prefix()
    removed: list[str] = []
    if ours.endswith("x-"):
        return removed
    with contextlib.suppress(OSError):
        for name in os.listdir(tmp):
            pid = name[len(ours):].split("-", 1)[0]
            if name.startswith(ours) and pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(tmp, name))
                    removed.append(os.path.join(tmp, name))
    return removed


_server: ForkServer | None = None
_server_owner = 0  # pid that started `_server` (a forked host must start its own)
_server_lock = threading.Lock()


def get_fork_server() -> ForkServer:
    """The process-wide fork server, started on first use (blocking; seconds at most)."""
    global _server, _server_owner
    with _server_lock:
        if _server is None or _server_owner != os.getpid() or not _server.alive:
            _server, _server_owner = ForkServer(), os.getpid()
        return _server


@atexit.register
def _stop_server() -> None:
    if _server is not None and _server_owner == os.getpid():
        _server.close()


# -- the fork server process ---------------------------------------------------------------------


def bootstrap(control_fd: int, empty_root: str, entry: str) -> None:
    """Main of the started process P: enter the namespaces, fork S (pid 1 there), wait for it."""
    from sera.sandbox import isolation

    entry, plain = entry.removesuffix("!plain"), entry.endswith("!plain")
    report = isolation.IsolationReport()
    if not plain:
        isolation.enter_namespaces(report)
    if report.pid_namespace:
        server = os.fork()
        if server:
            os.close(control_fd)  # S alone answers the host
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _, status = os.waitpid(server, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        isolation.set_parent_death_signal(signal.SIGKILL)  # S dies with P
    serve(control_fd, empty_root, entry, report, per_worker=not plain)


def serve(control_fd: int, empty_root: str, entry: str, report: Any, per_worker: bool = True) -> None:
    """Main loop of the fork server S; whatever ends it, no child it forked survives."""
    import gc

    from sera.sandbox import hardening, isolation

    module, _, function = entry.partition(":")
    target = getattr(importlib.import_module(module), function)  # the preload, imported once
    control = socket.socket(fileno=control_fd)
    devnull = os.open(os.devnull, os.O_RDWR)  # opened before the root goes away
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY) if report.pid_namespace else -1
    isolation.limit_nested_user_namespaces(report)
    isolation.make_empty_root(empty_root, report)
    hardening.close_import_system()  # last: the steps above may import lazily
    gc.freeze()  # keep preloaded objects out of the collector: children then share these pages
    children: dict[int, int] = {}  # the host's pid of each worker -> the pid as seen here
    try:
        control.send(json.dumps(report.as_dict()).encode())
        while True:
            data, fds, _, _ = socket.recv_fds(control, 4096, 1)
            if not data:
                break  # the host is gone
            request = json.loads(data)
            if request["op"] == "spawn" and len(fds) == 1:
                try:
                    pid = _spawn(fds[0], target, devnull, proc, own_pid_ns, children, per_worker)
                    reply: dict[str, Any] = {"pid": pid}
                except OSError as exc:
                    reply = {"error": f"could not fork a worker: {exc}"}
                finally:
                    os.close(fds[0])
            elif request["op"] == "reap":
                local = children.pop(request["pid"], None)
                reply = {"status": None if local is None else _reap(local)}
            else:
                reply = {"error": f"unknown request {request['op']!r}"}
            control.send(json.dumps(reply).encode())
    except OSError:  # the host went away mid-reply (BrokenPipeError, ...)
        pass
    finally:
        for local in children.values():
            with contextlib.suppress(OSError):
                _reap(local)
    os._exit(0)


def _spawn(
    channel_fd: int, target: Any, devnull: int, proc: int, own_pid_ns: int, children: dict[int, int], per_worker: bool
) -> int:
    """Fork one worker; returns its pid as the host sees it."""
    from sera.sandbox import isolation

    if own_pid_ns >= 0:
        isolation.new_pid_namespace(own_pid_ns)
    ready_r, ready_w = os.pipe()
    server_pid = os.getpid()
    local = os.fork()
    if local == 0:
        status = 1
        try:
            os.close(ready_r)
            report = isolation.IsolationReport()
            if per_worker:
                isolation.isolate_worker(report)
            if own_pid_ns < 0:  # no pid namespace to end us: die with the fork server instead
                isolation.set_parent_death_signal(signal.SIGKILL)
                if os.getppid() != server_pid:
                    os._exit(1)
            os.write(ready_w, str(_host_pid(proc)).encode())
            os.close(ready_w)
            target(channel_fd, devnull, proc, report)  # never returns
        except BaseException:
            pass
        os._exit(status)
    os.close(ready_w)
    try:
        answer = os.read(ready_r, 64)
    finally:
        os.close(ready_r)
    if not answer:
        _reap(local)
        raise OSError("the worker exited while starting")
    children[int(answer)] = local
    return int(answer)


def _host_pid(proc_fd: int) -> int:
    """This process's pid in the outermost pid namespace that /proc shows (the host's)."""
    from sera.sandbox import isolation

    nspid = isolation.proc_status_field(proc_fd, "NSpid")
    return int(nspid.split()[0]) if nspid else os.getpid()


def _reap(pid: int) -> int:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # a no-op on a child that already died (still a zombie)
    return os.waitpid(pid, 0)[1]
