"""The loop's round semantics on the letters world (fast, timing-free): policy versions on every
completion, zero-variance refill waves, periodic evaluation, the canary, and resume trimming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sera.policy.transformers_sampler import TransformersSampler
from sera.serving.weight_sync import CanaryError, SharedModuleSync
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.train import loop
from sera.train.config import load_config
from sera.train.learner import LearnerConfig, TorchLearner

CONFIG = "configs/letters/rao.yaml"


def run(out: Path, *overrides: str, resume: bool = False) -> list[dict]:
    cfg = load_config(CONFIG, overrides=["checkpoint.every=100", *overrides])
    loop.run_train(None if resume else cfg, out, resume=resume, log=lambda line: None)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def trees(out: Path, step: int) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "rollouts" / f"step_{step:05d}").glob("*.json"))]


def test_every_tree_and_completion_records_the_policy_version_that_sampled_it(tmp_path: Path) -> None:
    lines = run(tmp_path / "run", "max_steps=3")
    for line in lines:
        recorded = trees(tmp_path / "run", line["step"])
        assert {t["policy_version"] for t in recorded} == {line["policy_version"]}
        versions = {s["policy_version"] for t in recorded for n in t["nodes"].values() for s in n["steps"]}
        assert versions == {line["policy_version"]}
        assert line["sync/canary_gap"] <= 1e-3 if line["trained"] else True


def test_zero_variance_tasks_are_replaced_by_refill_waves(tmp_path: Path) -> None:
    # seed 11: the random model already solves some tasks in all 8 trees (zero variance).
    lines = run(tmp_path / "run", "max_steps=3", "seed=11", "steps.zero_variance=drop_refill", "steps.max_refill_waves=2")
    assert any(line["refill/waves"] > 0 for line in lines), [line["refill/waves"] for line in lines]
    for line in lines:
        assert len(line["tasks"]) == len(set(line["tasks"])) == line["refill/tasks_drawn"]
        assert len(trees(tmp_path / "run", line["step"])) == 8 * line["refill/tasks_drawn"]
        # Waves stop once 8 usable groups are there, or after two.
        assert line["refill/usable_groups"] >= 8 or line["refill/waves"] == 2
        if line["refill/waves"]:
            assert line["refill/tasks_drawn"] > 8
    # Kept (the letters world's own setting): one draw, whatever the variance.
    kept = run(tmp_path / "kept", "max_steps=3", "seed=11", "steps.max_refill_waves=2")
    assert all(line["refill/waves"] == 0 and line["refill/tasks_drawn"] == 8 for line in kept)


def test_periodic_evaluation_runs_through_the_harness_and_resume_drops_later_ones(tmp_path: Path) -> None:
    out = tmp_path / "run"
    lines = run(out, "max_steps=4", "eval.every=2", "eval.split=val", "eval.limit=6", "checkpoint.every=2")
    assert [("eval/success" in line) for line in lines] == [False, True, False, True]
    assert sorted(p.name for p in (out / "eval").iterdir()) == ["v000002", "v000004"]
    summary = json.loads((out / "eval" / "v000002" / "summary.json").read_text())
    assert summary["overall"]["tasks"] == 6 and lines[1]["eval/success"] == summary["overall"]["success_rate"]
    # A run that died after evaluating version 4 but before its checkpoint: the newest checkpoint
    # is version 4 here, so fake the death by removing it; resume must drop v000004 and redo it.
    ckpts = sorted((out / "checkpoints").glob("step_*"))
    latest = out / "checkpoints" / "latest"
    latest.write_text(ckpts[-2].name + "\n")
    (out / "eval" / "v000004" / "marker").write_text("from the dead run")
    again = run(out, resume=True)
    assert [line["step"] for line in again] == [0, 1, 2, 3]
    assert not (out / "eval" / "v000004" / "marker").exists()
    assert again[3]["eval/success"] == lines[3]["eval/success"]


def test_a_sampler_that_does_not_run_the_trained_weights_fails_the_canary() -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=1)
    learner = TorchLearner(model, LearnerConfig(lr=1e-3, pad_id=tokenizer.pad_token_id), tokenizer=tokenizer)
    shared = TransformersSampler(learner.model, tokenizer)
    report = SharedModuleSync(shared, lambda: 0).sync(learner, 0)
    assert report.canary_gap <= 1e-3 and report.canary_tokens > 0
    other_model, _ = tiny_model_and_tokenizer(seed=2)
    stale = TransformersSampler(other_model, tokenizer)
    with pytest.raises(CanaryError, match="policy version 3.*bound 0.001"):
        SharedModuleSync(stale, lambda: 0).sync(learner, 3)
    with pytest.raises(RuntimeError, match="2 sampler calls in flight"):
        SharedModuleSync(shared, lambda: 2).sync(learner, 1)


def test_metrics_lines_carry_tree_and_batch_metrics_and_reach_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    lines = run(out, "max_steps=2", "logging.tensorboard=true")
    for line in lines:
        assert {"success", "success/easy", "calls/act", "tokens/act/completion", "advantage/mean",
                "batch/trained_tokens", "peak_rss_bytes", "time/sync"} <= set(line)
        assert line["calls/act"] == 64  # 8 tasks x K=8, one call each
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == [0, 1]
    assert [e.value for e in events.Scalars("loss")] == pytest.approx([line["loss"] for line in lines])


def test_resume_names_a_corrupt_checkpoint_and_falls_back_only_when_asked(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sera.cli import app

    out = tmp_path / "run"
    run(out, "max_steps=4", "checkpoint.every=2", "checkpoint.keep_last=2")
    newest = sorted((out / "checkpoints").glob("step_*"))[-1]
    (newest / "learner.pt").write_bytes(b"torn")
    result = CliRunner().invoke(app, ["train", "--resume", str(out), "max_steps=6"])
    assert result.exit_code == 2
    assert f"{newest.name}/learner.pt" in result.output and "--fallback" in result.output
    result = CliRunner().invoke(app, ["train", "--resume", str(out), "max_steps=6", "--fallback"])
    assert result.exit_code == 0, result.output
    assert "falling back to step_000002" in result.output
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(6)) and lines[-1]["policy_version"] == 5


def test_a_deadline_stops_before_a_step_that_would_overrun_and_checkpoints(tmp_path: Path) -> None:
    import time

    cfg = load_config(CONFIG, overrides=["checkpoint.every=100", "max_steps=50"])
    out = tmp_path / "run"
    result = loop.run_train(cfg, out, log=lambda line: None, deadline=time.monotonic() + 2.0)
    assert result.stopped_by == "deadline"
    assert 1 <= result.steps < 50
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == result.steps
    assert (out / "checkpoints" / "latest").read_text().strip() == f"step_{result.steps:06d}"
    # A deadline already past starts no step at all.
    again = loop.run_train(None, out, resume=True, log=lambda line: None, deadline=time.monotonic() - 1)
    assert again.stopped_by == "deadline" and again.steps == result.steps


def test_the_inprocess_backend_takes_its_prefix_cache_budget_and_frees_it_before_an_update(tmp_path: Path) -> None:
    import asyncio

    from sera.runtime.policy import SamplingParams
    from sera.train.sampler_setup import open_backend
    from sera.train.sampling import InFlight
    from sera.types import Message

    cfg = load_config(CONFIG, overrides=["sampler.prefix_cache_gib=0.5", "rollout.concurrency=3"])
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    learner = TorchLearner(model, LearnerConfig(), tokenizer=tokenizer)
    backend = open_backend(cfg, tmp_path, learner, tokenizer, InFlight(), None)
    try:
        policy = backend.policy
        assert policy.prefix_cache.budget_bytes == 1024**3 // 2 and policy._engine.max_rows == 6
        prompt = [Message(role="system", content="You spell letters. " * 20), Message(role="user", content="a")]
        asyncio.run(policy(prompt, SamplingParams(temperature=0.0, max_tokens=4)))
        assert policy.prefix_cache.nbytes > 0
        backend.before_update()
        assert policy.prefix_cache.nbytes == 0
    finally:
        backend.close()


def test_a_bf16_sampling_copy_serves_the_learners_weights_only_after_each_sync() -> None:
    """`sampler.weights: bf16_copy`: the sampler runs its own bf16 module; the sync copies the
    learner's updated masters into it, and the canary (bf16 bound) passes; an unsynced copy is stale."""
    import torch

    from sera.serving.backends import open_inprocess_backend
    from sera.serving.weight_sync import BF16_BOUND

    model, tokenizer = tiny_model_and_tokenizer(seed=1)
    learner = TorchLearner(model, LearnerConfig(lr=1e-3, pad_id=tokenizer.pad_token_id), tokenizer=tokenizer)
    backend = open_inprocess_backend(learner.model, tokenizer, max_batch_size=2, prefix_cache_bytes=0, bound=BF16_BOUND,
                                     in_flight=lambda: 0, bf16_copy=True)
    sampled = backend.policy.model
    assert sampled is not learner.model and {p.dtype for p in sampled.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}  # the masters stay fp32
    first = backend.sync(learner, 0)
    assert first.canary_gap <= BF16_BOUND and first.load_s is not None
    with torch.no_grad():
        for param in learner.model.parameters():
            param.add_(torch.randn_like(param) * 0.5)  # an "update" the copy has not seen
    canary_only = SharedModuleSync(backend.policy, lambda: 0, BF16_BOUND)  # no copy: the sampler's stale weights
    with pytest.raises(CanaryError, match="policy version 1"):
        canary_only.sync(learner, 1)
    report = backend.sync(learner, 1)
    assert report.canary_gap <= BF16_BOUND
    name, param = next(iter(learner.model.named_parameters()))
    assert torch.equal(dict(sampled.named_parameters())[name], param.to(torch.bfloat16))
    backend.close()
