"""Control calls to a vLLM server: load and unload LoRA adapters, list models, health.

The server must run with `--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`
(`VLLMServer(lora=...)`). `POST /v1/load_lora_adapter {"lora_name", "lora_path"}` reads the
adapter folder (the peft layout: `adapter_config.json` with at least `r`, `lora_alpha` and
`target_modules`, and `adapter_model.safetensors`) from the server's own disk and makes the
name a model that requests can ask for; `POST /v1/unload_lora_adapter {"lora_name"}` removes
the name. For full weights, `reload_weights(path)` asks the server to read a model folder in
place (`POST /collective_rpc` with vLLM's `reload_weights`, a dev-mode route:
`VLLM_SERVER_DEV_MODE=1`) and then `POST /reset_prefix_cache`. With sleep mode (a GPU server
started with `--enable-sleep-mode`, dev mode), `sleep()` (`POST /sleep?level=1`) frees the
server's GPU memory for a colocated learner's update and `wake_up()` (`POST /wake_up`) takes it
back. vLLM refuses a name that is already loaded (unless in place, which we never do: an
in-place reload can reuse prefix-cache blocks of the old weights), a rank above
`--max-lora-rank`, and adapters it cannot read.

Every call has a timeout. A refusal (an HTTP error status) is `AdapterLoadError` /
`AdapterUnloadError` naming the adapter, its folder and the server's own message; no answer at
all (connection refused, reset, timed out) is `ServerUnreachable`, which a caller may answer by
restarting the server.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from sera.serving.vllm_server import http_ok


class AdminError(RuntimeError):
    """A control call to the vLLM server failed; one line."""


class AdapterLoadError(AdminError):
    """The server refused to load an adapter (corrupt folder, rank over the limit, ...)."""


class AdapterUnloadError(AdminError):
    """The server refused to unload an adapter."""


class WeightsLoadError(AdminError):
    """The server refused to reload its weights (or to reset its prefix cache)."""


class SleepModeError(AdminError):
    """The server refused to sleep or to wake up (no sleep mode, not in dev mode)."""


class ServerUnreachable(AdminError):
    """The server did not answer a control call (down, or not in time)."""


def server_message(body: bytes) -> str:
    """vLLM's own error text (`{"error": {"message": ...}}`) on one line, else the body's start."""
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error", data)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            text = inner["message"]
    line = " ".join(text.split())
    return line if len(line) <= 400 else line[:397] + "..."


@dataclass(frozen=True)
class AdapterAdmin:
    """The adapter endpoints of one vLLM server."""

    base_url: str
    """The server's OpenAI-compatible root, ending in `/v1`."""
    timeout_s: float = 120.0
    """Longest wait for one control call (a load reads the adapter and builds its tensors)."""

    @property
    def root(self) -> str:
        """The server's address without `/v1` (where `/health` lives)."""
        return self.base_url.rstrip("/").removesuffix("/v1")

    def healthy(self, timeout_s: float = 5.0) -> bool:
        """`/health` answers 200."""
        return http_ok(f"{self.root}/health", timeout_s)

    def models(self) -> list[str]:
        """The ids `/v1/models` lists: the served base name and every loaded adapter."""
        try:
            body = self._call("GET", "models", None, what="list models")
        except _Refused as refused:
            raise AdminError(f"{self.base_url}/models: HTTP {refused.status}: {refused.message}") from None
        try:
            return [entry["id"] for entry in json.loads(body)["data"]]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise AdminError(f"{self.base_url}/models: unreadable reply ({exc}): {body[:200]!r}") from None

    def load(self, name: str, path: str) -> None:
        """Load the adapter folder `path` (absolute, on the server's machine) as model `name`."""
        try:
            self._call("POST", "load_lora_adapter", {"lora_name": name, "lora_path": path}, what=f"load adapter {name}")
        except _Refused as refused:
            raise AdapterLoadError(
                f"the vLLM server at {self.base_url} refused to load adapter {name!r} from {path}: "
                f"HTTP {refused.status}: {refused.message}"
            ) from None

    def unload(self, name: str) -> None:
        """Unload the adapter `name`."""
        try:
            self._call("POST", "unload_lora_adapter", {"lora_name": name}, what=f"unload adapter {name}")
        except _Refused as refused:
            raise AdapterUnloadError(
                f"the vLLM server at {self.base_url} refused to unload adapter {name!r}: "
                f"HTTP {refused.status}: {refused.message}"
            ) from None

    def reload_weights(self, path: str) -> None:
        """Make the server read its weights again, in place, from the model folder `path`
        (vLLM's `reload_weights` through `/collective_rpc`, which needs `VLLM_SERVER_DEV_MODE=1`),
        then drop its prefix cache, whose blocks were computed with the old weights."""
        for route, payload, what in (("collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}},
                                      f"reload weights from {path}"),
                                     ("reset_prefix_cache", {}, "reset the prefix cache")):
            try:
                self._call("POST", route, payload, what=what, root=True)
            except _Refused as refused:
                hint = " (start the server with VLLM_SERVER_DEV_MODE=1)" if refused.status == 404 else ""
                raise WeightsLoadError(f"the vLLM server at {self.root} refused to {what}: HTTP {refused.status}: "
                                       f"{refused.message}{hint}") from None

    def sleep(self, level: int = 1) -> None:
        """Put the server to sleep (vLLM's sleep mode: `--enable-sleep-mode`, a GPU server, routes
        that need `VLLM_SERVER_DEV_MODE=1`): level 1 moves the weights to host memory and drops the
        KV cache, so that a learner colocated on the same GPU has its memory during the update."""
        self._control(f"sleep?level={int(level)}", "sleep")

    def wake_up(self) -> None:
        """Wake a sleeping server (weights and KV cache back on its GPU)."""
        self._control("wake_up", "wake up")

    def _control(self, route: str, what: str) -> None:
        try:
            self._call("POST", route, {}, what=what, root=True)
        except _Refused as refused:
            hint = " (start the server with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1)" if refused.status == 404 else ""
            raise SleepModeError(f"the vLLM server at {self.root} refused to {what}: HTTP {refused.status}: "
                                 f"{refused.message}{hint}") from None

    def _call(self, method: str, route: str, payload: dict[str, Any] | None, *, what: str, root: bool = False) -> bytes:
        url = f"{self.root if root else self.base_url.rstrip('/')}/{route}"
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                return reply.read()
        except urllib.error.HTTPError as exc:
            raise _Refused(exc.code, server_message(exc.read())) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerUnreachable(f"{what}: no answer from {url} within {self.timeout_s:g} s: {reason}") from None


class _Refused(Exception):
    """An HTTP error status (turned into the caller's named error)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message
