"""The live progress display of `sera train`: step, policy version, stage, success, tokens/s, ETA.

On a terminal it is one line kept in place at the bottom (a `rich` live display), with the
messages of `log` printed above it; anywhere else (a file, a pipe, CI) it is one plain line per
step, so logs stay readable. It only reads the loop's per-step record:

| shown | from the record |
|---|---|
| step | `step` |
| version | `policy_version` (+1 when `trained`), over `total_versions` |
| stage | `stage`, and `skipped` when the step was not trained |
| success | `success` (tree metrics), else `root_success` |
| loss, eval | `loss` of a trained step; `eval/success` when the step evaluated |
| tok/s | generated tokens (`tokens/policy/completion`, else `tokens/act/completion`) / `time/step` |
| ETA | versions left × mean wall seconds per update so far (skipped rounds' time included) |
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

TOKEN_KEYS = ("tokens/policy/completion", "tokens/act/completion")
"""Record keys of a step's generated tokens, in order of preference."""
WALL_KEY = "time/step"
"""Record key of a step's wall seconds."""


def format_duration(seconds: float) -> str:
    """`H:MM:SS` (or `M:SS` under an hour)."""
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Shows each step's record: `update(record)` after every step, `close()` at the end."""

    def __init__(self, total_versions: int, stream: TextIO | None = None) -> None:
        """`total_versions`: the policy version the run stops at (`steps.max_steps`); `stream`:
        where to draw (default stderr); a stream whose `isatty()` is true gets the live line."""
        self.total_versions = total_versions
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        """True: a live line redrawn in place; False: one plain line per step."""
        self.seconds = 0.0
        """Wall seconds of the steps shown so far."""
        self.updates = 0
        """Updates (trained steps) shown so far."""
        self.last_line = ""
        """The last status line, as plain text."""
        self._live: Any = None
        if self.interactive:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(file=self.stream, force_terminal=True, highlight=False)
            self._live = Live(console=self._console, auto_refresh=False, transient=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()

    def status(self, record: Mapping[str, Any]) -> str:
        """The status line of `record` (counts it towards the ETA: call once per step)."""
        trained = bool(record.get("trained"))
        version = int(record.get("policy_version", 0)) + trained
        wall = float(record.get(WALL_KEY) or 0.0)
        self.seconds += wall
        self.updates += trained
        parts = [f"step {record.get('step', '?')}", f"v{version}/{self.total_versions}",
                 str(record.get("stage", "?")) + ("" if trained else " (skipped)")]
        success = record.get("success", record.get("root_success"))
        if isinstance(success, int | float):
            parts.append(f"success {success:.2f}")
        if trained and isinstance(record.get("loss"), int | float):
            parts.append(f"loss {record['loss']:.4g}")
        if isinstance(record.get("eval/success"), int | float):
            parts.append(f"eval {record['eval/success']:.2f}")
        tokens = next((record[k] for k in TOKEN_KEYS if isinstance(record.get(k), int | float)), None)
        if tokens is not None and wall > 0:
            parts.append(f"{tokens / wall:,.0f} tok/s")
        left = max(0, self.total_versions - version)
        if self.updates:
            parts.append(f"ETA {format_duration(left * self.seconds / self.updates)}")
        elif left:
            parts.append("ETA ?")
        return " | ".join(parts)

    def update(self, record: Mapping[str, Any]) -> None:
        """Show one step's record."""
        self.last_line = self.status(record)
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text(self.last_line, no_wrap=True, overflow="ellipsis"), refresh=True)
        else:
            self.stream.write(self.last_line + "\n")
            self.stream.flush()

    def log(self, message: str) -> None:
        """Print a message: above the live line on a terminal, as its own line otherwise."""
        if self._live is not None:
            self._console.print(message, markup=False, highlight=False)
        else:
            self.stream.write(message + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Leave the last status line on screen and stop redrawing (idempotent)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
