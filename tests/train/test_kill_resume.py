"""A real `sera train` process killed with SIGKILL in the middle of a step resumes to exactly the
run it would have been: the same stages, tasks and losses per step and the same final weights.

The letters world is used because its trees do not depend on timing: one call per agent, and all
of a step's calls reach the in-process sampler in one batch. (TextCraft's concurrent children
share one world, so the order in which their actions interleave, and thus a re-sampled tree,
depends on wall-clock timing; see docs/training.md.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sera.train import loop
from sera.checkpoints.store import load_latest

pytestmark = pytest.mark.slow  # killed and resumed runs: `make test-slow` (and CI), not `make test`

CONFIG = "configs/letters/rao.yaml"
ARGS = ["max_steps=8", "checkpoint.every=3", "checkpoint.keep_last=2", "seed=5"]


def sera_train(*args: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "sera.cli", "train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen) -> str:
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return output


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(load_latest(run / loop.CKPT_DIR).file("learner.pt"), weights_only=True)["weights"]


def test_sigkill_mid_step_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    finish(sera_train("--config", CONFIG, "--out", str(straight), *ARGS))

    process = sera_train("--config", CONFIG, "--out", str(killed), *ARGS)
    # Wait until step 4 has saved its trees (sampled, not yet trained), then kill: the newest
    # checkpoint is version 3, and step 4's trees and any later lines must be thrown away.
    deadline = time.monotonic() + 240
    while not (killed / "rollouts" / "step_00004").exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the run never reached step 4"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert load_latest(killed / loop.CKPT_DIR).step < 8

    output = finish(sera_train("--resume", str(killed)))
    assert "resumed" in output

    a, b = metrics(straight), metrics(killed)
    assert [r["step"] for r in b] == [r["step"] for r in a] == list(range(len(a)))
    for x, y in zip(a, b):
        assert (x["stage"], x["policy_version"], x["tasks"], x["trained"], x["trainable_datums"]) == (
            y["stage"], y["policy_version"], y["tasks"], y["trained"], y["trainable_datums"]), x["step"]
        if x["trained"]:
            assert abs(x["loss"] - y["loss"]) <= 1e-6 * max(1.0, abs(x["loss"])), (x["step"], x["loss"], y["loss"])
    assert sorted(p.name for p in (killed / "rollouts").iterdir()) == sorted(p.name for p in (straight / "rollouts").iterdir())
    wa, wb = final_weights(straight), final_weights(killed)
    assert wa.keys() == wb.keys()
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= 1e-6, f"final weights differ by up to {worst}"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_checkpoints_the_step_then_exits_and_resume_finishes(tmp_path: Path, signum: int) -> None:
    run = tmp_path / "run"
    process = sera_train("--config", CONFIG, "--out", str(run), "max_steps=40", "checkpoint.every=100", "seed=5")
    deadline = time.monotonic() + 240
    while not (run / "metrics.jsonl").exists() or len(metrics(run)) < 2:
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the run never reached step 2"
        time.sleep(0.01)
    process.send_signal(signum)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, output
    assert f"{signal.Signals(signum).name}: checkpointed at step" in output and f"sera train --resume {run}" in output
    done = metrics(run)
    ckpt = load_latest(run / loop.CKPT_DIR)
    assert ckpt is not None and ckpt.step == len(done) < 40  # the step in progress finished and was saved
    finish(sera_train("--resume", str(run), "max_steps=12"))
    assert [r["step"] for r in metrics(run)] == list(range(len(metrics(run))))
    assert metrics(run)[-1]["policy_version"] + 1 == 12
