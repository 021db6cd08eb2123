"""The sandbox worker process: receives cells from the host, checks and runs them.

`main` is what the fork server calls in a freshly forked child. It isolates the process
(`hardening`), builds a persistent namespace (tool stubs, plain-data variables, safe builtins),
and then serves cells one at a time: policy check, compile (top-level `await` allowed), run on
the worker's own event loop, display the last expression's value like a REPL, and report back.
Importing this module is the fork server's preload: it pulls in everything a worker needs.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib

# Codecs and data the standard library loads lazily on paths a cell can reach (bytes.decode,
# re's \N{...}); workers cannot import from files, so they are loaded here, in the preload.
import encodings.cp1252  # noqa: F401
import encodings.idna  # noqa: F401
import encodings.latin_1  # noqa: F401
import encodings.raw_unicode_escape  # noqa: F401
import encodings.unicode_escape  # noqa: F401
import encodings.utf_16  # noqa: F401
import encodings.utf_32  # noqa: F401
import inspect
import linecache
import os
import sys
import traceback
import unicodedata  # noqa: F401
from typing import Any, NoReturn

from sera.sandbox import hardening, protocol
from sera.sandbox.policy import PolicyViolation, checked_tree, format_syntax_error
from sera.sandbox.safe_builtins import build_builtins, build_modules
from sera.sandbox.worker_io import AsyncTool, Channel, HostGone, OutputCapture, SyncTool, ToolRpc

CELL_FILE_PREFIX = "<cell-"
"""Filename prefix of compiled cells: the only frames shown in tracebacks."""


def main(channel_fd: int, devnull_fd: int, proc_fd: int, isolation: Any = None) -> NoReturn:
    """Entry point of a forked worker (fds: its channel, /dev/null, /proc); never returns.

    `isolation` is the fork server's per-worker `IsolationReport` (namespaces entered after the
    fork); the worker completes it and sends it with its "ready" message.
    """
    channel: Channel | None = None
    status = 0
    try:
        hardening.isolate_fds(channel_fd, devnull_fd, proc_fd)
        channel = Channel(hardening.CHANNEL_FD)
        loop = asyncio.new_event_loop()  # created before the limits: it needs new fds
        asyncio.set_event_loop(loop)
        init = channel.recv()
        protocol.require(init, tools=dict, data=dict, memory_mb=int, max_output_chars=int, cpu_lifetime_s=int)
        worker = Worker(channel, loop, init)
        report = hardening.apply_limits(init["memory_mb"], init["cpu_lifetime_s"], hardening.PROC_FD)
        if isolation is not None:
            isolation.no_privileges = report["no_privileges"]
            report.update(
                {k: v for k, v in isolation.as_dict().items() if k in ("network_namespace", "ipc_namespace", "no_privileges")},
                worker_errors=isolation.errors,
            )
        channel.send({"op": "ready", "hardening": report})
        worker.serve()
    except HostGone:
        pass
    except BaseException as exc:  # report whatever broke the worker itself, then die
        status = 1
        try:
            if channel is not None:
                channel.send({"op": "fatal", "error": f"{type(exc).__name__}: {exc}"[:protocol.MAX_ERROR_CHARS]})
        except BaseException:
            pass
    os._exit(status)


class Worker:
    """One session's interpreter state: namespace, tool stubs, output capture, event loop."""

    def __init__(self, channel: Channel, loop: asyncio.AbstractEventLoop, init: dict[str, Any]) -> None:
        self._channel = channel
        self._loop = loop
        self._output = OutputCapture(channel, init["max_output_chars"])
        self._rpc = ToolRpc(channel, self._output)
        kinds: dict[str, str] = init["tools"]
        self._async_tools = frozenset(name for name, kind in kinds.items() if kind == "async")
        tools = {name: (AsyncTool if kind == "async" else SyncTool)(name, self._rpc) for name, kind in kinds.items()}
        self.namespace: dict[str, Any] = {"__builtins__": build_builtins(build_modules()), "__name__": "__sandbox__"}
        self.namespace.update(protocol.decode_value(init["data"]))
        self.namespace.update(tools)
        sys.stdout = sys.stderr = self._output  # type: ignore[assignment]  # print() and warnings land here

    def serve(self) -> None:
        """Run cells until the host goes away."""
        while True:
            message = self._channel.recv()
            if message["op"] == "cell":
                protocol.require(message, code=str, index=int, timeout_s=(int, float), want_vars=bool)
                self._run_cell(message)
            else:
                self._rpc.dispatch(message)  # a late reply to a call an earlier cell abandoned

    def _run_cell(self, message: dict[str, Any]) -> None:
        hardening.set_cell_cpu_budget(2 * message["timeout_s"] + 5)  # backstop; the host times out first
        self._output.start_cell()
        self._loop.add_reader(self._channel.fileno(), self._rpc.on_readable)
        main = self._loop.create_task(self._execute(message["code"], f"{CELL_FILE_PREFIX}{message['index']}>"))
        try:
            error, kind = self._loop.run_until_complete(main)
        except (KeyboardInterrupt, SystemExit) as exc:  # asyncio re-raises these from a cell's own task
            error, kind = _format_user_error(exc), "exception"
            main.cancel()
            while not main.done():  # finish it now, or it would clean up during the next cell
                with contextlib.suppress(BaseException):
                    self._loop.run_until_complete(main)
        finally:
            self._loop.remove_reader(self._channel.fileno())
        self._output.flush()
        done: dict[str, Any] = {"op": "done", "error": error, "error_kind": kind, "dropped": self._output.dropped}
        if message["want_vars"]:
            done["vars"] = self._plain_variables()
        try:
            self._channel.send(done)
        except ValueError:  # the variables made the frame too large
            done["vars"] = {}
            self._channel.send(done)

    async def _execute(self, code: str, filename: str) -> tuple[str | None, str | None]:
        """Check, compile and run one cell; returns (error text, error kind) or (None, None)."""
        try:
            tree = checked_tree(code, self._async_tools)
        except PolicyViolation as exc:
            return str(exc), exc.kind
        body, last = _split_last_expression(tree)
        try:
            main = _compile(ast.Module(body=body, type_ignores=[]), filename, "exec")
            display = _compile(ast.Expression(body=last), filename, "eval") if last is not None else None
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            message = format_syntax_error(exc) if isinstance(exc, SyntaxError) else f"{type(exc).__name__}: {exc}"
            return message, "syntax"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            await self._evaluate(main)
            if display is not None:
                value = await self._evaluate(display)
                if value is not None:
                    self._output.write(repr(value) + "\n")
        except HostGone:
            raise
        except BaseException as exc:  # the cell's own failure, reported like a REPL would
            return _format_user_error(exc), "exception"
        finally:
            await _cancel_leftover_tasks()
        return None, None

    async def _evaluate(self, code: Any) -> Any:
        result = eval(code, self.namespace)  # noqa: S307 - policy-checked code, restricted builtins
        if code.co_flags & inspect.CO_COROUTINE:  # the cell used top-level await
            result = await result
        return result

    def _plain_variables(self) -> dict[str, Any]:
        variables = {}
        for name, value in list(self.namespace.items()):
            if name.startswith("__") or isinstance(value, SyncTool):
                continue
            try:
                variables[name] = protocol.encode_value(value)
            except (TypeError, ValueError, RecursionError):
                continue  # functions, classes, modules... stay in the worker
        return variables


def _compile(tree: ast.Module | ast.Expression, filename: str, mode: str) -> Any:
    tree = ast.fix_missing_locations(tree)
    return compile(tree, filename, mode, flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def _split_last_expression(tree: ast.Module) -> tuple[list[ast.stmt], ast.expr | None]:
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        return tree.body[:-1], tree.body[-1].value
    return tree.body, None


async def _cancel_leftover_tasks() -> None:
    """Tasks a cell started but did not await end with the cell (like `asyncio.run`)."""
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() if task is not current]
    for task in leftovers:
        task.cancel()
    for _ in range(2):  # let them run their cancellation handlers
        await asyncio.sleep(0)
    for task in leftovers:
        if task.done() and not task.cancelled():
            task.exception()  # mark as retrieved: no "never retrieved" noise in a later cell


def _format_user_error(exc: BaseException) -> str:
    """The exception with a traceback of the user's own code only."""
    try:
        report = traceback.TracebackException(type(exc), exc, exc.__traceback__, lookup_lines=False)
        _keep_cell_frames(report, set())
        text = "".join(report.format()).rstrip("\n")
    except (MemoryError, RecursionError):
        text = f"{type(exc).__name__} (the traceback could not be formatted)"
    if len(text) > protocol.MAX_ERROR_CHARS:
        half = protocol.MAX_ERROR_CHARS // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut ...]\n{text[-half:]}"
    return text


def _keep_cell_frames(report: traceback.TracebackException, seen: set[int]) -> None:
    if id(report) in seen:
        return
    seen.add(id(report))
    report.stack = traceback.StackSummary.from_list(
        [frame for frame in report.stack if frame.filename.startswith(CELL_FILE_PREFIX)]
    )
    for linked in (report.__cause__, report.__context__, *(getattr(report, "exceptions", None) or [])):
        if linked is not None:
            _keep_cell_frames(linked, seen)
