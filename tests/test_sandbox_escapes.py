"""Escape corpus: each attempt must be rejected or contained, and the host must be untouched.

Every case runs in a fresh session whose host tools are real functions; afterwards the test
checks that no marker file appeared, that the host's cwd, environment and a canary are
unchanged, that no secret file content leaked into the output, and that the session still
runs a normal cell. The process layer under code that bypassed the policy is checked in
`tests/sandbox/test_process_layer.py`; `tests/sandbox/test_unprivileged.py` reruns both as an
ordinary user.
"""

from __future__ import annotations

import builtins
import functools
import operator
import os
import resource
import string
import types
from pathlib import Path
from typing import Any

import pytest

from sera.sandbox import SandboxSession
from sera.sandbox.safe_builtins import build_builtins, build_modules

CANARY: dict[str, Any] = {"touched": False}
MARKER = Path("/tmp") / f"sera-sandbox-escape-marker-{os.getpid()}"


def _host_tools() -> dict[str, Any]:
    def craft(ingredients: Any, target: Any) -> str:
        return "ok"

    async def launch_subagent(targets: Any, context: str = "") -> str:
        return "child done"

    return {"craft": craft, "launch_subagent": launch_subagent}


# (id, code, outcome): "policy" = rejected before running, "error" = ran and failed with the
# named exception inside the sandbox, "timeout" = stopped by the compute limit.
CORPUS: list[tuple[str, str, str]] = [
    # imports of dangerous modules, however spelled
    ("import-os", "import os\nos.system('touch ' + MARKER)", "policy"),
    ("import-sys", "import sys\nsys.modules", "policy"),
    ("import-subprocess", "import subprocess\nsubprocess.run(['touch', MARKER])", "policy"),
    ("import-socket", "import socket\nsocket.create_connection(('1.1.1.1', 80))", "policy"),
    ("import-ctypes", "import ctypes", "policy"),
    ("import-importlib", "import importlib\nimportlib.import_module('os')", "policy"),
    ("import-builtins", "import builtins\nbuiltins.open(MARKER, 'w')", "policy"),
    ("import-multiprocessing", "import multiprocessing", "policy"),
    ("from-os", "from os import system", "policy"),
    ("submodule", "import collections.abc", "policy"),
    ("asyncio-subprocess", "import asyncio.subprocess", "policy"),
    ("relative-import", "from . import worker", "policy"),
    ("dunder-import", "__import__('os').system('touch ' + MARKER)", "policy"),
    # files, /proc and the environment
    ("open-passwd", "print(open('/etc/passwd').read())", "policy"),
    ("open-write", "open(MARKER, 'w').write('x')", "policy"),
    ("open-alias", "o = open\nprint(o('/etc/passwd').read())", "error:PermissionError"),
    ("open-alias-write", "f = open\nf(MARKER, 'w').write('pwned')", "error:PermissionError"),
    ("proc-self", "print(open('/proc/self/environ').read())", "policy"),
    ("proc-self-alias", "o = open\nprint(o('/proc/self/maps').read())", "error:PermissionError"),
    ("json-codecs", "import json\njson.codecs.open(MARKER, 'w')", "error:AttributeError"),
    ("random-os", "import random\nrandom._os.system('touch ' + MARKER)", "policy"),
    # class hierarchy walks and introspection
    ("subclasses", "().__class__.__bases__[0].__subclasses__()", "policy"),
    ("mro-subclasses", "object.__subclasses__()", "policy"),
    ("getattr-class", "getattr((), '__class__')", "error:AttributeError"),
    ("getattr-built", "getattr(getattr((), '__cla' + 'ss__'), '__bases__')", "error:AttributeError"),
    ("getattr-default", "getattr(craft, '__globals__', None)", "error:AttributeError"),
    ("hasattr-dunder", "hasattr(1, '__class__')", "error:AttributeError"),
    ("setattr-dunder", "class A: pass\nsetattr(A, '__getattr__', print)", "error:AttributeError"),
    ("attrgetter", "import operator\noperator.attrgetter('__class__')(1)", "error:AttributeError"),
    ("attrgetter-dotted", "from operator import attrgetter\nattrgetter('real.__class__')(1)", "error:AttributeError"),
    ("methodcaller", "import operator\noperator.methodcaller('__subclasses__')(object)", "error:AttributeError"),
    (
        "update-wrapper-globals",
        "import functools\ndef f():\n    pass\n"
        "functools.update_wrapper(f, getattr, assigned=(), updated=('__globals__',))",
        "error:TypeError",
    ),
    ("wraps-assigned", "import functools\nfunctools.wraps(print, assigned=('__self__',))", "error:TypeError"),
    (
        "singledispatch-eval",  # register() evaluates string annotations with eval()
        "import functools\n@functools.singledispatch\ndef f(x):\n    pass\n"
        "@f.register\ndef g(x: \"().__class__.__base__.__subclasses__()\"):\n    pass",
        "error:AttributeError",
    ),
    ("builtins-name", "__builtins__['open']", "policy"),
    ("globals", "globals()['__builtins__']", "policy"),
    ("locals-vars-dir", "vars(craft)", "policy"),
    ("dir", "dir(craft)", "policy"),
    ("eval", "eval('__import__(\"os\")')", "policy"),
    ("exec", "exec('import os')", "policy"),
    ("compile", "compile('1', 'x', 'exec')", "policy"),
    ("eval-alias", "e = eval\ne('1')", "error:PermissionError"),
    ("function-code", "(lambda: 0).__code__", "policy"),
    ("function-globals", "def f(): pass\nf.__globals__", "policy"),
    ("print-self", "print.__self__", "policy"),
    ("gi-frame", "def g():\n    yield 1\ngen = g()\ngen.gi_frame.f_back.f_globals", "policy"),
    ("gi-code", "def g():\n    yield 1\ng().gi_code.co_consts", "policy"),
    ("cr-frame", "async def c():\n    pass\nco = c()\nco.cr_frame", "policy"),
    ("ag-frame", "async def a():\n    yield 1\na().ag_frame", "policy"),
    ("traceback-frame", "try:\n    1/0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_globals", "policy"),
    ("format-attr", "'{0.__class__}'.format(1)", "policy"),
    ("format-item", "'{0[0]}'.format([1])", "policy"),
    ("format-dynamic", "s = '{0.__class__.__base__}'\ns.format(1)", "policy"),
    ("format-method-ref", "f = str.format\nf('{0.__class__}', 1)", "policy"),
    ("format-map", "'{x}'.format_map({'x': 1})", "policy"),
    ("format-getattr", "getattr('{0.__class__}', 'format')(1)", "error:AttributeError"),
    ("string-formatter", "import string\nf = string.Formatter()", "error:AttributeError"),
    ("fstring-dunder", "f'{(1).__class__}'", "policy"),
    ("type-3-args", "type('X', (), {})", "error:TypeError"),
    ("type-of-type", "type(type(1))('X', (), {'y': 1})", "error:TypeError"),
    ("dunder-method", "class A:\n    def __getattribute__(self, n):\n        return 1", "policy"),
    ("class-dunder-assign", "class A:\n    __slots__ = ()", "policy"),
    ("match-class-attr", "match 1:\n    case int(__class__=c):\n        pass", "policy"),
    ("import-as-dunder", "import math as __builtins__", "policy"),
    ("global-dunder", "def f():\n    global __builtins__", "policy"),
    ("breakpoint", "breakpoint()", "policy"),
    ("input-help", "input('x')", "policy"),
    ("memoryview", "memoryview(b'abc')", "policy"),
    ("exit", "exit()", "policy"),
    ("quit", "quit()", "policy"),
    ("system-exit", "raise SystemExit(0)", "error:SystemExit"),
    (
        "system-exit-in-task",  # asyncio re-raises SystemExit from a task out of the event loop
        "import asyncio\nasync def f():\n    raise SystemExit(3)\n"
        "t = asyncio.create_task(f())\nawait asyncio.sleep(0.1)",
        "error:SystemExit",
    ),
    # the tool proxies and the event loop
    ("stub-private", "craft._rpc", "policy"),
    ("stub-getattr", "getattr(craft, '_rpc')", "error:AttributeError"),
    ("stub-call-self", "craft.__call__.__self__", "policy"),
    ("stub-type", "type(craft).__init__", "policy"),
    ("stub-non-plain-arg", "craft(print, ('x', 1))", "error:TypeError"),
    ("loop-executor", "import asyncio\nasyncio.get_event_loop().run_in_executor(None, print)", "error:AttributeError"),
    ("loop-running", "import asyncio\nasyncio.get_running_loop()", "error:AttributeError"),
    ("task-get-loop", "import asyncio\nt = asyncio.create_task(asyncio.sleep(0))\nt.get_loop()", "policy"),
    ("task-get-coro", "import asyncio\nt = asyncio.create_task(asyncio.sleep(0))\nt.get_coro()", "policy"),
    ("task-stack", "import asyncio\nt = asyncio.create_task(asyncio.sleep(0))\nt.get_stack()", "policy"),
    ("unawaited-launch", "launch_subagent({'x': 1})", "policy"),
    # resource exhaustion
    ("infinite-loop", "while True:\n    pass", "timeout"),
    ("huge-power", "10**10**10", "timeout|error:MemoryError"),
    ("string-bomb", "x = 'a' * 10**10", "error:MemoryError"),
    ("list-bomb", "x = [0] * 10**10", "error:MemoryError"),
    ("bytearray-bomb", "x = bytearray(10**10)", "error:MemoryError"),
    ("gradual-memory", "chunks = []\nwhile True:\n    chunks.append(bytearray(10**6))", "error:MemoryError|timeout"),
    ("recursion", "def f():\n    f()\nf()", "error:RecursionError"),
    ("deep-repr", "v = []\nfor _ in range(100000):\n    v = [v]\nrepr(v)", "error:RecursionError"),
    ("deep-parens", "x = " + "(" * 100000 + ")" * 100000, "policy"),
    ("deep-unary", "x = " + "-" * 100000 + "1", "policy"),
    ("deep-attr", "x = " + "a." * 50000 + "b", "policy"),
    ("fork-bomb", "import os\nwhile True:\n    os.fork()", "policy"),
    ("thread-bomb", "import threading", "policy"),
    ("signal", "import signal\nsignal.alarm(1)", "policy"),
    ("network-loop", "import asyncio\nawait asyncio.open_connection('1.1.1.1', 80)", "error:AttributeError"),
]


@pytest.fixture(autouse=True)
def host_untouched():
    cwd, environ = os.getcwd(), _environ()
    yield
    assert not MARKER.exists(), "the sandbox wrote a file on the host"
    assert os.getcwd() == cwd and _environ() == environ
    assert CANARY == {"touched": False}


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def _kind(result: Any) -> str:
    if result.timed_out:
        return "timeout"
    if result.error_kind == "policy":
        return "policy"
    if result.error_kind == "exception":
        last_line = result.error.strip().splitlines()[-1]
        return "error:" + last_line.split(":")[0].strip()
    return f"{result.error_kind}"


@pytest.mark.parametrize(("code", "expected"), [(code, out) for _, code, out in CORPUS], ids=[i for i, _, _ in CORPUS])
async def test_escape_is_blocked_or_contained(code: str, expected: str) -> None:
    async with SandboxSession(_host_tools(), timeout_s=0.5, memory_mb=128) as session:
        result = await session.run(code.replace("MARKER", repr(str(MARKER))))
        assert _kind(result) in expected.split("|"), result
        assert "root:" not in result.stdout and "PATH=" not in result.stdout
        follow_up = await session.run("print(6 * 7)")
        assert follow_up.stdout == "42\n" and follow_up.ok


def test_exposed_objects_are_not_the_dangerous_originals() -> None:
    """Nothing a cell can name (builtins, module views) is a real escape hatch."""
    modules = build_modules()
    exposed = list(build_builtins(modules).values())
    exposed += [value for view in modules.values() for value in vars(view).values()]
    dangerous = "open eval exec compile getattr setattr delattr hasattr __import__ vars globals locals type dir"
    originals = [getattr(builtins, name) for name in dangerous.split()]
    originals += [
        operator.attrgetter, operator.methodcaller, functools.update_wrapper, functools.wraps,
        functools.singledispatch, string.Formatter,
    ]
    for value in exposed:
        assert not isinstance(value, types.ModuleType)
        assert not any(value is original for original in originals), value


async def test_print_flood_is_truncated_and_host_memory_stays_bounded() -> None:
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with SandboxSession({}, timeout_s=0.5, max_output_chars=10_000) as session:
        result = await session.run("while True:\n    print('x' * 10**6)")
    assert result.timed_out and result.output_truncated
    assert result.stdout.startswith("x" * 10_000) and len(result.stdout) < 10_200
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb < 50 * 1024


async def test_worker_runs_unprivileged_with_tight_limits() -> None:
    async with SandboxSession({}) as session:
        report = session.hardening
    limits = report["rlimits"]
    assert limits["RLIMIT_FSIZE"] == 0 and limits["RLIMIT_NPROC"] == 0 and limits["RLIMIT_CORE"] == 0
    assert limits["RLIMIT_NOFILE"] <= 8 and report["cwd"] == "/"
    assert limits["RLIMIT_AS"] <= (report["baseline_address_space_mb"] + 256 + 1) * 2**20
    assert report["no_new_privs"]
    if os.geteuid() == 0:
        assert report["uid"] == 65534 and report["gid"] == 65534
    # Containers may withhold these capabilities; where they are held, the isolation must be on.
    if os.geteuid() == 0 and _has_capability(CAP_SYS_CHROOT):
        assert report["empty_root"]  # the worker sees an empty, unreadable filesystem
    if _has_capability(CAP_SYS_ADMIN):
        assert report["network_namespace"]  # no network interfaces at all


CAP_SYS_CHROOT, CAP_SYS_ADMIN = 18, 21


def _has_capability(bit: int) -> bool:
    with open("/proc/self/status") as status:
        effective = next(line for line in status if line.startswith("CapEff:"))
    return bool(int(effective.split()[1], 16) >> bit & 1)
