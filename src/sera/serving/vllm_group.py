"""Several vLLM servers behind the Ray rollout workers (`sampler.vllm.servers: N`, or a list of
URLs in `sampler.vllm.base_url`).

Each server is an ordinary `VllmBackend` (started by sera or given, LoRA or full weights, its own
restarts and canary); `VllmGroup` keeps them on one policy version:

- `sync(learner, version)`: the version's folder is written once; then every server loads that
  same folder and runs its own canary, all at once (full weights with `full_sync: restart` cost
  a server start each, which would add up one after another). The learner's side of the
  canaries runs one at a time (a sharded learner's forward is a collective of all its ranks).
  The report is the first server's, with the worst canary gap of all, the group's wall time,
  and the slowest load and canary.
- Worker i of `ray.workers` sends its requests to server i mod N (`base_urls`, `served_name`).
- `recover`, `before_update`, `close`: every server's own; a healthy server holding its adapter
  is left alone, so one dead server is restarted without touching the others.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sera.serving.vllm_backend import VllmBackend, VllmSettings, open_vllm_backend
from sera.serving.weight_sync import SyncReport


@dataclass
class VllmGroup:
    """Several vLLM servers serving the same policy version (module docstring)."""

    backends: list[VllmBackend]
    """One backend per server, in the order the workers are spread over them."""

    policy = None
    """No driver-side sampler: only Ray rollout workers sample from several servers."""

    @property
    def base_urls(self) -> list[str]:
        """Each server's `/v1` root, in order."""
        return [backend.sampler.base_url for backend in self.backends]

    def served_name(self, server: int) -> str:
        """The name server `server` serves the current version under."""
        return self.backends[server].served_name()

    @property
    def restarts(self) -> int:
        """Restarts of the started servers in this run, all together."""
        return sum(backend.restarts for backend in self.backends)

    @property
    def samples_during_update(self) -> bool:
        """Whether the servers keep serving through the update (not when they sleep through it)."""
        return all(backend.samples_during_update for backend in self.backends)

    def sync(self, learner: Any, version: int) -> SyncReport:
        """Every server to `version` (module docstring); the first failure is raised once every
        server's sync has ended."""
        start = time.perf_counter()
        saved = self.backends[0].adapters.write(learner, version)  # failures: `SyncError`s naming the folder
        written = time.perf_counter()
        one_at_a_time = _OneCallAtATime(learner)
        with ThreadPoolExecutor(max_workers=len(self.backends), thread_name_prefix="sera-vllm-sync") as pool:
            futures = [pool.submit(backend.sync, one_at_a_time, version, saved) for backend in self.backends]
        failures = [f.exception() for f in futures if f.exception() is not None]
        if failures:
            raise failures[0]
        reports = [f.result() for f in futures]
        worst = max(reports, key=lambda r: r.canary_gap)
        return replace(reports[0], seconds=time.perf_counter() - start, canary_gap=worst.canary_gap,
                       canary_mean_gap=max(r.canary_mean_gap for r in reports),
                       save_s=written - start if saved is not None else None,
                       load_s=_slowest(r.load_s for r in reports), canary_s=_slowest(r.canary_s for r in reports))

    def recover(self, reason: str) -> None:
        """Each server's recovery (`VllmBackend.recover`): a dead one restarted, a lost adapter
        reloaded, a healthy one left alone."""
        for backend in self.backends:
            backend.recover(reason)

    def before_update(self) -> None:
        """Each server's (sleep mode puts every one to sleep)."""
        for backend in self.backends:
            backend.before_update()

    def where(self) -> str:
        """Where every server's log is."""
        return "; ".join(backend.where() for backend in self.backends)

    def close(self) -> None:
        """Close every server's client and stop the started ones (all of them, whatever fails)."""
        errors: list[BaseException] = []
        for backend in self.backends:
            try:
                backend.close()
            except Exception as exc:  # noqa: BLE001 - the others are still stopped; the first is raised
                errors.append(exc)
        if errors:
            raise errors[0]


def _slowest(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


class _OneCallAtATime:
    """The learner as the servers' concurrent syncs see it (what a sync calls), one call at a time."""

    def __init__(self, learner: Any) -> None:
        self._learner = learner
        self._lock = threading.Lock()

    def sequence_logprobs(self, prompt_ids: list[int], completion_ids: list[int]) -> Any:
        with self._lock:
            return self._learner.sequence_logprobs(prompt_ids, completion_ids)

    def save_for_sampler(self, path: Path) -> None:
        with self._lock:
            self._learner.save_for_sampler(path)


def open_vllm_group(settings: list[VllmSettings], out: Path, tokenizer: Any, in_flight: Callable[[], int],
                    base_dir: Path | None) -> VllmGroup:
    """Start (or reach) each server of `settings`, one after another (`open_vllm_backend`);
    a failure stops the ones already started."""
    backends: list[VllmBackend] = []
    try:
        for one in settings:
            backends.append(open_vllm_backend(one, out, tokenizer, in_flight, base_dir))
    except BaseException:
        VllmGroup(backends).close()
        raise
    return VllmGroup(backends)


__all__ = ["VllmGroup", "open_vllm_group"]
