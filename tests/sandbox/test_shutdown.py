"""No sandbox process outlives its host, however the host (or its fork server) is stopped.

A host subprocess opens several sessions running busy cells (and one waiting on a tool), prints
its fork server's and workers' pids, and is then killed; the test counts the survivors among
those pids and among all processes whose cmdline names that fork server's private root.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sera.sandbox.forkserver import ROOT_PREFIX, remove_stale_roots

SRC = str(Path(__file__).resolve().parents[2] / "src")
SESSIONS = 4

HOST = textwrap.dedent(
    f"""
    import asyncio, json, sys
    from sera.sandbox import SandboxSession
    from sera.sandbox.forkserver import get_fork_server

    async def slow_tool():
        await asyncio.sleep(600)

    async def main():
        sessions = [SandboxSession({{"slow_tool": slow_tool}}, timeout_s=300) for _ in range({SESSIONS})]
        for s in sessions:
            await s.start()
        server = get_fork_server()
        cells = [asyncio.create_task(s.run("while True:\\n    pass")) for s in sessions[:-1]]
        cells.append(asyncio.create_task(sessions[-1].run("await slow_tool()")))
        await asyncio.sleep(0.3)
        print(json.dumps({{"server": server.pid, "root": server._empty_root,
                          "workers": [s.worker_pid for s in sessions]}}), flush=True)
        await asyncio.gather(*cells)

    asyncio.run(main())
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _disposition(pid: int) -> str:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":\t", 1) for line in status.read().splitlines() if ":\t" in line)
    ignored = int(fields["SigIgn"], 16)
    return f"SIGINT ignored: {bool(ignored >> (signal.SIGINT - 1) & 1)}, SigIgn {fields['SigIgn']}"


def _marked(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if marker.encode() in cmdline.read() and _alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _survivors(pids: list[int], marker: str, wait_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        left = sorted({p for p in pids if _alive(p)} | set(_marked(marker)))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("target", "signum"),
    [("host", signal.SIGTERM), ("host", signal.SIGINT), ("host", signal.SIGKILL),
     ("fork-server", signal.SIGKILL), ("fork-server", signal.SIGTERM)],
    ids=["host-SIGTERM", "host-SIGINT", "host-SIGKILL", "fork-server-SIGKILL", "fork-server-SIGTERM"],
)
def test_killing_leaves_no_sandbox_process(target: str, signum: int) -> None:
    host = subprocess.Popen(
        [sys.executable, "-c", HOST], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    try:
        line = host.stdout.readline()
        assert line, host.stderr.read()
        info = json.loads(line)
        workers = info["workers"]
        assert len(workers) == SESSIONS and all(_alive(p) for p in workers)
        os.kill(host.pid if target == "host" else info["server"], signum)
        if target == "host" and signum != signal.SIGKILL:
            # A host that ignores the signal keeps its sandbox processes, rightly; say so apart.
            try:
                host.wait(10)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the host did not exit on {signal.Signals(signum).name} ({_disposition(host.pid)})")
        survivors = _survivors([info["server"], *workers], info["root"])
        assert survivors == [], f"{len(survivors)} sandbox processes survived: {survivors}"
    finally:
        host.kill()
        host.wait(10)
    # A host killed before `close` leaves its empty mount point; the next fork server removes it.
    remove_stale_roots()
    assert not os.path.exists(info["root"])


def test_only_the_empty_roots_of_dead_hosts_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ours = f"{ROOT_PREFIX}{os.stat('/proc/self/ns/pid').st_ino}-"
    stale = tmp_path / f"{ours}{dead.pid}-a"
    live = tmp_path / f"{ours}{os.getpid()}-b"
    not_empty = tmp_path / f"{ours}{dead.pid}-c"
    other_namespace = tmp_path / f"{ROOT_PREFIX}1-{dead.pid}-d"
    for path in (stale, live, not_empty, other_namespace):
        path.mkdir()
    (not_empty / "file").write_text("")
    assert remove_stale_roots(str(tmp_path)) == [str(stale)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (live, not_empty, other_namespace))


def test_suite_started_with_sigint_ignored_still_interrupts_children() -> None:
    """The CI condition, deterministically: pytest launched as a shell's background job (SIGINT
    ignored, inherited across exec). tests/conftest.py must give the hosts Python's default
    SIGINT handling, or the host-SIGINT case above cannot pass."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"{__file__}::test_killing_leaves_no_sandbox_process[host-SIGINT]"],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
