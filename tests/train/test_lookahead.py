"""Sampling the next round during the update (`steps.max_offpolicy_versions`, `sera.train.lookahead`).

Users get: with N >= 1 each round after the first is sampled while the learner steps, by the
version before, and trains one version behind, recorded per step and per datum; with the
weights held still (lr 1e-30: AdamW moves no fp32 weight) the run samples exactly the trees of
the on-policy run; a run stopped while a round is ahead drops it and a resume samples it again;
stage boundaries and the last step are never sampled ahead; a sampler that reads the learner's
own weights is refused in one line.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from sera.train import loop
from sera.train.config import load_config
from sera.train.lookahead import Lookahead, may_sample_ahead
from sera.train.run_dir import TrainError
from sera.train.schedule import StageSchedule

LETTERS = "configs/letters/rao.yaml"
STILL = ["seed=7", "optimizer.lr=1e-30", "sampler.weights=copy"]


def _letters(*extra: str):
    return load_config(LETTERS, preset="tiny", overrides=["max_steps=3", *STILL, *extra])


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _trees(run: Path) -> dict[str, list]:
    out = {}
    for path in sorted((run / "rollouts").rglob("*.json")):
        tree = json.loads(path.read_text())
        out[str(path.relative_to(run))] = [step["completion_token_ids"] for node in tree["nodes"].values()
                                           for step in node["steps"]]
    return out


def _versions(run: Path, step: int) -> set[int]:
    return {json.loads(p.read_text())["policy_version"] for p in (run / "rollouts" / f"step_{step:05d}").glob("*.json")}


def test_rounds_ahead_train_one_version_behind_and_sample_the_same_trees(tmp_path: Path) -> None:
    on, ahead = tmp_path / "on", tmp_path / "ahead"
    loop.run_train(_letters(), on)
    loop.run_train(_letters("steps.max_offpolicy_versions=1"), ahead)
    a, b = _records(on), _records(ahead)
    assert [r["trained"] for r in b] == [True, True, True]  # every step updates, so every later round is ahead
    assert [r["offpolicy/ahead"] for r in a] == [0, 0, 0] and [r["offpolicy/lag"] for r in a] == [0, 0, 0]
    assert [r["offpolicy/ahead"] for r in b] == [0, 1, 1]
    assert [r["offpolicy/lag"] for r in b] == [0, 1, 1]
    assert [r["offpolicy/datum_lag_max"] for r in b] == [0, 1, 1]  # recorded per datum
    assert [_versions(ahead, s) for s in range(3)] == [{0}, {0}, {1}]  # sampled by the version before
    assert [_versions(on, s) for s in range(3)] == [{0}, {1}, {2}]
    # The weights never move, so sampling ahead must not change a single tree or count.
    assert _trees(on) == _trees(ahead)
    for x, y in zip(a, b):
        for key in ("datums", "trainable_datums", "root_success"):
            assert x[key] == y[key], key
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-6)
    # Calls are counted when made: step 0's line already counts round 1's, sampled during its update.
    assert [r["sampler_calls"] for r in a] == [64, 128, 192] and [r["sampler_calls"] for r in b] == [128, 192, 192]


def test_a_run_stopped_with_a_round_ahead_drops_it_and_the_resume_samples_it_again(tmp_path: Path) -> None:
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    loop.run_train(_letters("steps.max_offpolicy_versions=1"), straight)

    calls = {"n": 0}
    lock = threading.Lock()

    def interrupt_in_round_one(policy, task, k):
        async def call(messages, sampling):
            with lock:
                calls["n"] += 1
                if calls["n"] == 65:  # the first call of round 1 (64 one-call trees a round), sampled ahead
                    os.kill(os.getpid(), signal.SIGINT)
            return await policy(messages, sampling)
        return call

    result = loop.run_train(_letters("steps.max_offpolicy_versions=1"), stopped, tree_policy=interrupt_in_round_one)
    assert result.stopped_by == "SIGINT" and result.steps == 1  # round 1 was dropped, not counted
    assert not (stopped / "rollouts" / "step_00001").exists()
    assert _records(stopped)[-1]["step"] == 0

    resumed = loop.run_train(None, stopped, resume=True)
    assert resumed.steps == 3 and resumed.stopped_by is None
    records = _records(stopped)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert records[1]["offpolicy/ahead"] == 0  # sampled again after the resume, by the version it trains
    assert _trees(stopped) == _trees(straight)  # the weights stand still: the same trees either way


def test_a_sampler_over_the_learners_own_weights_is_refused(tmp_path: Path) -> None:
    cfg = load_config(LETTERS, preset="tiny", overrides=["max_steps=1", "sampler.weights=shared",
                                                          "steps.max_offpolicy_versions=1"])
    with pytest.raises(TrainError, match=r"max_offpolicy_versions=1 .*sampler.weights: copy"):
        loop.run_train(cfg, tmp_path / "run")


def test_never_ahead_across_a_stage_boundary_or_past_the_last_step() -> None:
    schedule = StageSchedule.parse("execution:2,delegation:1")
    assert may_sample_ahead(schedule, 0, max_steps=10)       # 0 -> 1: execution both
    assert not may_sample_ahead(schedule, 1, max_steps=10)   # 1 -> 2: execution -> delegation
    assert not may_sample_ahead(schedule, 2, max_steps=10)   # 2 -> 3: delegation -> execution
    assert not may_sample_ahead(schedule, 3, max_steps=4)    # version 4 is never sampled
    assert not may_sample_ahead(StageSchedule.parse("execution:2", cycles=1), 1, max_steps=10)  # schedule ends


def test_admission_drops_a_round_sampled_for_another_step_stage_or_too_long_ago() -> None:
    ahead: Lookahead[str] = Lookahead(max_versions=1)
    try:
        for step, cursor, stage, version in ((3, 10, "execution", 5), (2, 11, "execution", 5),
                                             (2, 10, "delegation", 5), (2, 10, "execution", 7)):
            ahead.start(2, 10, "execution", 5, lambda: "round")
            assert ahead.take(step, cursor, stage, version) is None
        assert ahead.dropped == 4
        ahead.start(2, 10, "execution", 5, lambda: "round")
        assert ahead.take(2, 10, "execution", 6) == ("round", 5)

        def fails() -> str:
            raise RuntimeError("sampler down")

        ahead.start(2, 10, "execution", 5, fails)
        with pytest.raises(RuntimeError, match="sampler down"):  # raised where the round is taken
            ahead.take(2, 10, "execution", 6)
        ahead.start(2, 10, "execution", 5, fails)
        assert ahead.take(3, 10, "execution", 6) is None  # a dropped round's failure concerns no one
        assert ahead.dropped == 5
        with pytest.raises(ValueError, match="max_offpolicy_versions >= 1"):
            Lookahead(0)
    finally:
        ahead.close()


def test_auto_weights_give_an_fp32_sampler_its_own_copy_when_rounds_are_sampled_ahead() -> None:
    from sera.train.sampler_setup import samples_from_own_copy

    ahead = load_config(LETTERS, preset="tiny", overrides=["sampler.weights=auto", "steps.max_offpolicy_versions=1",
                                                            "model.dtype=fp32"])
    assert samples_from_own_copy(ahead)  # the main job on a CPU without bf16 is not refused
    on_policy = load_config(LETTERS, preset="tiny", overrides=["sampler.weights=auto", "model.dtype=fp32"])
    assert not samples_from_own_copy(on_policy)  # nothing copied when nothing samples during the update


def test_rounds_ahead_through_the_vllm_backend_ask_for_the_adapter_they_were_sampled_with(tmp_path: Path) -> None:
    from sera.testing.fake_vllm import FakeVLLM
    from sera.testing.tiny import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=7)  # the learner's base (the config's seed)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    fake = FakeVLLM(tmp_path / "base", "base", max_lora_rank=8).start()
    out = tmp_path / "run"
    try:
        loop.run_train(_letters("steps.max_offpolicy_versions=1", "model.finetune=lora", "model.lora_rank=8",
                                "model.lora_alpha=16", "sampler.backend=vllm", f"sampler.vllm.base_url={fake.base_url}"),
                       out, log=lambda line: None)
    finally:
        fake.vanish()
    records = _records(out)
    assert [r["offpolicy/ahead"] for r in records] == [0, 1, 1]
    assert [r["offpolicy/datum_lag_max"] for r in records] == [0, 1, 1]
    assert [_versions(out, s) for s in range(3)] == [{0}, {0}, {1}]
    assert [r["sync/adapter"] for r in records] == ["policy-v000001", "policy-v000002", "policy-v000003"]
    # Rounds 1 and 2 were sampled during updates 0 and 1, from the adapter served then; each
    # sync waited for that round (a sync needs an idle sampler) and its canary asked once.
    asked = [name for route, name in fake.requests]
    assert asked.count("policy-v000000") == 64 * 2 + 1 and asked.count("policy-v000001") == 64 + 1
    assert asked.count("policy-v000002") == 1 and asked.count("policy-v000003") == 1
