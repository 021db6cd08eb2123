"""Bounds and boundary hygiene: worker slots, whole-cell time limit, finalizers, sanitized output,
and the refusal to run without the required isolation."""

from __future__ import annotations

import asyncio
import gc
import json
import time

import pytest

from sera.sandbox import SandboxSession, WeakIsolationError, clean_text, configure, settings
from sera.sandbox import process as process_module
from sera.sandbox import config as settings_module
from sera.sandbox.config import ensure_workers
from sera.sandbox.slots import worker_slots


@pytest.fixture
def few_slots():
    before = settings()
    configure(max_workers=2, worker_wait_s=0.3)
    yield
    configure(max_workers=before.max_workers, worker_wait_s=before.worker_wait_s)


async def test_extra_sessions_wait_then_are_refused_with_a_message(few_slots: None) -> None:
    sessions = [SandboxSession({}) for _ in range(3)]
    try:
        results = await asyncio.gather(*(s.run("1") for s in sessions))
        refused = [r for r in results if r.error_kind == "unavailable"]
        assert len(refused) == 1 and "SandboxBusy" in refused[0].error and "SERA_SANDBOX_MAX_WORKERS=2" in refused[0].error
        await sessions[0].close()
        again = await asyncio.gather(*(s.run("2") for s in sessions[1:]))
        assert [r.stdout for r in again] == ["2\n", "2\n"]
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    assert worker_slots.in_use == 0


async def test_a_run_with_more_open_sessions_than_workers_raises_the_bound_unless_the_user_set_it(
        few_slots: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation of N concurrent rollouts keeps N sessions open: `ensure_workers(N)` makes room
    for them (the test above shows the third of 3 refused at a bound of 2), never lowers the bound,
    and leaves one set in SERA_SANDBOX_MAX_WORKERS alone."""
    assert ensure_workers(1).max_workers == 2
    monkeypatch.setenv("SERA_SANDBOX_MAX_WORKERS", "2")
    assert ensure_workers(3).max_workers == 2
    monkeypatch.delenv("SERA_SANDBOX_MAX_WORKERS")
    assert ensure_workers(3).max_workers == 3
    sessions = [SandboxSession({}) for _ in range(3)]
    try:
        results = await asyncio.gather(*(s.run("1") for s in sessions))
        assert [r.stdout for r in results] == ["1\n"] * 3
    finally:
        await asyncio.gather(*(s.close() for s in sessions))


async def test_hundreds_of_children_never_exceed_the_bound() -> None:
    before = settings()
    configure(max_workers=4, worker_wait_s=60)
    peak = 0

    async def launch(i: int) -> int:
        nonlocal peak
        async with SandboxSession({}) as child:  # each child agent has its own session
            peak = max(peak, worker_slots.in_use)
            result = await child.run(f"{i} * 2")
        return int(result.stdout)

    try:
        async with SandboxSession({"launch": launch}, timeout_s=5) as parent:
            result = await parent.run("import asyncio\nr = await asyncio.gather(*[launch(i) for i in range(300)])\nsum(r)")
    finally:
        configure(max_workers=before.max_workers, worker_wait_s=before.worker_wait_s)
    assert result.ok, result.error
    assert result.stdout == f"{sum(2 * i for i in range(300))}\n"
    assert peak <= 4


async def test_busy_loop_beside_an_open_tool_call_times_out() -> None:
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    async with SandboxSession({"slow": slow}, timeout_s=0.5) as session:
        started = time.monotonic()
        result = await session.run(
            "import asyncio\nt = asyncio.create_task(slow(30))\nawait asyncio.sleep(0.05)\nwhile True:\n    pass"
        )
        assert result.timed_out and time.monotonic() - started < 5
        waiting = await session.run("await slow(1.0)")  # waiting on a tool alone is still not compute
        assert waiting.ok and waiting.stdout == "'done'\n"


async def test_an_unclosed_session_does_not_leak_its_worker() -> None:
    session = SandboxSession({})
    await session.start()
    pid = session.worker_pid
    in_use = worker_slots.in_use
    del session
    gc.collect()
    assert not _alive(pid) and worker_slots.in_use == in_use - 1


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_clean_text_escapes_what_breaks_json_and_terminals() -> None:
    assert clean_text("plain\ttext\nok") == ("plain\ttext\nok", False)
    cleaned, changed = clean_text("\x1b[31mred\x00 \r \x9b2J " + chr(0xD800) + "\x7f")
    assert changed and cleaned == "\\x1b[31mred\\x00 \\x0d \\x9b2J \\ud800\\x7f"
    cleaned.encode("utf-8")  # no lone surrogate left


async def test_everything_a_cell_returns_is_sanitized() -> None:
    received = []

    def record(text: str) -> str:
        received.append(text)
        return "ok"

    async with SandboxSession({"record": record}) as session:
        result = await session.run("print('\\x1b[2J' + chr(0xd800) + '\\x00')\nrecord('a\\x07b')\nraise ValueError('\\x1b]0;pwn\\x07')")
        clean = await session.run("print('fine')")
    assert result.sanitized and not clean.sanitized
    assert result.stdout == "\\x1b[2J\\ud800\\x00\n"
    assert received == ["a\\x07b"]
    assert "ValueError: \\x1b]0;pwn\\x07" in result.error
    json.dumps([result.stdout, result.error], ensure_ascii=False).encode("utf-8")


async def test_missing_isolation_is_refused_unless_opted_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_module, "REQUIRED", (*process_module.REQUIRED, "imaginary_namespace"))
    with pytest.raises(WeakIsolationError) as caught:
        async with SandboxSession({}, allow_weak_isolation=False) as session:
            await session.run("1")
    message = str(caught.value)
    assert "\n" not in message and "imaginary_namespace" in message and "--unsafe-sandbox" in message
    assert "SERA_UNSAFE_SANDBOX=1" in message
    async with SandboxSession({}, allow_weak_isolation=True) as session:
        assert (await session.run("6 * 7")).stdout == "42\n"


def test_the_opt_in_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERA_UNSAFE_SANDBOX", "1")
    monkeypatch.setenv("SERA_SANDBOX_MAX_WORKERS", "7")
    loaded = settings_module._from_environment()
    assert loaded.allow_weak_isolation and loaded.max_workers == 7
    monkeypatch.setenv("SERA_UNSAFE_SANDBOX", "0")
    assert not settings_module._from_environment().allow_weak_isolation
