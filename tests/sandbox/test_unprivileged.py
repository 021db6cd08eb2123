"""The escape corpora again, as an ordinary user: the process layer must not need root.

As root, this reruns `tests/test_sandbox_escapes.py`, the policy-hole corpus and the
process-layer corpus in a subprocess that dropped to uid/gid 65534 (see `unprivileged`).
Not as root, those files already run as the current, unprivileged user: nothing to add.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sandbox.unprivileged import run_as_nobody

ROOT = Path(__file__).resolve().parents[2]
CORPORA = ["tests/test_sandbox_escapes.py", "tests/sandbox/test_process_layer.py", "tests/sandbox/test_policy_holes.py"]


@pytest.mark.skipif(os.geteuid() != 0, reason="not root: the corpora already run as this unprivileged user")
def test_escape_corpora_hold_for_an_unprivileged_user() -> None:
    env = {"PATH": os.defpath, "HOME": "/tmp", "PYTHONPATH": str(ROOT / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *CORPORA]
    proc = run_as_nobody(args, cwd=str(ROOT), timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert "skipped" not in summary and "failed" not in summary, summary
    assert int(summary.split(" passed")[0].split()[-1]) >= 150, summary  # every case ran, none was skipped
