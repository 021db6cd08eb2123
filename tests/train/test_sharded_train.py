"""`sera train` with `model.fsdp_processes: 2`: the loop on rank 0, one follower, gloo on CPU.

Users get the same run as one process (same trees, the same update up to summation order),
checkpoints they can resume, a one-line error when a follower dies, and a vLLM server (the fake)
that takes the gathered full weights after every update. The comparison runs use
the tiny preset with the scripted expert on tree 0 (as tests/train/test_loop.py), so that the
groups have variance and every step updates.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sera.checkpoints.store import load_latest
from sera.policy.model_registry import load_registered
from sera.serving.vllm_server import VLLMServer
from sera.train import loop
from sera.train.config import load_config
from sera.train.learner import LearnerConfig, TorchLearner
from sera.train.sharded_learner import LearnerGroupError, ShardedLearner
from .test_fsdp_learner import _datums
from .test_loop import CONFIG, SMALL, _mixed, metrics, train, weights  # noqa: F401 - _mixed: the expert on tree 0
from .test_loop_infra import lines, trees

pytestmark = pytest.mark.slow  # two learner processes: `make test-slow` (and CI), not `make test`

LOSS_RTOL = 1e-5
"""Relative tolerance on step 0's loss and gradient norm: the sharded step sums the same
per-token gradients in another order (test_fsdp_learner.py)."""
WEIGHT_ATOL = 1e-3
"""Largest weight difference after two steps (step 1 re-samples TextCraft, which is equal in
distribution only: test_loop.py's resume tolerance)."""


def test_two_process_run_matches_the_single_process_run_and_resumes(tmp_path: Path) -> None:
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    train("--config", CONFIG, "--preset", "tiny", "--out", str(single), "max_steps=2", *SMALL)
    train("--config", CONFIG, "--preset", "tiny", "--out", str(sharded), "max_steps=1", "model.fsdp_processes=2", *SMALL)
    train("--resume", str(sharded), "max_steps=2")  # the followers restore from rank 0's checkpoint

    a, b = metrics(single), metrics(sharded)
    assert [r["step"] for r in b] == [0, 1] and all(r["trained"] for r in b)
    for x, y in zip(a, b):
        assert (x["policy_version"], x["datums"], x["trained_tokens"]) == (y["policy_version"], y["datums"], y["trained_tokens"])
        assert y["sync/canary_gap"] < 1e-3  # the sampler's replica got the gathered weights
    assert b[0]["loss"] == pytest.approx(a[0]["loss"], rel=LOSS_RTOL)  # same trees, same update
    assert b[0]["grad_norm"] == pytest.approx(a[0]["grad_norm"], rel=LOSS_RTOL)
    wa, wb = weights(single), weights(sharded)
    assert wa.keys() == wb.keys()
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < WEIGHT_ATOL
    assert load_latest(sharded / loop.CKPT_DIR).read_json("state.json")["clock"]["version"] == 2


def _build_other_weights():
    """What a follower loads: the tiny architecture with other weights than rank 0's."""
    return load_registered("tiny", seed=1)


def test_a_dead_follower_is_a_one_line_error_not_a_hang() -> None:
    model, tokenizer = load_registered("tiny", seed=0)
    config = LearnerConfig(lr=1e-3, device="cpu")
    learner = ShardedLearner(model, tokenizer, config, 2, _build_other_weights)
    try:
        reference = TorchLearner(load_registered("tiny", seed=0)[0], config)
        step = learner.train_step(_datums(), "cispo")  # the followers started from rank 0's weights
        assert step.forward_backward.loss == pytest.approx(reference.train_step(_datums(), "cispo").forward_backward.loss,
                                                           rel=LOSS_RTOL)
        follower = learner._group.processes[0]
        os.kill(follower.pid, signal.SIGKILL)
        follower.join(timeout=10)
        with pytest.raises(LearnerGroupError, match=r"^learner rank 1 exited with code -9 before train_step$"):
            learner.train_step(_datums(), "cispo")
    finally:
        learner.close()


def test_a_sharded_learner_brings_a_vllm_server_its_full_weights_after_every_update(
        tmp_path: Path, fake_vllm_python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two FSDP2 ranks beside a vLLM server (the fake, restarted on each version's folder): the
    server samples every round at the round's version, its log-probabilities match the sharded
    learner's after every sync, and what it serves at the end is the checkpointed weights. Rank 0
    keeps no unsharded replica (only an in-process sampler needs one). The server, started on the
    base (version 0), is restarted once per update only."""
    out = tmp_path / "run"
    made = []
    make = loop.make_train_learner
    monkeypatch.setattr(loop, "make_train_learner", lambda *args: made.append(make(*args)) or made[-1])
    restarted_on = []
    restart = VLLMServer.restart
    monkeypatch.setattr(VLLMServer, "restart", lambda self, *a: restarted_on.append(self.model_dir.name) or restart(self, *a))
    cfg = load_config(CONFIG, preset="tiny", overrides=[
        *SMALL, "checkpoint.every=100", "max_steps=2", "model.finetune=full", "model.fsdp_processes=2", "sampler.backend=vllm",
        f"sampler.vllm.python={fake_vllm_python}", "sampler.vllm.full_sync=restart", "sampler.vllm.start_timeout_s=120"])
    result = loop.run_train(cfg, out, log=lambda line: None)
    got = lines(out)
    assert result.version == 2 and [line["policy_version"] for line in got] == [0, 1]
    assert isinstance(made[0], ShardedLearner) and made[0].replica is None
    assert restarted_on == ["v000001", "v000002"]
    assert all(line["trained"] and line["sync/canary_gap"] < 1e-3 for line in got)
    for line in got:
        versions = {s["policy_version"] for t in trees(out, line["step"]) for n in t["nodes"].values() for s in n["steps"]}
        assert versions == {line["policy_version"]}
    assert [p.name for p in (out / "weights").iterdir()] == ["v000002"]
    served = load_file(out / "weights" / "v000002" / "model.safetensors")
    trained = weights(out)
    assert served.keys() == trained.keys() and all(torch.equal(served[k], trained[k]) for k in served)
