"""The job record (`pipeline.json`) and the one way a phase is run and recorded.

Every phase has a `PhaseRecord`: its status, start and end (UTC, ISO 8601), wall seconds, a
one-line error when it failed (and whether the infrastructure was at fault), and a small
`detail` mapping of what it produced. The record is rewritten atomically after every change, so
a killed job leaves it consistent: a phase caught `running` did not finish.

`run_phase` is the only code that changes a phase's status; the main job (`sera.pipeline.job`)
and the CPU experiment script both use it, so both resume the same way: a phase that is `done`
(and whose output is still there, the caller's check) is kept, anything else runs again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from sera.eval.failures import one_line
from sera.eval.store import write_atomically
from sera.memory import trim_heap

Status = Literal["pending", "running", "done", "failed", "skipped", "interrupted"]
"""`pending`: not started; `running`: started, not finished (the job died in it); `done`;
`failed` (its error says why); `skipped` (its `detail.reason` says why; decided afresh on every
run); `interrupted` (a signal stopped it; it continues on the next run)."""
RECORD_VERSION = 1
"""Version of `pipeline.json`'s layout."""


class PhaseFailed(Exception):
    """A phase ended without its result; the message is one line. `infra`: the infrastructure's
    fault (rerun to retry), not a model result."""

    def __init__(self, message: str, *, infra: bool = False, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.infra = infra
        self.detail = detail or {}


class PhaseInterrupted(Exception):
    """A signal stopped the phase after it saved its state (RL checkpoints); it resumes on rerun."""

    def __init__(self, signal_name: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(f"stopped by {signal_name}")
        self.signal_name = signal_name
        self.detail = detail or {}


def now_iso() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class PhaseRecord:
    """What happened to one phase (its last attempt)."""

    name: str
    """The phase, also its folder under the job directory."""
    status: Status = "pending"
    """See `Status`."""
    started_at: str | None = None
    """UTC start of the last attempt (ISO 8601)."""
    ended_at: str | None = None
    """UTC end of the last attempt."""
    wall_s: float | None = None
    """Wall seconds of the last attempt."""
    error: str | None = None
    """One line: why it failed or was interrupted."""
    infra: bool = False
    """The failure was the infrastructure's (server, sandbox, harness), not the model's."""
    detail: dict[str, Any] = field(default_factory=dict)
    """What it produced (counts, checkpoint, why it stopped) or why it was skipped (`reason`)."""


@dataclass
class JobRecord:
    """`pipeline.json`: every phase's record and every invocation of the job."""

    path: Path
    """The file."""
    phases: dict[str, PhaseRecord] = field(default_factory=dict)
    """By phase name, in the order they were first recorded."""
    invocations: list[dict[str, Any]] = field(default_factory=list)
    """One per run of the job: command, start, config hash, git commit, budget, RL deadline."""

    @classmethod
    def load(cls, path: Path, names: tuple[str, ...] = ()) -> JobRecord:
        """The record at `path` (a fresh one when the file does not exist), with a pending
        record for each of `names` it lacks. ValueError naming the file if it is unreadable."""
        record = cls(path=path)
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                record.phases = {p["name"]: PhaseRecord(**p) for p in data["phases"]}
                record.invocations = list(data.get("invocations", []))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path} is not a readable job record ({one_line(str(exc))}); move it away to start over") from None
        for name in names:
            record.phases.setdefault(name, PhaseRecord(name=name))
        return record

    def phase(self, name: str) -> PhaseRecord:
        """The record of `name` (created pending if new)."""
        return self.phases.setdefault(name, PhaseRecord(name=name))

    def save(self) -> None:
        """Write the file atomically."""
        data = {"version": RECORD_VERSION, "phases": [asdict(p) for p in self.phases.values()],
                "invocations": self.invocations}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(data, indent=1, default=str))

    def skip(self, name: str, reason: str) -> PhaseRecord:
        """Record `name` as skipped for `reason` (no timing: nothing ran)."""
        phase = self.phase(name)
        phase.status, phase.error, phase.infra, phase.detail = "skipped", None, False, {"reason": reason}
        phase.started_at = phase.ended_at = phase.wall_s = None
        self.save()
        return phase


def run_phase(record: JobRecord, name: str, work: Callable[[], dict[str, Any]]) -> PhaseRecord:
    """Run `work` as phase `name`: `running` (saved) before, then `done` with its returned detail,
    `failed` with a one-line error (any exception; `PhaseFailed` says whether the infrastructure
    was at fault), or `interrupted` (`PhaseInterrupted`, or Ctrl-C, which is re-raised after the
    record is saved). Start, end and wall seconds are recorded either way; the memory the phase
    freed is handed back to the system (`sera.memory.trim_heap`)."""
    phase = record.phase(name)
    phase.status, phase.error, phase.infra, phase.detail = "running", None, False, {}
    phase.started_at, phase.ended_at, phase.wall_s = now_iso(), None, None
    record.save()
    started = time.monotonic()

    def close(status: Status, error: str | None = None, detail: dict[str, Any] | None = None, infra: bool = False) -> None:
        phase.status, phase.error, phase.infra, phase.detail = status, error, infra, detail or {}
        phase.ended_at, phase.wall_s = now_iso(), round(time.monotonic() - started, 3)
        record.save()

    try:
        detail = work()
    except KeyboardInterrupt:
        close("interrupted", "stopped by SIGINT")
        raise
    except PhaseInterrupted as exc:
        close("interrupted", str(exc), exc.detail)
    except PhaseFailed as exc:
        close("failed", one_line(str(exc)), exc.detail, exc.infra)
    except Exception as exc:  # recorded and reported as this phase's failure; the job stops there
        close("failed", one_line(f"{type(exc).__name__}: {exc}"))
    else:
        close("done", None, detail)
    finally:
        trim_heap()  # the next phase starts from what this one freed, not from its peak
    return phase
