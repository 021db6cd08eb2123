"""Sandbox sessions: a persistent, Jupyter-like namespace per agent, backed by a worker process.

A session owns at most one worker at a time. When a cell times out or the worker dies, the
worker is discarded, the cell's error says that the namespace was lost, and the next cell runs
in a fresh worker (flagged `worker_restarted`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sera.sandbox.policy import length_violation
from sera.sandbox.process import CellOutcome, SandboxError, WorkerProcess
from sera.sandbox.protocol import PLAIN_TYPES, is_plain
from sera.sandbox.sanitize import clean_text, clean_value
from sera.sandbox.config import settings
from sera.sandbox.slots import NoWorkerSlot

LOST_NAMESPACE_NOTE = "The sandbox was restarted: variables, functions and imports from earlier cells are lost."
"""Told to the agent when a worker is lost: in the error of the cell that cost the worker its
life, or before the output of the next cell if it died between cells."""
CPU_LIFETIME_FACTOR = 200
"""A worker may use this many cells' worth of CPU in total before RLIMIT_CPU kills it."""


@dataclass(frozen=True)
class CellResult:
    """What one cell did, as the agent (and the runtime) sees it."""

    stdout: str
    """Captured stdout and stderr plus the REPL display of the last expression, cut to the cap."""
    error: str | None
    """Readable error (policy violation, syntax error, traceback of user code, timeout, crash), or None."""
    timed_out: bool
    """The cell used more than its compute time and was stopped."""
    error_kind: str | None = None
    """"policy", "syntax", "exception", "timeout", "crash", or "unavailable" (no worker slot freed
    up in time: the cell did not run); None when the cell succeeded."""
    output_truncated: bool = False
    """Output went past `max_output_chars`; `stdout` ends with a marker saying how much was cut."""
    compute_s: float = 0.0
    """Wall time of the cell minus time spent waiting on host tools."""
    wall_s: float = 0.0
    """Wall time of the call, including starting a worker if one was needed."""
    tool_calls: int = 0
    """Tool calls the cell made."""
    worker_restarted: bool = False
    """This cell ran in a fresh worker because the previous one was lost (its namespace is gone)."""
    sanitized: bool = False
    """Control characters or lone surrogates in the output, error or tool arguments were escaped
    (`sanitize.clean_text`), so the text is safe for JSON and terminals."""

    @property
    def ok(self) -> bool:
        return self.error is None


class SandboxSession:
    """A persistent sandboxed interpreter: variables defined in one cell exist in the next.

    `tools` maps names to host callables (sync or async) and plain-data values; in the cell the
    callables are stubs that call back into the host, the values are ordinary variables.
    """

    def __init__(
        self,
        tools: Mapping[str, Any],
        *,
        timeout_s: float = 10.0,
        memory_mb: int = 256,
        max_output_chars: int = 10_000,
        allow_weak_isolation: bool | None = None,
    ) -> None:
        """`allow_weak_isolation`: run even without the kernel isolation (None: the process-wide
        setting, `SERA_UNSAFE_SANDBOX` / `settings.configure`); otherwise WeakIsolationError."""
        if timeout_s <= 0 or memory_mb <= 0 or max_output_chars < 0:
            raise ValueError("timeout_s and memory_mb must be positive, max_output_chars non-negative")
        self._tools, self._data = split_namespace(tools)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_output_chars = max_output_chars
        self.allow_weak_isolation = allow_weak_isolation
        self._holder = _WorkerHolder()
        # An unclosed session must not leak its worker: kill it when the session is collected.
        self._finalizer = weakref.finalize(self, self._holder.abandon)
        self._lost_worker = False
        self._closed = False
        self._cells = 0
        self._lock = asyncio.Lock()

    @property
    def _worker(self) -> WorkerProcess | None:
        return self._holder.worker

    @_worker.setter
    def _worker(self, worker: WorkerProcess | None) -> None:
        self._holder.worker = worker

    @property
    def hardening(self) -> dict[str, Any] | None:
        """The current worker's report of its limits and privileges (None before it starts)."""
        return None if self._worker is None else self._worker.hardening

    @property
    def worker_pid(self) -> int | None:
        """Process id of the current worker (None before it starts or after it was lost)."""
        return None if self._worker is None else self._worker.pid

    async def start(self) -> None:
        """Start the worker now rather than on the first cell."""
        async with self._lock:
            await self._ensure_worker()

    async def run(self, code: str) -> CellResult:
        """Run one cell in the session's namespace."""
        result, _ = await self._run(code, want_vars=False)
        return result

    async def close(self) -> None:
        """Stop the worker; the session cannot run cells afterwards."""
        self._closed = True
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.kill()

    async def __aenter__(self) -> SandboxSession:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _ensure_worker(self) -> WorkerProcess:
        if self._closed:
            raise SandboxError("the sandbox session is closed")
        if self._worker is None:
            self._worker = await WorkerProcess.start(
                self._tools,
                self._data,
                memory_mb=self.memory_mb,
                max_output_chars=self.max_output_chars,
                cpu_lifetime_s=int(max(3600, CPU_LIFETIME_FACTOR * self.timeout_s)),
                allow_weak_isolation=(
                    settings().allow_weak_isolation if self.allow_weak_isolation is None else self.allow_weak_isolation
                ),
            )
        return self._worker

    async def _run(self, code: str, *, want_vars: bool) -> tuple[CellResult, dict[str, Any]]:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        if (too_long := length_violation(code)) is not None:  # never ship it to the worker
            return CellResult(stdout="", error=too_long, timed_out=False, error_kind="policy"), {}
        async with self._lock:
            started = time.monotonic()
            note = ""
            if self._worker is not None and not self._worker.alive:  # killed by a cancelled cell, or died idle
                await self._worker.kill()
                self._worker, self._lost_worker = None, True
                note = f"[{LOST_NAMESPACE_NOTE}]\n"  # no earlier cell reported this loss
            restarted, self._lost_worker = self._lost_worker, False
            try:
                worker = await self._ensure_worker()
            except NoWorkerSlot as exc:  # recorded like any failed cell; the session stays usable
                self._lost_worker = restarted
                return CellResult(stdout="", error=str(exc), timed_out=False, error_kind="unavailable"), {}
            self._cells += 1
            outcome = await worker.run_cell(code, index=self._cells, timeout_s=self.timeout_s, want_vars=want_vars)
            if outcome.worker_lost:
                self._worker, self._lost_worker = None, True
            result = self._result(outcome, note, restarted, time.monotonic() - started)
            variables, escaped = clean_value(outcome.variables)
            if escaped and not result.sanitized:
                result = dataclasses.replace(result, sanitized=True)
            return result, variables

    def _result(self, outcome: CellOutcome, note: str, restarted: bool, wall_s: float) -> CellResult:
        error = outcome.error
        if outcome.error_kind == "timeout":
            error = (
                f"TimeoutError: the cell used more than {self.timeout_s:g} s of compute time (time spent "
                f"waiting for tools is not counted) and was stopped. {LOST_NAMESPACE_NOTE}"
            )
        elif outcome.error_kind == "crash":
            error = f"SandboxCrash: {error}. {LOST_NAMESPACE_NOTE}"
        stdout = note + outcome.output
        if outcome.dropped_chars:
            stdout += f"\n[... output truncated: {outcome.dropped_chars:,} more characters not shown]\n"
        elif outcome.output_cut:
            stdout += "\n[... output truncated: the rest was not shown]\n"
        stdout, out_escaped = clean_text(stdout)
        error, error_escaped = clean_text(error) if error is not None else (None, False)
        return CellResult(
            stdout=stdout,
            error=error,
            sanitized=outcome.sanitized or out_escaped or error_escaped,
            timed_out=outcome.error_kind == "timeout",
            error_kind=outcome.error_kind,
            output_truncated=outcome.output_cut,
            compute_s=round(outcome.compute_s, 6),
            wall_s=round(wall_s, 6),
            tool_calls=outcome.tool_calls,
            worker_restarted=restarted,
        )


class _WorkerHolder:
    """The session's current worker, kept apart so that the session's finalizer can reach it."""

    def __init__(self) -> None:
        self.worker: WorkerProcess | None = None

    def abandon(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.abandon()


def split_namespace(namespace: Mapping[str, Any]) -> tuple[dict[str, Callable[..., Any]], dict[str, Any]]:
    """Split a namespace into host callables (tools) and plain-data variables; TypeError otherwise."""
    tools: dict[str, Callable[..., Any]] = {}
    data: dict[str, Any] = {}
    for name, value in namespace.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
            raise ValueError(f"invalid sandbox name {name!r}: must be an identifier not starting with '__'")
        if callable(value):
            tools[name] = value
        elif is_plain(value):
            data[name] = value
        else:
            raise TypeError(
                f"sandbox namespace entry {name!r} ({type(value).__name__}) is neither a callable "
                f"tool nor plain data ({PLAIN_TYPES})"
            )
    return tools, data


async def run_cell(
    code: str, namespace: dict[str, Any], *, timeout_s: float = 10.0, memory_mb: int = 256
) -> CellResult:
    """Run one cell in a fresh sandbox with `namespace`'s tools and data.

    Afterwards the cell's plain-data variables are written back into `namespace` (new and
    updated ones; functions, classes and other non-plain values stay in the sandbox).
    """
    session = SandboxSession(namespace, timeout_s=timeout_s, memory_mb=memory_mb)
    try:
        result, variables = await session._run(code, want_vars=True)
    finally:
        await session.close()
    namespace.update(variables)
    return result
