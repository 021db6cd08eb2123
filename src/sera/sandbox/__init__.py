"""Run untrusted, model-written Python (CodeAct cells) safely.

Two layers: a language policy checked on the cell's AST (`check_code`), and a worker process
per session that runs the cell with rlimits, no privileges and no network, calling the host's
tools over RPC. See `session.SandboxSession` for the persistent, Jupyter-like interface and
`run_cell` for one-shot use.
"""

from sera.sandbox.policy import ALLOWED_MODULES, check_code
from sera.sandbox.process import SandboxError
from sera.sandbox.session import CellResult, SandboxSession, run_cell

__all__ = ["ALLOWED_MODULES", "CellResult", "SandboxError", "SandboxSession", "check_code", "run_cell"]
