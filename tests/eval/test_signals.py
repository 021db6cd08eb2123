"""SIGINT and SIGTERM stop a real `sera eval` process cleanly: exit status 130 / 143, a partial
summary written, no sandbox process (fork server, worker) left behind, and a rerun resumes to the
same results as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sera.cli import app
from sera.types import RolloutTree

pytestmark = pytest.mark.slow  # signalled and resumed runs: `make test-slow` (and CI), not `make test`

LIMIT = "12"
ARGS = ["eval", "--limit", LIMIT, "--concurrency", "2"]
SANDBOX_MARK = "sera-sandbox-root-"
"""In the cmdline of a fork server and of every worker it forks (`sera.sandbox.forkserver`)."""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return b""


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _marked(markers: set[bytes]) -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and any(m in _cmdline(int(e)) for m in markers)
            and _alive(int(e))]


def _per_task(out: Path) -> dict[str, bool | None]:
    return {p.parent.name: RolloutTree.from_json(p.read_bytes()).root_success for p in sorted((out / "rollouts").glob("*/0.json"))}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_run_cleanly_and_a_rerun_resumes_it(signum: int, tmp_path: Path) -> None:
    out = tmp_path / "stopped"
    process = subprocess.Popen([sys.executable, "-m", "sera.cli", *ARGS, "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sandbox: set[int] = set()
        markers: set[bytes] = set()
        deadline = time.monotonic() + 120
        while len(list((out / "rollouts").glob("*/0.json"))) < 2 or not sandbox:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run never saved two trees"
            for pid in _descendants(process.pid):  # the fork servers and workers, while they run
                line = _cmdline(pid)
                if SANDBOX_MARK.encode() in line:
                    sandbox.add(pid)
                    markers |= {part for part in line.split(b"\0") if SANDBOX_MARK.encode() in part}
            time.sleep(0.02)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 128 + signum, stderr
        assert f"stopped by {signal.Signals(signum).name}" in stderr
        deadline = time.monotonic() + 15
        while (left := sorted({p for p in sandbox if _alive(p)} | set(_marked(markers)))) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == [], f"{len(left)} sandbox processes survived: {left}"
    finally:
        process.kill()
        process.wait(10)

    partial = json.loads((out / "summary.json").read_text())
    assert partial["complete"] is False and partial["finished_rollouts"] < partial["planned_rollouts"] == int(LIMIT)
    assert partial["failed"] == [], "rollouts cut short by the signal must not be recorded as results"

    runner = CliRunner()
    resumed = runner.invoke(app, [*ARGS, "--out", str(out), "--no-progress"])
    assert resumed.exit_code == 0, resumed.output
    straight = tmp_path / "straight"
    assert runner.invoke(app, [*ARGS, "--out", str(straight), "--no-progress"]).exit_code == 0
    a, b = (json.loads((d / "summary.json").read_text()) for d in (straight, out))
    assert _per_task(out) == _per_task(straight) and len(_per_task(out)) == int(LIMIT)
    for key in ("overall", "by_difficulty", "errors_by_kind", "failed", "complete", "finished_rollouts"):
        assert a[key] == b[key], key
    assert b["wall_time_s"] > partial["wall_time_s"]  # the stopped invocation's time is kept
