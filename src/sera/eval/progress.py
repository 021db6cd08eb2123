"""The live progress of `sera eval`: rollouts done of planned, successes, errors, rate and ETA.

The harness only reports (`evaluate(progress=...)` gets a `RunProgress` when a run directory
starts, after every finished rollout and when it ends); showing it is `EvalProgress`'s job, which
the CLI makes. Library calls show nothing unless they pass a callback (or `show_progress=True`).

It follows `sera train`'s display (`sera.train.progress`): on a terminal it is a rich progress
bar per run directory; anywhere else (a file, a pipe, CI) it
is one plain line when a run starts, every `every_s` seconds and when it ends, so logs stay short:

    textcraft-synth/val (tc): 37/200 | ok 30 | errors 1 | 2.31 rollouts/s | ETA 1:10

The rate counts the rollouts finished by this invocation (a resumed run's earlier ones are not
work done now); ETA is what is left at that rate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO


def format_duration(seconds: float) -> str:
    """`H:MM:SS` (or `M:SS` under an hour), as `sera train`'s progress line writes it (that module
    is above this layer: `scripts/import_cycles.py` forbids importing it from here)."""
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass(frozen=True)
class RunProgress:
    """Where the evaluation of one run directory stands."""

    label: str
    """What is evaluated: `env/split (folder)`."""
    total: int
    """Rollouts planned (tasks x samples)."""
    done: int
    """Rollouts with a result (a tree or a recorded failure), resumed ones included."""
    successes: int
    """Done rollouts whose root succeeded and that are not errors."""
    errors: int
    """Done rollouts that are errors (`sera.eval.failures`)."""
    resumed: int
    """Rollouts already done when this invocation started."""
    elapsed_s: float
    """Seconds since this invocation started the run directory."""
    finished: bool = False
    """True for the run's last report (every rollout done, or the run was stopped)."""

    @property
    def rate(self) -> float | None:
        """Rollouts finished per second by this invocation; None before the first."""
        new = self.done - self.resumed
        return new / self.elapsed_s if new > 0 and self.elapsed_s > 0 else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current rate; None without a rate (0 when done)."""
        if self.done >= self.total:
            return 0.0
        rate = self.rate
        return (self.total - self.done) / rate if rate else None


ProgressCallback = Callable[[RunProgress], None]
"""What `evaluate` reports to."""


def stats_text(p: RunProgress) -> str:
    """`ok 30 | errors 1 | 2.31 rollouts/s | ETA 1:10`."""
    rate, eta = p.rate, p.eta_s
    return " | ".join([
        f"ok {p.successes}", f"errors {p.errors}",
        f"{rate:.2f} rollouts/s" if rate is not None else "? rollouts/s",
        f"ETA {format_duration(eta)}" if eta is not None else "ETA ?",
    ])


def status_line(p: RunProgress) -> str:
    """The plain line of `p` (module docstring)."""
    return f"{p.label}: {p.done}/{p.total} | {stats_text(p)}"


class EvalProgress:
    """Shows `RunProgress` reports: call it with each, `close()` at the end (or use `with`)."""

    def __init__(self, stream: TextIO | None = None, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`stream`: where to draw (default stderr); one whose `isatty()` is true gets rich bars,
        any other a plain line at most every `every_s` seconds (and at each run's start and end)."""
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.clock = clock
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        """True: rich progress bars; False: plain lines."""
        self.lines: list[str] = []
        """Plain lines written so far (plain mode)."""
        self._last: dict[str, float] = {}
        self._bars: dict[str, Any] = {}
        self._progress: Any = None
        if self.interactive:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            # Not redirecting stdout: results printed while a bar is up must stay on stdout.
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"), TimeElapsedColumn(),
                console=Console(file=self.stream, highlight=False), redirect_stdout=False,
            )
            self._progress.start()

    def __call__(self, p: RunProgress) -> None:
        if self._progress is not None:
            bar = self._bars.get(p.label)
            if bar is None:
                bar = self._bars[p.label] = self._progress.add_task(p.label, total=p.total, stats="")
            self._progress.update(bar, total=p.total, completed=p.done, stats=stats_text(p))
            return
        now = self.clock()
        last = self._last.get(p.label)
        if last is not None and not p.finished and now - last < self.every_s:
            return
        self._last[p.label] = now
        line = status_line(p)
        self.lines.append(line)
        self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Leave the bars on screen and stop redrawing (idempotent)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> EvalProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
