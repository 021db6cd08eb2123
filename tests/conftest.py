"""Suite-wide setup.

SIGINT: a shell runs a background job (`make test &`, a CI runner's non-interactive shell) with
SIGINT and SIGQUIT ignored, and an ignored disposition survives `exec`. Every subprocess a test
starts would then inherit SIGINT ignored; Python started that way installs no KeyboardInterrupt
handler, so a test that presses Ctrl-C on a child (the sandbox shutdown checks, `sera train`'s
and `sera eval`'s Ctrl-C tests) sees a child that cannot be interrupted. That was the
order-independent, launch-dependent failure of `test_killing_leaves_no_sandbox_process[host-SIGINT]`
on fresh clones. Installing Python's own handler here makes children start with the default
disposition (a caught signal is reset at `exec`), as they do under an interactive terminal.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

import sera

FAKE_VLLM_ENTRY = "from sera.testing.fake_vllm import main\nmain()\n"
"""The fake server (`sera.testing.fake_vllm`) as `vllm.entrypoints.openai.api_server`."""


def pytest_configure(config: object) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def fake_vllm_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A python whose `vllm.entrypoints.openai.api_server` is the fake server (written to
    `tmp_path/shim/vllm/entrypoints/openai/api_server.py`, which a test may replace), so that
    `VLLMServer` starts it as it would start vLLM."""
    shim = tmp_path / "shim" / "vllm" / "entrypoints" / "openai"
    shim.mkdir(parents=True)
    (shim / "api_server.py").write_text(FAKE_VLLM_ENTRY)
    src = Path(sera.__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'shim'}{os.pathsep}{src}")
    return sys.executable
