"""`sera sft` stopped by SIGINT/SIGTERM or killed with SIGKILL resumes (`--resume`) to exactly the
run it would have been: the same batches in the same order, the same losses, the same weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from sera.checkpoints.store import load_latest
from sera.cli import app
from sera.train import sft as sft_module
from sera.train.config import load_config
from sera.train.run_dir import CKPT_DIR, TrainError
from sera.train.sft import run_sft

CONFIG = "configs/letters/rao.yaml"
KEYS = ["sft.train_tasks=8", "sft.val_tasks=3", "sft.epochs=3", "sft.batch_datums=2", "optimizer.lr=1e-3", "seed=3"]
TIMING = {"tokens_per_s", "seconds", "time/epoch", "time/demonstrations"}
"""Metrics fields that measure time: they differ between any two runs."""


def _quiet(_: str) -> None:
    pass


def _lines(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(load_latest(out / CKPT_DIR).file("learner.pt"), weights_only=True)["weights"]


def _assert_same_run(a: Path, b: Path) -> None:
    assert _lines(a) == _lines(b)
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), "the final weights differ"


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sft_straight") / "run"
    result = run_sft(load_config(CONFIG, overrides=KEYS), out, log=_quiet)
    assert result.stopped_by is None and result.steps >= 9, "the test needs several batches per epoch"
    return out


def _signal_after(monkeypatch: pytest.MonkeyPatch, steps: int, signum: int) -> None:
    """Make the run receive `signum` once the learner has taken `steps` steps (in-process)."""
    real = sft_module.stop_on_signals

    @contextmanager
    def stop_after():
        with real() as received:
            original = sft_module.TorchLearner.train_step

            def counting(self, *args, **kwargs):
                stats = original(self, *args, **kwargs)
                if self.steps == steps:
                    received.append(signum)
                return stats

            monkeypatch.setattr(sft_module.TorchLearner, "train_step", counting)
            try:
                yield received
            finally:
                monkeypatch.setattr(sft_module.TorchLearner, "train_step", original)

    monkeypatch.setattr(sft_module, "stop_on_signals", stop_after)


@pytest.mark.parametrize("steps", [1, 3, 5], ids=["first-epoch", "epoch-end", "mid-epoch-2"])
def test_a_stopped_run_resumes_to_the_uninterrupted_one(straight: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       steps: int) -> None:
    out = tmp_path / "run"
    _signal_after(monkeypatch, steps, signal.SIGTERM)
    stopped = run_sft(load_config(CONFIG, overrides=KEYS), out, log=_quiet)
    assert stopped.stopped_by == "SIGTERM" and stopped.steps == steps
    assert json.loads((stopped.checkpoint / "state.json").read_text())["steps"] == steps
    monkeypatch.undo()
    logged: list[str] = []
    resumed = run_sft(None, out, resume=True, log=logged.append)
    assert resumed.stopped_by is None and any(f"resumed {out} at epoch" in m and f"step {steps}" in m for m in logged)
    _assert_same_run(out, straight)


def test_a_finished_run_resumed_changes_nothing(straight: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    import shutil

    shutil.copytree(straight, out)
    before = _lines(out)
    result = run_sft(None, out, resume=True, log=_quiet)
    assert result.stopped_by is None and _lines(out) == before
    _assert_same_run(out, straight)


def test_resume_refuses_a_changed_config_and_a_folder_without_a_run(straight: Path, tmp_path: Path) -> None:
    changed = load_config(CONFIG, overrides=[*KEYS[:-1], "seed=4"])
    with pytest.raises(TrainError, match="config differs .* seed"):
        run_sft(changed, straight, resume=True, log=_quiet)
    with pytest.raises(TrainError, match="holds no run to resume"):
        run_sft(None, tmp_path / "empty", resume=True, log=_quiet)


def _sera_sft(*args: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "sera.cli", "sft", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_train_lines(out: Path, process: subprocess.Popen, n: int) -> None:
    deadline = time.monotonic() + 240
    while True:
        lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
        if sum('"kind": "train"' in line for line in lines) >= n:
            return
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the run never trained"
        time.sleep(0.005)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_real_sera_sft_process_stopped_or_killed_resumes_exactly(straight: Path, tmp_path: Path, signum: int) -> None:
    out = tmp_path / "run"
    process = _sera_sft("--config", CONFIG, "--out", str(out), *KEYS, "sft.checkpoint_every=1")
    try:
        _wait_for_train_lines(out, process, 2)
        process.send_signal(signum)
        output, _ = process.communicate(timeout=120)
    finally:
        process.kill()
        process.wait(10)
    if signum == signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL, output
    else:
        assert process.returncode == 128 + signum, output
        assert f"{signal.Signals(signum).name}: checkpointed at epoch" in output and "sera sft --resume" in output
    resumed = CliRunner().invoke(app, ["sft", "--resume", "--out", str(out)])
    assert resumed.exit_code == 0, resumed.output
    _assert_same_run(out, straight)
