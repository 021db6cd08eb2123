"""The sandbox's behaviour as a CodeAct executor: REPL semantics, tools over RPC, limits, restarts."""

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
import socket
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sera.sandbox import SandboxError, SandboxSession, check_code, run_cell
from sera.sandbox.process import WorkerProcess
from sera.sandbox.protocol import ProtocolError, decode_value, encode_value, pack_frame


class Tools:
    """Host tools that record how they were called."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.launched = 0
        self.cancelled = 0

    def namespace(self) -> dict[str, Any]:
        return {
            "craft": self.craft,
            "get_info": self.get_info,
            "echo": self.echo,
            "fail": self.fail,
            "opaque": self.opaque,
            "launch_subagent": self.launch_subagent,
            "slow_sync": self.slow_sync,
            "targets": {"stick": 2},
        }

    def craft(self, ingredients: dict[str, int], target: tuple[str, int]) -> str:
        self.calls.append(("craft", (ingredients, target)))
        return f"Crafted {target[1]} {target[0]}"

    def get_info(self, items: list[str]) -> list[str]:
        return [f"{item}: 1 log" for item in items]

    def echo(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("echo", (args, kwargs)))
        return args[0] if len(args) == 1 and not kwargs else [list(args), kwargs]

    def fail(self, message: str) -> None:
        raise ValueError(message)

    def opaque(self) -> object:
        return object()

    def slow_sync(self, seconds: float) -> str:
        time.sleep(seconds)
        return "slept"

    async def launch_subagent(self, targets: dict[str, int], context: str = "") -> str:
        self.launched += 1
        try:
            await asyncio.sleep(targets.get("sleep", 0.3))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return f"child crafted {sorted(targets)}"


@pytest.fixture
def tools() -> Tools:
    return Tools()


@pytest.fixture
async def session(tools: Tools):
    async with SandboxSession(tools.namespace(), timeout_s=5.0, memory_mb=256) as sandbox:
        yield sandbox


# -- REPL semantics -----------------------------------------------------------------------------


async def test_print_and_last_expression_display(session: SandboxSession) -> None:
    result = await session.run("print('hello')\nx = 21\nx * 2")
    assert result.ok and not result.timed_out
    assert result.stdout == "hello\n42\n"
    assert (await session.run("None")).stdout == ""
    assert (await session.run("y = 3")).stdout == ""
    assert (await session.run("'text'")).stdout == "'text'\n"


async def test_variables_functions_and_imports_persist(session: SandboxSession) -> None:
    await session.run("import math\ncount = 3\ndef double(v):\n    return 2 * v")
    result = await session.run("double(count) + math.floor(2.5)")
    assert result.stdout == "8\n"


async def test_top_level_await_and_asyncio_facade(session: SandboxSession) -> None:
    result = await session.run("import asyncio\nawait asyncio.sleep(0.01)\nfrom asyncio import gather\n'ok'")
    assert result.stdout == "'ok'\n", result.error
    result = await session.run("asyncio.run")
    assert result.error_kind == "exception" and "AttributeError" in result.error


async def test_allowed_imports(session: SandboxSession) -> None:
    code = (
        "import math, itertools, json, re, functools, operator, statistics, string, random\n"
        "import heapq, bisect, fractions, decimal\n"
        "from collections import Counter, defaultdict\n"
        "print(Counter('abca').most_common(1), json.dumps({'a': [1]}), fractions.Fraction(1, 3))\n"
        "print(functools.reduce(operator.add, [1, 2, 3]), statistics.mean([1, 3]), string.digits[:3])"
    )
    result = await session.run(code)
    assert result.ok, result.error
    assert result.stdout == "[('a', 2)] {\"a\": [1]} 1/3\n6 2 012\n"


async def test_lazily_loaded_stdlib_parts_work_and_others_fail_cleanly(session: SandboxSession) -> None:
    result = await session.run("import re\nprint(b'\\x80'.decode('cp1252'), bool(re.match('\\N{BULLET}', '\u2022')))")
    assert result.stdout == "\u20ac True\n", result.error
    result = await session.run("'x'.encode('koi8_r')")  # never preloaded: no file system to load it from
    assert "LookupError: unknown encoding: koi8_r" in result.error
    assert "/" not in result.error.splitlines()[-1]  # no host paths


async def test_syntax_error_names_the_line(session: SandboxSession) -> None:
    result = await session.run("x = 1\ny = = 2")
    assert result.error_kind == "syntax"
    assert "SyntaxError" in result.error and "line 2" in result.error


async def test_runtime_error_shows_only_user_frames(session: SandboxSession) -> None:
    await session.run("def inner(v):\n    return 1 / v")
    result = await session.run("x = 0\ninner(x)")
    assert result.error_kind == "exception"
    assert "ZeroDivisionError: division by zero" in result.error
    assert 'File "<cell-1>", line 2, in inner' in result.error
    assert 'File "<cell-2>", line 2, in <module>' in result.error
    assert "sandbox" not in result.error and ".py" not in result.error  # no worker internals


async def test_output_is_truncated_with_a_marker(tools: Tools) -> None:
    async with SandboxSession(tools.namespace(), max_output_chars=100) as session:
        result = await session.run("for i in range(50):\n    print('line', i)")
        assert result.output_truncated and result.ok
        assert result.stdout.startswith("line 0\nline 1\n")
        assert "[... output truncated:" in result.stdout and "more characters not shown]" in result.stdout
        assert len(result.stdout) < 200


# -- tools over RPC -----------------------------------------------------------------------------


async def test_sync_tools_and_tuples_cross_intact(session: SandboxSession, tools: Tools) -> None:
    result = await session.run("r = craft({'oak planks': 4}, ('stick', 2))\nprint(r)\nget_info(['stick'])")
    assert result.ok, result.error
    assert result.stdout == "Crafted 2 stick\n['stick: 1 log']\n"
    assert tools.calls == [("craft", ({"oak planks": 4}, ("stick", 2)))]
    assert type(tools.calls[0][1][1]) is tuple
    result = await session.run(
        "v = echo((1, 'a'), {2: frozenset({3})}, b'\\x00', {4.5}, None, key=True)\n"
        "print(type(v[0][0]).__name__, v[0][1], v[0][2], v[0][3], v[1])"
    )
    assert result.ok, result.error
    assert result.stdout == "tuple {2: frozenset({3})} b'\\x00' {4.5} {'key': True}\n"
    assert result.tool_calls == 1


async def test_plain_data_in_namespace_is_a_variable(session: SandboxSession) -> None:
    assert (await session.run("targets['stick']")).stdout == "2\n"


async def test_tool_exception_becomes_tool_error(session: SandboxSession) -> None:
    result = await session.run("x = 1\nfail('not enough oak planks')")
    assert result.error_kind == "exception"
    assert "ToolError: not enough oak planks" in result.error
    assert "line 2" in result.error and "process.py" not in result.error
    result = await session.run("try:\n    fail('no')\nexcept ToolError as e:\n    print('caught', e)")
    assert result.stdout == "caught no\n"


async def test_non_plain_values_are_refused_both_ways(session: SandboxSession, tools: Tools) -> None:
    result = await session.run("echo(lambda: 0)")
    assert "TypeError" in result.error and "plain data" in result.error
    assert tools.calls == []  # never reached the host
    result = await session.run("opaque()")
    assert "ToolError" in result.error and "cannot be passed" in result.error


async def test_async_tools_run_concurrently() -> None:
    ping_seen, pong_seen = asyncio.Event(), asyncio.Event()

    async def ping() -> str:  # each waits for the other: only concurrent execution finishes
        ping_seen.set()
        await asyncio.wait_for(pong_seen.wait(), 5)
        return "ping"

    async def pong() -> str:
        pong_seen.set()
        await asyncio.wait_for(ping_seen.wait(), 5)
        return "pong"

    async with SandboxSession({"ping": ping, "pong": pong}, timeout_s=2) as session:
        result = await session.run("import asyncio\nawait asyncio.gather(ping(), pong())")
    assert result.ok, result.error
    assert result.stdout == "['ping', 'pong']\n"


async def test_gathered_launches_overlap_and_waiting_is_not_compute(tools: Tools) -> None:
    async with SandboxSession(tools.namespace(), timeout_s=0.5) as session:
        started = time.monotonic()
        result = await session.run(
            "import asyncio\n"
            "a, b = await asyncio.gather(\n"
            "    launch_subagent({'a': 1, 'sleep': 0.6}), launch_subagent({'b': 1, 'sleep': 0.6}))\n"
            "print(a, b, sep='\\n')"
        )
        elapsed = time.monotonic() - started
        assert result.ok, result.error
        assert result.stdout == "child crafted ['a', 'sleep']\nchild crafted ['b', 'sleep']\n"
        assert elapsed < 1.1  # two 0.6 s launches overlapped, and 0.6 s of waiting > the 0.5 s limit
        assert result.compute_s < 0.5
        result = await session.run("slow_sync(0.7)")  # a slow *host* tool is not the cell's compute
        assert result.ok and result.stdout == "'slept'\n"


async def test_unawaited_launch_is_rejected_before_running(session: SandboxSession, tools: Tools) -> None:
    result = await session.run("print('side effect')\nlaunch_subagent({'stick': 1})")
    assert result.error_kind == "policy"
    assert "launch_subagent(...) must be awaited" in result.error and "Line 2" in result.error
    assert result.stdout == "" and tools.launched == 0


async def test_cell_ends_its_tool_calls(session: SandboxSession, tools: Tools) -> None:
    result = await session.run(
        "import asyncio\nt = asyncio.create_task(launch_subagent({'x': 1, 'sleep': 30}))\nawait asyncio.sleep(0.05)"
    )
    assert result.ok, result.error
    await asyncio.sleep(0.05)
    assert tools.launched == 1 and tools.cancelled == 1


async def test_abandoned_tool_call_is_cancelled_on_the_host(session: SandboxSession, tools: Tools) -> None:
    result = await session.run(
        "import asyncio\n"
        "try:\n    await asyncio.wait_for(launch_subagent({'x': 1, 'sleep': 30}), 0.1)\n"
        "except asyncio.TimeoutError:\n    print('gave up')"
    )
    assert result.stdout == "gave up\n", result.error
    await asyncio.sleep(0.05)
    assert tools.cancelled == 1


async def test_tools_run_in_the_callers_context() -> None:
    current = contextvars.ContextVar("current", default="unset")

    async def whoami() -> str:
        return current.get()

    async with SandboxSession({"whoami": whoami, "sync_whoami": lambda: current.get()}) as session:
        async def run_as(name: str) -> str:
            current.set(name)
            return (await session.run("(await whoami(), sync_whoami())")).stdout

        assert await asyncio.create_task(run_as("node-7")) == "('node-7', 'node-7')\n"


# -- limits and restarts ------------------------------------------------------------------------


async def test_timeout_restarts_the_worker_and_keeps_partial_output(session: SandboxSession) -> None:
    session.timeout_s = 0.5
    await session.run("kept = 1")
    result = await session.run("print('started')\nwhile True:\n    pass")
    assert result.timed_out and result.error_kind == "timeout"
    assert result.stdout == "started\n"
    assert "variables" in result.error and "lost" in result.error
    result = await session.run("print(6 * 7)\nkept")
    assert result.worker_restarted
    assert result.stdout == "42\n" and "NameError" in result.error


async def test_worker_death_is_reported_and_recovered(session: SandboxSession) -> None:
    task = asyncio.create_task(session.run("while True:\n    pass"))
    await asyncio.sleep(0.3)
    os.kill(session.worker_pid, signal.SIGKILL)
    result = await task
    assert result.error_kind == "crash" and not result.timed_out
    assert "SandboxCrash" in result.error and "SIGKILL" in result.error and "lost" in result.error
    assert (await session.run("1 + 1")).stdout == "2\n"


async def test_worker_lost_between_cells_is_noted_in_the_next_cell(session: SandboxSession) -> None:
    await session.run("kept = 1")
    os.kill(session.worker_pid, signal.SIGKILL)
    await asyncio.sleep(0.2)
    result = await session.run("print('after')")
    assert result.ok and result.worker_restarted
    assert result.stdout.startswith("[The sandbox was restarted") and result.stdout.endswith("after\n")


async def test_memory_bomb_is_a_memory_error_and_the_worker_survives(session: SandboxSession) -> None:
    await session.run("survivor = 'still here'")
    result = await session.run("x = 'a' * 10**10")
    assert "MemoryError" in result.error and not result.timed_out
    result = await session.run("survivor")
    assert result.stdout == "'still here'\n" and not result.worker_restarted


async def test_cancelled_run_kills_the_worker(session: SandboxSession, tools: Tools) -> None:
    task = asyncio.create_task(session.run("await launch_subagent({'x': 1, 'sleep': 30})"))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = await session.run("'fresh'")
    assert result.worker_restarted and result.stdout.endswith("'fresh'\n")
    assert "restarted" in result.stdout  # the cancelled cell could not tell the agent
    assert tools.cancelled == 1


async def test_closed_session_refuses_cells(tools: Tools) -> None:
    session = SandboxSession(tools.namespace())
    await session.run("1")
    pid = session.worker_pid
    await session.close()
    with pytest.raises(SandboxError):
        await session.run("1")
    assert not os.path.exists(f"/proc/{pid}")  # reaped


async def test_many_sessions_share_one_event_loop() -> None:
    async def tool(i: int) -> int:
        await asyncio.sleep(0.01)
        return i * i

    sessions = [SandboxSession({"tool": tool}) for _ in range(20)]
    try:
        results = await asyncio.gather(*(s.run(f"v = {i}\nawait tool(v)") for i, s in enumerate(sessions)))
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(20)]


async def test_run_cell_writes_plain_variables_back() -> None:
    namespace: dict[str, Any] = {"start": 2, "double": lambda v: 2 * v}
    result = await run_cell("total = double(start)\npair = (total, 'x')\nf = lambda: 0", namespace)
    assert result.ok, result.error
    assert namespace["total"] == 4 and namespace["pair"] == (4, "x") and "f" not in namespace


def test_worker_is_not_forked_from_the_host(tools: Tools) -> None:
    async def inspect_worker() -> tuple[str, int]:
        async with SandboxSession(tools.namespace()) as session:
            with open(f"/proc/{session.worker_pid}/status") as status:
                fields = dict(line.split(":", 1) for line in status)
            with open(f"/proc/{int(fields['PPid'])}/cmdline", "rb") as cmdline:
                return cmdline.read().decode(), int(fields["VmRSS"].split()[0])

    parent_cmdline, rss_kb = asyncio.run(inspect_worker())
    assert "sera.sandbox.forkserver" in parent_cmdline
    assert rss_kb < 64 * 1024


class _FakeForkServer:
    def reap(self, pid: int) -> int:
        return 0


@pytest.mark.parametrize(
    "frame",
    [
        (10**9).to_bytes(4, "big"),  # announces a frame over the size limit
        (3).to_bytes(4, "big") + b"{x}",  # not JSON
        pack_frame({"op": "call", "id": "1", "name": "echo", "args": [], "kwargs": {"$d": []}}),  # id type
        pack_frame({"op": "call", "id": 1, "name": "echo", "args": [{"$x": 1}], "kwargs": {"$d": []}}),
        pack_frame({"op": "call", "id": 1, "name": "echo", "args": [], "kwargs": {"$d": [[1, 2]]}}),
        pack_frame({"op": "done", "error": 5, "error_kind": None, "dropped": 0}),
        pack_frame({"op": "ready"}),
    ],
)
async def test_host_ends_a_worker_that_breaks_the_protocol(frame: bytes, tools: Tools) -> None:
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    worker = WorkerProcess(_FakeForkServer(), 0, reader, writer, tools.namespace(), 100)  # type: ignore[arg-type]
    worker._read_task = asyncio.create_task(worker._read_loop())
    cell = asyncio.create_task(worker.run_cell("1", index=1, timeout_s=5, want_vars=False))
    await asyncio.sleep(0.05)
    theirs.sendall(frame)
    outcome = await asyncio.wait_for(cell, 5)
    theirs.close()
    assert outcome.error_kind == "crash" and outcome.worker_lost
    assert "broke the protocol" in outcome.error
    assert tools.calls == []


# -- the policy and the wire format alone --------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "import math\nmath.sqrt(4)",
        "for _ in range(3):\n    pass",
        "class Point:\n    def __init__(self, x):\n        self.x = x\n"
        "    def __repr__(self):\n        return f'P({self.x})'",
        "'{} has {:>3d} {name}'.format('a', 2, name='logs')",
        "await asyncio.gather(*[launch_subagent(t) for t in targets])",
        "r = await asyncio.wait_for(launch_subagent({'a': 1}), 60)",
        "dir_ = 'north'\nformat(3.14159, '.2f')",
    ],
)
def test_policy_allows_ordinary_code(code: str) -> None:
    assert check_code(code) is None


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        ("x = 1\nimport os", "Line 2: import of 'os'"),
        ("x.__class__", "'__class__'"),
        ("'{0.real}'.format(1)", "format field"),
        ("async def f():\n    launch_subagent({})", "must be awaited"),
        ("tasks = [launch_subagent(t) for t in targets]", "must be awaited"),
        ("def __getattribute__(self, n): pass", "'__getattribute__'"),
    ],
)
def test_policy_rejects_with_a_readable_message(code: str, needle: str) -> None:
    message = check_code(code)
    assert message is not None and needle in message


plain_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.text() | st.integers(), inner, max_size=4)
    | st.frozensets(st.integers() | st.text(), max_size=4)
    | st.sets(st.integers(), max_size=4),
    max_leaves=20,
)


@given(plain_data)
def test_wire_values_round_trip_exactly(value: Any) -> None:
    decoded = decode_value(encode_value(value))
    assert decoded == value and _shape(decoded) == _shape(value)


def _shape(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_shape(v) for v in value])
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), _shape(v)) for k, v in value.items()))
    return type(value).__name__


@pytest.mark.parametrize("wire", [{"x": 1}, {"$t": 1}, {"$d": [[[1], 2]]}, {"$s": [[1]]}, {"$b": "!!"}, {"$q": []}])
def test_malformed_wire_values_are_rejected(wire: Any) -> None:
    with pytest.raises(ProtocolError):
        decode_value(wire)
