"""The process layer alone: code that got past the language policy, in a real worker.

Each case runs one unchecked script (see `raw_worker`) in a worker forked by a real fork
server, so it gets exactly the namespaces, empty root, rlimits and lost privileges of a
sandbox worker, and asserts that the attempt was blocked or contained. The same file runs as
root and, through `test_unprivileged`, as an ordinary user.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sera.sandbox import protocol
from sera.sandbox.forkserver import ForkServer
from sera.sandbox.isolation import REQUIRED

HERE = Path(__file__).resolve().parent
SECRET = "sera-private-secret-4f1c"

# Helpers every script has: `attempt(name, fn)` records "allowed" or the exception's name.
PRELUDE = textwrap.dedent(
    """
    import ctypes, errno, os, signal, socket, threading
    def attempt(name, action):
        try:
            value = action()
            result[name] = "allowed" if value is None else ["allowed", repr(value)[:200]]
        except BaseException as exc:
            result[name] = type(exc).__name__
    def free_fds():  # an attacker can close the /dev/null fds to get numbers below RLIMIT_NOFILE
        for fd in (0, 1, 2):
            os.close(fd)
    """
)


class Host:
    """What the scripts aim at: a private file, a listening port, unix sockets, another worker."""

    def __init__(self, tmp: Path) -> None:
        self.private = tmp / "private.txt"
        self.private.write_text(SECRET)
        self.private.chmod(0o600)
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.tcp.setblocking(False)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.unix_path = str(tmp / "host.sock")
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(self.unix_path)
        self.unix.listen()
        self.unix.setblocking(False)
        self.abstract_name = f"\0sera-test-{os.getpid()}-{id(self)}"
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract.bind(self.abstract_name)
        self.abstract.listen()
        self.abstract.setblocking(False)

    def args(self) -> dict[str, Any]:
        return {
            "private": str(self.private), "host_pid": os.getpid(), "tcp_port": self.tcp.getsockname()[1],
            "udp_port": self.udp.getsockname()[1], "unix_path": self.unix_path, "abstract": self.abstract_name,
        }

    def nothing_arrived(self) -> bool:
        for server in (self.tcp, self.unix, self.abstract):
            try:
                server.accept()[0].close()
                return False
            except BlockingIOError:
                pass
        try:
            self.udp.recv(10)
            return False
        except BlockingIOError:
            return True

    def close(self) -> None:
        for s in (self.tcp, self.udp, self.unix, self.abstract):
            s.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    server = ForkServer(entry="raw_worker:main", extra_path=(str(HERE),))
    yield server
    server.close()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    host = Host(tmp_path)
    yield host
    host.close()


def run_raw(server: ForkServer, code: str, args: dict[str, Any], memory_mb: int = 64) -> dict[str, Any]:
    """Run one unchecked script in a fresh worker; its result and hardening report."""
    ours, theirs = socket.socketpair()
    pid = server.spawn(theirs)
    theirs.close()
    try:
        ours.settimeout(30)
        ours.sendall(protocol.pack_frame({"op": "run", "code": PRELUDE + textwrap.dedent(code), "args": args,
                                          "memory_mb": memory_mb}))
        header = ours.recv(protocol.HEADER_BYTES, socket.MSG_WAITALL)
        assert len(header) == protocol.HEADER_BYTES, "the worker died without a result"
        reply = json.loads(ours.recv(protocol.frame_length(header), socket.MSG_WAITALL))
        reply["pid"] = pid
        return reply
    finally:
        ours.close()
        server.reap(pid)


def _blocked(value: Any) -> bool:
    return value != "allowed" and not (isinstance(value, list) and value[0] == "allowed")


# name -> (script, check of `result`); a check returns True when the attempt was blocked or contained.
CASES: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "read-private-file": ("attempt('r', lambda: open(private).read())", lambda r: _blocked(r["r"])),
    "read-private-file-freed-fds": ("free_fds()\nattempt('r', lambda: open(private).read())", lambda r: _blocked(r["r"])),
    "read-etc-passwd": ("free_fds()\nattempt('r', lambda: open('/etc/passwd').read())", lambda r: _blocked(r["r"])),
    "host-environ": ("free_fds()\nattempt('r', lambda: open(f'/proc/{host_pid}/environ').read())", lambda r: _blocked(r["r"])),
    "host-cmdline": ("free_fds()\nattempt('r', lambda: open(f'/proc/{host_pid}/cmdline').read())", lambda r: _blocked(r["r"])),
    "proc-self": ("free_fds()\nattempt('r', lambda: os.listdir('/proc'))", lambda r: _blocked(r["r"])),
    "list-root": ("free_fds()\nattempt('r', lambda: os.listdir('/') or None)", lambda r: r["r"] in ("allowed", "PermissionError")),
    "write-file": ("free_fds()\nattempt('w', lambda: open('/pwned', 'w').write('x'))", lambda r: _blocked(r["w"])),
    "mkdir": ("free_fds()\nattempt('w', lambda: os.mkdir('/pwned'))", lambda r: _blocked(r["w"])),
    "socket-without-free-fd": ("attempt('s', socket.socket)", lambda r: _blocked(r["s"])),
    "connect-loopback-tcp": (
        "free_fds()\ns = socket.socket()\ns.settimeout(2)\nattempt('c', lambda: s.connect(('127.0.0.1', tcp_port)))",
        lambda r: _blocked(r["c"]),
    ),
    "send-loopback-udp": (
        "free_fds()\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "attempt('c', lambda: s.sendto(b'x', ('127.0.0.1', udp_port)))",
        lambda r: _blocked(r["c"]),
    ),
    "connect-internet": (
        "free_fds()\ns = socket.socket()\ns.settimeout(2)\nattempt('c', lambda: s.connect(('1.1.1.1', 80)))",
        lambda r: _blocked(r["c"]),
    ),
    "connect-unix-path": (
        "free_fds()\ns = socket.socket(socket.AF_UNIX)\nattempt('c', lambda: s.connect(unix_path))",
        lambda r: _blocked(r["c"]),
    ),
    "connect-abstract-unix": (
        "free_fds()\ns = socket.socket(socket.AF_UNIX)\nattempt('c', lambda: s.connect(abstract))",
        lambda r: _blocked(r["c"]),
    ),
    "kill-host": ("attempt('k', lambda: os.kill(host_pid, signal.SIGKILL))", lambda r: _blocked(r["k"])),
    "kill-other-worker": ("attempt('k', lambda: os.kill(victim, signal.SIGKILL))", lambda r: _blocked(r["k"])),
    "kill-fork-server": ("attempt('k', lambda: os.kill(server_pid, signal.SIGKILL))", lambda r: _blocked(r["k"])),
    "kill-everyone": (  # -1: every process we may signal; 0: our process group
        "attempt('all', lambda: os.kill(-1, signal.SIGKILL))\nattempt('group', lambda: os.kill(0, signal.SIGTERM))",
        lambda r: True,  # contained: checked by the survivors below
    ),
    "fork-bomb": ("attempt('f', lambda: [os.fork() for _ in range(100)])", lambda r: _blocked(r["f"])),
    "thread": ("attempt('t', lambda: threading.Thread(target=print).start())", lambda r: _blocked(r["t"])),
    "memory-bomb": ("attempt('m', lambda: bytearray(1 << 30))", lambda r: r["m"] == "MemoryError"),
    "fd-exhaustion": (
        "free_fds()\nfds = []\nattempt('p', lambda: [fds.extend(os.pipe()) for _ in range(1000)])\nresult['n'] = len(fds)",
        lambda r: _blocked(r["p"]) and r["n"] <= 3,
    ),
    "huge-output": ("attempt('o', lambda: [os.write(1, b'x' * (1 << 20)) for _ in range(200)] and None)",
                    lambda r: True),  # to /dev/null: nothing reaches the host
    "setuid-root": ("attempt('u', lambda: os.setuid(0))", lambda r: _blocked(r["u"]) or os.geteuid() != 0),
    "mount-proc": (
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "attempt('m', lambda: None if libc.mount(b'proc', b'/', b'proc', 0, None) == 0 else 1/0)",
        lambda r: _blocked(r["m"]),
    ),
    "chroot-escape": ("attempt('c', lambda: os.chroot('/'))", lambda r: _blocked(r["c"])),
    "ptrace-host": (
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "attempt('p', lambda: None if libc.ptrace(16, host_pid, 0, 0) == 0 else 1/0)",  # PTRACE_ATTACH
        lambda r: _blocked(r["p"]),
    ),
    "file-size": ("free_fds()\nattempt('w', lambda: os.write(0, b'x'))", lambda r: True),  # fd 0 is gone: contained
}


@pytest.mark.parametrize("name", list(CASES))
def test_escape_from_the_process_layer_is_contained(name: str, server: ForkServer, host: Host) -> None:
    victim_ours, victim_theirs = socket.socketpair()
    victim = server.spawn(victim_theirs)  # another worker, idle until the case is over
    victim_theirs.close()
    try:
        code, check = CASES[name]
        reply = run_raw(server, code, {**host.args(), "victim": victim, "server_pid": server.pid})
        result = reply["result"]
        assert "uncaught" not in result, result
        assert check(result), (name, result)
        assert SECRET not in json.dumps(result)
        assert host.nothing_arrived(), f"{name}: a connection reached the host"
        assert _alive(victim), "the other worker was killed"
        assert server.alive, "the fork server was killed"
    finally:
        victim_ours.close()
        server.reap(victim)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_worker_reports_every_required_mechanism(server: ForkServer) -> None:
    reply = run_raw(server, "pass", {})
    report = {**server.isolation, **reply["report"]}
    assert [name for name in REQUIRED if not report.get(name)] == [], (report, server.isolation["errors"])
    limits = report["rlimits"]
    assert limits["RLIMIT_NPROC"] == 0 and limits["RLIMIT_FSIZE"] == 0 and limits["RLIMIT_NOFILE"] <= 8
    assert report["uid"] != 0


def test_signal_to_the_worker_group_leaves_the_fork_server(server: ForkServer) -> None:
    reply = run_raw(server, "attempt('k', lambda: os.killpg(os.getpgid(0), signal.SIGKILL))", {})
    assert server.alive and "uncaught" not in reply["result"]  # the worker's group holds only itself
