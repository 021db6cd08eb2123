"""Run untrusted, model-written Python (CodeAct cells) safely.

Two layers: a language policy checked on the cell's AST (`check_code`), and a worker process
per session that runs the cell in its own namespaces (no files, no network, no other
processes; see `isolation` and docs/sandbox.md) with rlimits and no privileges, calling the
host's tools over RPC. Where the kernel cannot provide that isolation, sessions raise
`WeakIsolationError` unless the user opted in (`configure(allow_weak_isolation=True)`,
`SERA_UNSAFE_SANDBOX=1`, the CLI's `--unsafe-sandbox`). See `session.SandboxSession` for the persistent, Jupyter-like interface and
`run_cell` for one-shot use.
"""

from sera.sandbox.policy import ALLOWED_MODULES, check_code
from sera.sandbox.process import SandboxError, WeakIsolationError
from sera.sandbox.sanitize import clean_text
from sera.sandbox.session import CellResult, SandboxSession, run_cell
from sera.sandbox.config import SandboxSettings, configure, settings

__all__ = [
    "ALLOWED_MODULES", "CellResult", "SandboxError", "SandboxSession", "SandboxSettings", "WeakIsolationError",
    "check_code", "clean_text", "configure", "run_cell", "settings",
]
