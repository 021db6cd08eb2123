"""Process-wide sandbox settings: the weak-isolation opt-in and the concurrent-worker bound.

Read from the environment once (`SERA_UNSAFE_SANDBOX=1`, `SERA_SANDBOX_MAX_WORKERS=N`,
`SERA_SANDBOX_WORKER_WAIT_S=S`) and changeable with `configure` (what the CLI's
`--unsafe-sandbox` calls).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

UNSAFE_ENV = "SERA_UNSAFE_SANDBOX"
MAX_WORKERS_ENV = "SERA_SANDBOX_MAX_WORKERS"
UNSAFE_FLAG = "--unsafe-sandbox"


@dataclass(frozen=True)
class SandboxSettings:
    """Settings shared by every sandbox session of this process."""

    allow_weak_isolation: bool = False
    """Run model code even where the kernel isolation (`isolation.REQUIRED`) is not available."""
    max_workers: int = 32
    """Most sandbox workers alive at once in this process; further sessions wait for a slot.

    A session keeps its worker while idle (its namespace persists) and a parent agent keeps
    its own while it waits for its children, so the bound must leave room for a whole tree's
    open sessions; 32 workers take about 130 MB (most pages are shared with the fork server)."""
    worker_wait_s: float = 120.0
    """How long a session waits for a free worker slot before its cell is refused."""


def _from_environment() -> SandboxSettings:
    defaults = SandboxSettings()
    try:
        return SandboxSettings(
            allow_weak_isolation=os.environ.get(UNSAFE_ENV, "") not in ("", "0"),
            max_workers=int(os.environ.get(MAX_WORKERS_ENV, defaults.max_workers)),
            worker_wait_s=float(os.environ.get("SERA_SANDBOX_WORKER_WAIT_S", defaults.worker_wait_s)),
        )
    except ValueError as exc:
        raise ValueError(f"bad sandbox setting in the environment: {exc}") from None


_current = _from_environment()


def settings() -> SandboxSettings:
    """The settings in force."""
    return _current


def configure(**changes: object) -> SandboxSettings:
    """Change some settings (e.g. `configure(allow_weak_isolation=True)`); returns the new ones."""
    global _current
    updated = dataclasses.replace(_current, **changes)  # type: ignore[arg-type]
    if updated.max_workers < 1 or updated.worker_wait_s < 0:
        raise ValueError("max_workers must be at least 1 and worker_wait_s non-negative")
    _current = updated
    return _current


def ensure_workers(sessions: int) -> SandboxSettings:
    """Raise the worker bound to `sessions` when it is lower: a run that keeps that many sessions
    open at once (an evaluation's concurrent rollouts, a training round's trees) would otherwise
    make the rest wait for a whole rollout to end, which on a slow machine outlasts
    `worker_wait_s` and fails the cell as infrastructure (SandboxBusy). A bound set in the
    environment (`SERA_SANDBOX_MAX_WORKERS`) is the user's and stays. Returns the settings in force."""
    if MAX_WORKERS_ENV in os.environ or _current.max_workers >= sessions:
        return _current
    return configure(max_workers=sessions)
