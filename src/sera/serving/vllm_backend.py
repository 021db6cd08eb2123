"""The vLLM sampler backend: a server serving the learner's base model and the policy as a LoRA
adapter, or (full fine-tuning) the policy's full weights.

`open_vllm_backend` starts a server (`VllmSettings.base_url` None: `sampler.vllm.base_url` null)
or uses the given one, and samples through an `OpenAISampler` with the model's tokenizer that
requires token ids and log-probs (`ThreadedPolicy` keeps its HTTP client on one event loop
across the loop's rounds).
Weights reach the server by `VLLMAdapterSync` (save, hot-load as `policy-v{version:06d}`, route,
unload the previous one, canary) or, for full weights, `VLLMWeightsSync` (save
`OUT/weights/v{version:06d}`, restart the server on it or reload it in place, canary).

**The base must be exactly the learner's.** `serving_base` picks the folder the server loads:
the converted SmolLM2 folder for `model.name: smollm2` without `--init-from`; otherwise (the
`tiny` test model, weights from `--init-from` merged into the base, any other model) the
learner's base model as it was before LoRA was injected, saved once into `OUT/sampler_base/`.

**Colocation.** With `sleep_during_update` (a GPU shared by the server and the learner) the
server is put to sleep before each update (`before_update`) and woken by the sync, which then
loads the new weights and runs the canary as always; it samples nothing in between.

**Failures.** A started server that died or stopped answering `/health` is restarted (at most
`sampler.vllm.restarts` times per run) and the current adapter loaded again (`recover`); a server
given by `base_url` is not ours to restart. A sync that fails (refused adapter, full disk,
canary) raises `SyncError` naming the cause.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sera.policy.openai_http import HttpSettings
from sera.policy.openai_sampler import OpenAISampler
from sera.policy.threaded import ThreadedPolicy
from sera.serving.errors import InfraFailure, ServingError
from sera.serving.vllm_admin import AdapterAdmin, AdminError, ServerUnreachable
from sera.serving.vllm_server import SETUP_HINT, LoraServing, VLLMServer, VLLMServerError, lora_rank_limit
from sera.serving.vllm_sync import ADAPTERS_DIR, VLLMAdapterSync
from sera.serving.vllm_weights_sync import WEIGHTS_DIR, VLLMWeightsSync
from sera.serving.weight_sync import SyncError, SyncReport

SERVED_BASE = "base"
"""The name the server gives the base model (never sampled from in training)."""
SAMPLER_BASE_DIR = "sampler_base"
"""`OUT/sampler_base/`: the learner's base model saved for the server, when it is not a folder already."""
SERVER_LOG = "vllm-server.log"
"""`OUT/vllm-server.log`: the started server's output (restarts append)."""
_BASE_MARKER = "sera-sampler-base-complete"


@dataclass(frozen=True)
class VllmSettings:
    """How to start (or reach) the server and sample from it: plain values, read from the trainer's
    `sampler.vllm` section by `sera.train.sampler_setup.vllm_settings`."""

    python: str
    """The python of the vLLM virtualenv the server runs under."""
    dtype: str
    """The server's dtype as vLLM spells it (`float32`, `bfloat16`)."""
    canary_bound: float
    """Largest canary gap accepted (`VLLM_FP32_BOUND` when server and learner are fp32, else `BF16_BOUND`)."""
    lora_rank: int
    """The learner's LoRA rank (the server's rank limit is derived from it)."""
    max_model_len: int
    """Longest sequence the server accepts (the rollout context)."""
    base_url: str | None = None
    """A running server to use (its `/v1` root); None: start one."""
    kv_cache_gib: int = 4
    """KV cache of a started server on a CPU, in GiB."""
    start_timeout_s: float = 600.0
    """Longest wait for a started (or restarted) server to answer `/health`."""
    restarts: int = 1
    """Restarts of a started server allowed per run."""
    request_timeout_s: float = 600.0
    """Longest wait for one completion."""
    extra_args: tuple[str, ...] = ()
    """More command-line arguments for a started server."""
    full_sync: str | None = None
    """None: the policy is a LoRA adapter; `restart` / `reload`: full weights, and how the server
    takes them (`VLLMWeightsSync`)."""
    sleep_during_update: bool = False
    """Put the server to sleep before each update and wake it for the sync (vLLM's sleep mode, a
    GPU server sharing its GPU with the learner); a started server gets `--enable-sleep-mode`."""
    log_name: str = SERVER_LOG
    """The started server's log file under the run folder (`server_log_name`)."""


def server_log_name(index: int) -> str:
    """The log file of started server `index`: `vllm-server.log`, then `vllm-server-1.log`, ..."""
    return SERVER_LOG if index == 0 else f"vllm-server-{index}.log"


def serving_base(out: Path, model: torch.nn.Module, tokenizer: Any, *, model_name: str, initialized: bool) -> Path:
    """The model folder the server loads as the base: exactly the learner's base weights (module
    docstring); `model_name` is the learner's, `initialized` whether its weights came from
    `--init-from`. Call it before the learner injects LoRA into `model`."""
    from sera.policy.models import DEFAULT_ALIASES, ensure_default_model

    if model_name in DEFAULT_ALIASES and not initialized:
        return ensure_default_model()
    folder = out / SAMPLER_BASE_DIR
    if (folder / _BASE_MARKER).is_file():  # a resumed run: saved by its first start
        return folder
    staging = Path(tempfile.mkdtemp(prefix=f".{SAMPLER_BASE_DIR}.tmp-", dir=out))
    try:
        model.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        (staging / _BASE_MARKER).write_text("the learner's base model, before LoRA\n")
        staging.chmod(0o755)
        if folder.exists():
            shutil.rmtree(folder)  # an unfinished copy: no marker
        staging.rename(folder)
    except OSError as exc:
        raise ServingError(f"writing the sampler's base model into {folder} failed: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


@dataclass
class VllmBackend:
    """Sampling through a vLLM server, the policy hot-loaded as a LoRA adapter or served as full weights."""

    sampler: OpenAISampler
    """The HTTP sampler; its `model` is the adapter (or the served base name) the next requests ask for."""
    adapters: VLLMAdapterSync | VLLMWeightsSync
    """Saves, loads and checks the adapters (or the full weights)."""
    server: VLLMServer | None
    """The server sera started, or None for one given by `sampler.vllm.base_url`."""
    max_restarts: int
    """`sampler.vllm.restarts`."""
    start_timeout_s: float
    """`sampler.vllm.start_timeout_s`, for restarts."""
    policy: ThreadedPolicy = field(init=False)
    """What the trees sample from: `sampler` on its own event loop."""
    restarts: int = 0
    """Restarts done in this run."""
    sleeps: bool = False
    """Sleep during each update (`VllmSettings.sleep_during_update`)."""
    asleep: bool = False
    """The server was put to sleep and not woken since."""

    def __post_init__(self) -> None:
        self.policy = ThreadedPolicy(self.sampler, name="vllm-sampler")

    @property
    def admin(self) -> AdapterAdmin:
        """The server's adapter endpoints."""
        return self.adapters.admin

    def where(self) -> str:
        """Where to look when sampling fails."""
        if self.server is not None:
            return f"see the vLLM server log {self.server.log_path}"
        return f"see the log of the vLLM server at {self.sampler.base_url}"

    @property
    def base_urls(self) -> list[str]:
        """The server's `/v1` root (a list, as `VllmGroup.base_urls`)."""
        return [self.sampler.base_url]

    def served_name(self, server: int = 0) -> str:
        """The name the current version is served under (the only server is server 0)."""
        return self.sampler.model

    def sync(self, learner: Any, version: int, saved: Path | None = None) -> SyncReport:
        """The weights sync, once more after `recover` when the server did not answer;
        every failure a `SyncError` naming its cause. `saved`: the version's folder, already
        written (another server of the run saved it)."""
        try:
            try:
                self._wake()
                return self.adapters.sync(learner, version, saved)
            except ServerUnreachable as exc:
                self.recover(f"weight sync to policy version {version}: {exc}")
                return self.adapters.sync(learner, version, saved)
        except (AdminError, InfraFailure) as exc:
            raise SyncError(f"{type(exc).__name__}: {exc}") from exc

    def recover(self, reason: str) -> None:
        """After an infrastructure failure: a healthy server gets the current adapter back if it lost
        it; a dead one is restarted (within `max_restarts`) and the adapter reloaded; otherwise
        `InfraFailure`."""
        reason = " ".join(reason.split())[:300]
        try:
            if self.server.alive() if self.server is not None else self.admin.healthy():
                if self.adapters.needs_reload():
                    self.adapters.reload()
                return
            if self.server is None:
                raise InfraFailure(f"the vLLM server at {self.sampler.base_url} is not answering ({reason}); "
                                   f"it was given by sampler.vllm.base_url, so sera cannot restart it")
            if self.restarts >= self.max_restarts:
                raise InfraFailure(f"the vLLM server is down ({reason}) and no restart is left "
                                   f"(sampler.vllm.restarts={self.max_restarts}); see its log {self.server.log_path}")
            self.restarts += 1
            self.server.restart(self.start_timeout_s)
            self.asleep = False  # a fresh server starts awake
            self.adapters.reload()
        except VLLMServerError as exc:
            raise InfraFailure(f"restarting the vLLM server failed: {exc}") from None
        except AdminError as exc:
            raise InfraFailure(f"the vLLM server did not take the adapter back after recovering: {exc}; "
                               f"{self.where()}") from None

    def before_update(self) -> None:
        """With sleep mode, put the server to sleep (the learner gets the GPU memory; the sync wakes
        it); otherwise nothing: the server keeps serving the current adapter until the sync. A
        server that refuses is an `InfraFailure` (nothing of the round is trained yet)."""
        if not self.sleeps:
            return
        try:
            self.admin.sleep(1)
        except AdminError as exc:
            raise InfraFailure(f"sampler.vllm.sleep_during_update: {exc}; {self.where()}") from None
        self.asleep = True

    def _wake(self) -> None:
        if self.asleep:
            self.admin.wake_up()
            self.asleep = False

    @property
    def samples_during_update(self) -> bool:
        """The server serves the current weights until the sync, unless it sleeps during the update."""
        return not self.sleeps

    def close(self) -> None:
        """Close the HTTP client and stop a started server."""
        try:
            self.policy.close_now()
        finally:
            if self.server is not None:
                self.server.stop()


def open_vllm_backend(settings: VllmSettings, out: Path, tokenizer: Any, in_flight: Callable[[], int],
                      base_dir: Path | None) -> VllmBackend:
    """Start the server of `settings` serving `base_dir` (or reach the one at `settings.base_url`,
    which must serve the learner's base model: the canary checks) and return the backend; its
    first adapter is loaded by the run's first `sync`. `in_flight()` counts the sampler calls
    running (none may during a sync). `ServingError` when the server cannot start or does not answer."""
    v = settings
    server = None
    if v.base_url is None and v.sleep_during_update and not torch.cuda.is_available():
        raise ServingError("sampler.vllm.sleep_during_update: vLLM's sleep mode needs a GPU server (CUDA or ROCm), and "
                           "the server sera would start here runs on the CPU; set it to false")
    if v.base_url is None:
        assert base_dir is not None, "a started server needs serving_base's folder"
        server = VLLMServer(
            python=v.python, model_dir=base_dir.resolve(), served_name=SERVED_BASE, dtype=v.dtype,
            kv_cache_gib=v.kv_cache_gib, max_model_len=v.max_model_len,
            lora=None if v.full_sync else LoraServing(max_rank=lora_rank_limit(v.lora_rank), max_loras=2),
            cpu=not torch.cuda.is_available(), prefix_caching=True, extra_args=tuple(v.extra_args),
            sleep_mode=v.sleep_during_update,
            extra_env={"VLLM_SERVER_DEV_MODE": "1"} if v.full_sync == "reload" or v.sleep_during_update else {},
            log_path=(out / v.log_name).resolve(),
        )
        try:
            server.start(v.start_timeout_s)
        except VLLMServerError as exc:
            raise ServingError(f"sampler.backend=vllm: {exc}") from None
    try:
        return _backend(v, out, tokenizer, in_flight, server)
    except BaseException:
        if server is not None:
            server.stop()
        raise


def vllm_sampler(base_url: str, tokenizer: Any, request_timeout_s: float, model: str = SERVED_BASE) -> OpenAISampler:
    """The HTTP sampler training uses against a vLLM server at `base_url` (the driver's and every
    Ray rollout worker's): token ids and log-probs required, `request_timeout_s` per attempt, two
    retries; `model` is the served name it asks for until routed elsewhere."""
    return OpenAISampler(
        base_url, model, tokenizer=tokenizer, require_token_ids=True,
        http=HttpSettings(request_timeout_s=request_timeout_s, total_timeout_s=3 * request_timeout_s,
                          max_retries=2, backoff_s=(1.0, 4.0)),
    )


def _backend(v: VllmSettings, out: Path, tokenizer: Any, in_flight: Callable[[], int],
             server: VLLMServer | None) -> VllmBackend:
    base_url = server.base_url if server is not None else str(v.base_url)
    admin = AdapterAdmin(base_url)
    if server is None and not admin.healthy():
        raise ServingError(f"sampler.vllm.base_url={base_url}: no vLLM server answers {admin.root}/health "
                           f"(start one with --enable-lora, or leave base_url null so sera starts one; {SETUP_HINT})")
    sampler = vllm_sampler(base_url, tokenizer, v.request_timeout_s)
    adapters: VLLMAdapterSync | VLLMWeightsSync
    if v.full_sync is None:
        adapters = VLLMAdapterSync(admin=admin, sampler=None, route=lambda name: setattr(sampler, "model", name),
                                   folder=out / ADAPTERS_DIR, bound=v.canary_bound, in_flight=in_flight)
    else:
        try:
            adapters = VLLMWeightsSync(admin=admin, server=server, sampler=None, folder=out / WEIGHTS_DIR,
                                       mode=v.full_sync, bound=v.canary_bound, start_timeout_s=v.start_timeout_s,
                                       in_flight=in_flight, started_on_base=server is not None)  # type: ignore[arg-type]
        except SyncError as exc:
            raise ServingError(str(exc)) from None
    backend = VllmBackend(sampler=sampler, adapters=adapters, server=server, max_restarts=v.restarts,
                          start_timeout_s=v.start_timeout_s, sleeps=v.sleep_during_update)
    adapters.sampler = backend.policy  # the canary goes through the routed sampler, on its own loop
    return backend


__all__ = ["SAMPLER_BASE_DIR", "SERVED_BASE", "SERVER_LOG", "VllmBackend", "VllmSettings", "open_vllm_backend",
           "server_log_name", "serving_base", "vllm_sampler"]
