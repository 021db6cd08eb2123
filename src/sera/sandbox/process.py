"""Host-side handle of one sandbox worker: start it, run a cell, serve its tool calls, kill it.

Everything is asyncio on the host's loop: the worker's socket is an asyncio stream, tool calls
run as the host's own functions (sync ones inline, async ones as tasks, so several run at once),
and a cell's compute time is wall time minus the time at least one tool call was open, so a
cell awaiting a child agent for minutes is not timed out while `while True: pass` is. Every
message from the worker is untrusted: decoded as tagged JSON, type-checked, and any violation
ends the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import signal
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sera.sandbox import protocol
from sera.sandbox.cellstate import CellState
from sera.sandbox.forkserver import ForkServer, ForkServerError, get_fork_server
from sera.sandbox.isolation import REQUIRED
from sera.sandbox.sanitize import clean_value
from sera.sandbox.config import UNSAFE_ENV, UNSAFE_FLAG
from sera.sandbox.slots import worker_slots

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
"""How long a new worker may take to report ready."""
CPU_POLL_S = 0.25
"""How often the worker's CPU time is checked while a tool call pauses the compute clock."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class SandboxError(RuntimeError):
    """The sandbox machinery itself failed (not the cell): e.g. a worker could not start."""


class WeakIsolationError(SandboxError):
    """The machine cannot isolate sandbox workers as required and the user did not opt in."""

    def __init__(self, missing: list[str], reasons: list[str]) -> None:
        why = f" ({reasons[0]})" if reasons else ""
        super().__init__(
            f"sandbox isolation unavailable: no {', '.join(missing)}{why}; refusing to run model code. "
            f"Pass {UNSAFE_FLAG} (or set {UNSAFE_ENV}=1) to run it with weaker isolation."
        )
        self.missing = missing
        """The `isolation.REQUIRED` mechanisms that did not take effect."""


_warned_weak = False


@dataclass
class CellOutcome:
    """What happened to one cell, before the session turns it into a `CellResult`."""

    output: str
    """Captured output, already cut to the cap (without the marker)."""
    dropped_chars: int
    """Output characters cut by the cap, as far as known (a killed worker cannot report them)."""
    output_cut: bool
    """Output was cut by the cap (also when the amount is unknown)."""
    error: str | None
    """Error text reported by the worker, or None."""
    error_kind: str | None
    """"policy", "syntax", "exception", "timeout" or "crash"."""
    compute_s: float
    """Wall time minus time spent waiting on host tools."""
    tool_calls: int
    """Tool calls the cell made."""
    worker_lost: bool = False
    """The worker was killed or died: its namespace is gone."""
    sanitized: bool = False
    """Some text the cell sent (tool arguments so far; the session adds output and errors) was escaped."""
    variables: dict[str, Any] = field(default_factory=dict)
    """Plain-data variables of the namespace after the cell (when requested)."""


class _WorkerFailed(Exception):
    """The worker reported an internal failure and exited."""


class WorkerProcess:
    """One running worker. Create with `await WorkerProcess.start(...)`."""

    def __init__(
        self,
        server: ForkServer,
        pid: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        tools: Mapping[str, Callable[..., Any]],
        max_output_chars: int,
    ) -> None:
        self.pid = pid
        self._server = server
        self.hardening: dict[str, Any] = {}
        """Isolation in force: the fork server's (empty_root, network_namespace, no_new_privs) and
        the worker's own report (uid, gid, cwd, rlimits)."""
        self._reader = reader
        self._writer = writer
        self._tools = dict(tools)
        self._max_output_chars = max_output_chars
        self._cell: CellState | None = None
        self._dead: str | None = None  # why the worker is unusable, once it is
        self._killing: asyncio.Future[str] | None = None  # reaping the process; gives how it ended
        self._read_task: asyncio.Task[None] | None = None
        self._slot_held = False  # a `worker_slots` slot, given back once when the worker is reaped

    @classmethod
    async def start(
        cls,
        tools: Mapping[str, Callable[..., Any]],
        data: dict[str, Any],
        *,
        memory_mb: int,
        max_output_chars: int,
        cpu_lifetime_s: int,
        allow_weak_isolation: bool = False,
    ) -> WorkerProcess:
        """Take a worker slot, fork a worker, send it its namespace and limits, and wait until it is
        locked down. NoWorkerSlot when no slot frees up in time; WeakIsolationError when the worker
        lacks a `REQUIRED` mechanism and `allow_weak_isolation` is false."""
        await worker_slots.acquire()
        ours, theirs = socket.socketpair()
        try:
            server = await asyncio.to_thread(get_fork_server)
            pid = await asyncio.to_thread(server.spawn, theirs)
        except BaseException as exc:
            ours.close()
            worker_slots.release()
            if isinstance(exc, ForkServerError):
                raise SandboxError(f"could not start a sandbox worker: {exc}") from exc
            raise
        finally:
            theirs.close()
        try:
            reader, writer = await asyncio.open_unix_connection(sock=ours)
        except BaseException:
            ours.close()
            await asyncio.to_thread(server.reap, pid)
            worker_slots.release()
            raise
        worker = cls(server, pid, reader, writer, tools, max_output_chars)
        worker._slot_held = True
        kinds = {name: "async" if _is_async(tool) else "sync" for name, tool in tools.items()}
        worker._send(
            {"op": "init", "tools": kinds, "data": protocol.encode_value(data), "memory_mb": memory_mb,
             "max_output_chars": max_output_chars, "cpu_lifetime_s": cpu_lifetime_s}
        )
        try:
            ready = await asyncio.wait_for(worker._read(), START_TIMEOUT_S)
        except BaseException as exc:
            ended = await asyncio.shield(worker.kill())
            if isinstance(exc, Exception):
                raise SandboxError(f"sandbox worker did not start (it {ended}): {exc!r}") from exc
            raise
        if ready["op"] != "ready":
            await worker.kill()
            raise SandboxError(f"sandbox worker did not start: {str(ready.get('error', ready['op']))[:2000]}")
        report = ready.get("hardening")
        worker.hardening = {**server.isolation, **(report if type(report) is dict else {})}
        missing = [name for name in REQUIRED if worker.hardening.get(name) is not True]
        if missing:
            reasons = [str(r) for r in [*worker.hardening.get("errors", []), *worker.hardening.get("worker_errors", [])]]
            if not allow_weak_isolation:
                await worker.kill()
                raise WeakIsolationError(missing, reasons)
            global _warned_weak
            if not _warned_weak:
                _warned_weak = True
                logger.warning("sandbox workers run WITHOUT %s (%s opted in)", ", ".join(missing), UNSAFE_FLAG)
        worker._read_task = asyncio.create_task(worker._read_loop(), name=f"sandbox-worker-{pid}")
        return worker

    @property
    def alive(self) -> bool:
        return self._dead is None

    async def run_cell(self, code: str, *, index: int, timeout_s: float, want_vars: bool) -> CellOutcome:
        """Run one cell; on timeout or death the worker is killed and `worker_lost` is set."""
        if self._dead is not None:
            raise SandboxError(f"worker is not usable: {self._dead}")
        cell = CellState(self._max_output_chars, contextvars.copy_context())
        self._cell = cell
        try:
            self._send({"op": "cell", "code": code, "index": index, "timeout_s": timeout_s, "want_vars": want_vars})
            timed_out = await self._watch(cell, timeout_s)
        except BaseException:  # cancelled mid-cell: the worker's state is unknown
            self._cell = None
            for task in cell.tasks.values():
                task.cancel()
            await asyncio.shield(self.kill())
            raise
        self._cell = None
        for task in cell.tasks.values():  # a cell's tool calls end with the cell
            task.cancel()
        outcome = CellOutcome(
            output=cell.output.text(),
            dropped_chars=cell.output.dropped,
            output_cut=cell.output.cut or cell.output.dropped > 0,
            error=None,
            error_kind=None,
            compute_s=cell.clock.spent(),
            tool_calls=cell.tool_calls,
            sanitized=cell.sanitized,
        )
        if timed_out:
            await self.kill()
            outcome.error_kind, outcome.worker_lost = "timeout", True
        elif cell.done is None:  # died or misbehaved
            reason = self._dead
            outcome.error = f"{reason} (the process {await self.kill()})"
            outcome.error_kind, outcome.worker_lost = "crash", True
        else:
            outcome.error, outcome.error_kind = cell.done["error"], cell.done["error_kind"]
            outcome.dropped_chars += cell.done["dropped"]
            outcome.output_cut = outcome.dropped_chars > 0
            outcome.variables = cell.done.get("vars") or {}
        return outcome

    async def kill(self) -> str:
        """Stop the worker (idempotent, safe to call concurrently); returns how the process ended."""
        if self._dead is None:
            self._dead = "the worker was stopped"
        if self._killing is None:
            self._killing = asyncio.ensure_future(self._reap())
        return await asyncio.shield(self._killing)

    async def _reap(self) -> str:
        try:
            status = _describe_status(await asyncio.to_thread(self._server.reap, self.pid))
        except ForkServerError:  # workers die with their fork server (pid namespace, PDEATHSIG)
            status = "was lost with its fork server"
        self._release_slot()
        self._writer.close()
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()
        return status

    def abandon(self) -> None:
        """Kill the worker synchronously, without an event loop (a finalizer's last resort)."""
        if self._killing is not None:
            return
        self._dead = self._dead or "the worker was abandoned"
        with contextlib.suppress(ForkServerError, OSError):
            self._server.reap(self.pid)
        self._release_slot()
        with contextlib.suppress(Exception):
            self._writer.transport.abort()

    def _release_slot(self) -> None:
        if self._slot_held:
            self._slot_held = False
            worker_slots.release()

    def cpu_seconds(self) -> float | None:
        """CPU time the worker has used so far (user + system), None if it cannot be read."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        except (OSError, IndexError, ValueError):
            return None

    # -- reading from the worker ---------------------------------------------------------------

    async def _read(self) -> dict[str, Any]:
        length = protocol.frame_length(await self._reader.readexactly(protocol.HEADER_BYTES))
        return protocol.unpack_message(await self._reader.readexactly(length))

    async def _read_loop(self) -> None:
        try:
            while True:
                self._dispatch(await self._read())
        except (asyncio.IncompleteReadError, ConnectionError):
            self._mark_dead("the sandbox process died")
        except _WorkerFailed as exc:
            self._mark_dead(f"the sandbox process failed: {exc}")
        except protocol.ProtocolError as exc:
            self._mark_dead(f"the sandbox process broke the protocol ({exc})")
        except Exception as exc:  # a bug on this side: still end the cell rather than hang it
            logger.exception("sandbox host-side reader failed")
            self._mark_dead(f"the sandbox connection failed ({exc!r})")
        finally:
            self._mark_dead("the connection to the sandbox process was lost")
        if self._cell is None:  # nobody will notice; do not leave the process behind
            await self.kill()

    def _mark_dead(self, reason: str) -> None:
        if self._dead is None:
            self._dead = reason
        if self._cell is not None:
            self._cell.wake()

    def _dispatch(self, message: dict[str, Any]) -> None:
        cell, op = self._cell, message["op"]
        if op == "fatal":
            protocol.require(message, error=str)
            raise _WorkerFailed(message["error"])
        if cell is None:
            raise protocol.ProtocolError(f"unexpected {op!r} message while no cell runs")
        if op == "out":
            protocol.require(message, text=str, cut=bool)
            cell.output.add(message["text"], message["cut"])
        elif op == "call":
            protocol.require(message, id=int, name=str, args=list, kwargs=dict)
            self._start_call(cell, message)
        elif op == "cancel":
            protocol.require(message, id=int)
            if (task := cell.tasks.get(message["id"])) is not None:
                task.cancel()
        elif op == "done":
            protocol.require(message, error=(str, type(None)), error_kind=(str, type(None)), dropped=int)
            variables = message.get("vars") or {}
            if type(variables) is not dict:
                raise protocol.ProtocolError("'vars' must be an object")
            message["vars"] = {str(name): protocol.decode_value(value) for name, value in variables.items()}
            cell.done = message
            cell.wake()
        else:
            raise protocol.ProtocolError(f"unknown message {op!r}")

    async def _watch(self, cell: CellState, timeout_s: float) -> bool:
        """Wait for the cell to finish; True if its compute time ran out first.

        While a tool call is open the clock is paused, but the cell may still compute (a busy
        loop beside a pending async call): then the worker's own CPU time is checked instead.
        """
        loop = asyncio.get_running_loop()
        cpu_start = self.cpu_seconds()
        while cell.done is None and self._dead is None:
            timer = None
            if cell.clock.running:
                remaining = timeout_s - cell.clock.spent()
                if remaining <= 0:
                    return True
                timer = loop.call_later(remaining, cell.wake)
            else:
                cpu_now = self.cpu_seconds()
                if cpu_start is not None and cpu_now is not None and cpu_now - cpu_start > timeout_s:
                    return True
                timer = loop.call_later(CPU_POLL_S, cell.wake)
            try:
                await cell.wait()
            finally:
                if timer is not None:
                    timer.cancel()
        return False

    # -- tool calls ----------------------------------------------------------------------------

    def _start_call(self, cell: CellState, message: dict[str, Any]) -> None:
        call_id, name = message["id"], message["name"]
        if call_id in cell.tasks:
            raise protocol.ProtocolError(f"duplicate call id {call_id}")
        args, kwargs = protocol.decode_value(message["args"]), protocol.decode_value(message["kwargs"])
        if type(kwargs) is not dict or not all(type(key) is str for key in kwargs):
            raise protocol.ProtocolError("tool keyword arguments must have string names")
        (args, kwargs), escaped = clean_value((args, kwargs))  # host tools record these strings
        cell.sanitized = cell.sanitized or escaped
        tool = self._tools.get(name)
        if tool is None:
            self._reply(call_id, error=f"there is no tool named {name!r}")
            return
        cell.call_started(call_id)
        context = cell.context.copy()
        try:
            result = context.run(tool, *args, **kwargs)
        except Exception as exc:
            self._finish_call(cell, call_id, error=_describe_tool_error(name, exc))
            return
        if not inspect.isawaitable(result):
            self._finish_call(cell, call_id, value=result)
            return
        if inspect.iscoroutine(result):
            task = asyncio.get_running_loop().create_task(result, context=context)
        else:
            task = asyncio.ensure_future(result)
        cell.tasks[call_id] = task
        task.add_done_callback(functools.partial(self._call_done, cell, call_id, name))

    def _call_done(self, cell: CellState, call_id: int, name: str, task: asyncio.Task[Any]) -> None:
        cell.tasks.pop(call_id, None)
        if task.cancelled():
            cell.call_finished(call_id)
        elif (exc := task.exception()) is not None:
            self._finish_call(cell, call_id, error=_describe_tool_error(name, exc))
        else:
            self._finish_call(cell, call_id, value=task.result())

    def _finish_call(self, cell: CellState, call_id: int, *, value: Any = None, error: str | None = None) -> None:
        cell.call_finished(call_id)
        if cell is not self._cell or self._dead is not None:
            return  # the cell is over; nobody waits for this reply
        if error is None:
            try:
                self._reply(call_id, value=protocol.encode_value(value))
                return
            except (TypeError, ValueError, RecursionError) as exc:  # not plain data, or too large
                logger.warning("sandbox tool returned a value that cannot cross the boundary: %s", exc)
                error = f"the tool returned a value that cannot be passed to the cell: {exc}"
        self._reply(call_id, error=error[:protocol.MAX_ERROR_CHARS])

    def _reply(self, call_id: int, **payload: Any) -> None:
        self._send({"op": "result", "id": call_id, **payload})

    def _send(self, message: dict[str, Any]) -> None:
        if not self._writer.is_closing():
            self._writer.write(protocol.pack_frame(message))


def _is_async(tool: Callable[..., Any]) -> bool:
    # Also callable objects whose __call__ is `async def`.
    return inspect.iscoroutinefunction(tool) or inspect.iscoroutinefunction(getattr(type(tool), "__call__", None))


def _describe_tool_error(name: str, exc: BaseException) -> str:
    logger.debug("sandbox tool %s raised", name, exc_info=exc)
    message = str(exc)
    if type(exc) in (Exception, ValueError, RuntimeError) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _describe_status(status: int | None) -> str:
    if status is None:
        return "had already been reaped"
    if (code := os.waitstatus_to_exitcode(status)) < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}" + (" (CPU time limit)" if name == "SIGXCPU" else "")
    return f"exited with status {code}"


