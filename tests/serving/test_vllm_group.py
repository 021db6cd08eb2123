"""`VllmGroup.sync`: the version's folder is written once, every server loads it at the same
time, the learner is asked one call at a time, and one server's failure is raised after the
others have finished."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sera.serving.vllm_group import VllmGroup
from sera.serving.weight_sync import SyncError, SyncReport


class Learner:
    """Counts calls and notices two at once."""

    def __init__(self) -> None:
        self.saved: list[Path] = []
        self.running = 0
        self.overlapped = False
        self.lock = threading.Lock()

    def save_for_sampler(self, path: Path) -> None:
        self.saved.append(path)

    def sequence_logprobs(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        with self.lock:
            self.running += 1
            self.overlapped |= self.running > 1
        threading.Event().wait(0.05)
        with self.lock:
            self.running -= 1
        return [0.0] * len(completion_ids)


class Adapters:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, learner: Learner, version: int) -> Path:
        path = self.folder / f"v{version:06d}"
        learner.save_for_sampler(path)
        return path


class Server:
    """A backend whose load waits until every server of the group is loading (a restart each)."""

    def __init__(self, folder: Path, loading: threading.Barrier, fails: bool = False) -> None:
        self.adapters = Adapters(folder)
        self.loading = loading
        self.fails = fails
        self.loaded: list[Path | None] = []

    def sync(self, learner: Learner, version: int, saved: Path | None = None) -> SyncReport:
        self.loading.wait()  # a group that loads one server after another never gets past this
        if self.fails:
            raise SyncError("restarting the vLLM server failed: it exited")
        self.loaded.append(saved)
        learner.sequence_logprobs([1], [2, 3])
        return SyncReport(version=version, seconds=0.1, canary_gap=1e-4 * (len(self.loaded) + 1),
                          canary_mean_gap=1e-5, canary_tokens=2, load_s=0.1, canary_s=0.05)


def test_servers_load_the_one_written_folder_together_and_the_learner_answers_one_at_a_time(tmp_path: Path) -> None:
    loading = threading.Barrier(3, timeout=10)
    servers = [Server(tmp_path, loading) for _ in range(3)]
    learner = Learner()
    report = VllmGroup(servers).sync(learner, 4)  # type: ignore[arg-type]
    assert learner.saved == [tmp_path / "v000004"]
    assert [s.loaded for s in servers] == [[tmp_path / "v000004"]] * 3
    assert not learner.overlapped
    assert report.version == 4 and report.save_s is not None and report.load_s == 0.1


def test_one_failing_server_fails_the_sync_after_the_others_loaded(tmp_path: Path) -> None:
    loading = threading.Barrier(2, timeout=10)
    ok, failing = Server(tmp_path, loading), Server(tmp_path, loading, fails=True)
    with pytest.raises(SyncError, match="^restarting the vLLM server failed: it exited$"):
        VllmGroup([ok, failing]).sync(Learner(), 1)  # type: ignore[arg-type]
    assert ok.loaded == [tmp_path / "v000001"]
