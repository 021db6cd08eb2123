"""Infrastructure failures are never trained on (`sera.train.infra`), and the vLLM backend in the
loop, on the letters world with the tiny model:

- in process: a round whose sampler calls failed is sampled again with the same seeds and trains
  exactly what a clean run trains; a failure that persists stops the run with one line and the
  completed steps checkpointed;
- vLLM (the fake server of `sera.testing.fake_vllm`, started by `VLLMServer` as vLLM would be):
  every version is a hot-loaded adapter that sampled its own round; a server killed mid-round is
  restarted once and the run completes; a server sera did not start that vanishes, or an adapter
  the server refuses after an update, stops the run with one line and the work checkpointed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from sera.checkpoints.store import load_latest
from sera.policy.errors import SamplerError
from sera.serving.errors import InfraFailure, ServingError
from sera.serving.vllm_server import http_ok
from sera.testing.fake_vllm import FakeVLLM
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.train import loop
from sera.train.config import ConfigError, load_config
from sera.train.run_dir import TrainError

CONFIG = "configs/letters/rao.yaml"
LORA = ["model.finetune=lora", "model.lora_rank=8", "model.lora_alpha=16"]


def run(out: Path, *overrides: str, tree_policy=None, resume: bool = False) -> list[dict]:
    cfg = None if resume else load_config(CONFIG, overrides=["checkpoint.every=100", *overrides])
    loop.run_train(cfg, out, resume=resume, tree_policy=tree_policy, log=lambda line: None)
    return lines(out)


def lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def trees(out: Path, step: int) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "rollouts" / f"step_{step:05d}").glob("*.json"))]


class Down:
    """A policy whose every call fails as a server that is down."""

    async def __call__(self, messages, sampling):
        raise SamplerError("endpoint_down", "cannot connect to http://127.0.0.1:9/v1/chat/completions")


# -- in process ---------------------------------------------------------------------------------


def failing_samplings(which: set[int], trees_per_round: int = 64):
    """A tree policy under which the first tree of the `which`-th samplings of a round fails (the
    letters config samples 8 tasks x K=8 trees per round, one tree policy each)."""
    calls = [0]

    def tree_policy(policy, task, k):
        index, first = divmod(calls[0], trees_per_round)
        calls[0] += 1
        return Down() if index in which and first == 0 else policy

    return tree_policy


def test_a_failed_round_is_sampled_again_and_trains_what_a_clean_run_trains(tmp_path: Path) -> None:
    clean = run(tmp_path / "clean", "max_steps=2")
    flaky = run(tmp_path / "flaky", "max_steps=2", tree_policy=failing_samplings({0}))
    assert [line["infra/resampled_rounds"] for line in flaky] == [1, 0]
    assert [line["infra/restarts"] for line in flaky] == [0, 0]
    assert "endpoint_down" in flaky[0]["infra/failure"] and "infra/failure" not in flaky[1]
    for a, b in zip(clean, flaky):
        assert (a["tasks"], a["datums"], a["trainable_datums"], a["trained_tokens"]) == (
            b["tasks"], b["datums"], b["trainable_datums"], b["trained_tokens"])
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-6)  # nothing of the failed attempt was trained
    saved = trees(tmp_path / "flaky", 0)
    assert len(saved) == 64 and not any(t.get("error") or t["nodes"][t["root_id"]]["error"] for t in saved)


def test_a_failure_that_persists_stops_the_run_with_one_line_and_the_steps_done_checkpointed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(InfraFailure) as stopped:
        run(out, "max_steps=3", tree_policy=failing_samplings({1, 2}))
    text = str(stopped.value)
    assert "\n" not in text and "step 1" in text and "endpoint_down" in text and "not trained" in text
    assert isinstance(stopped.value, ServingError)  # the CLI prints it as one line
    assert [line["step"] for line in lines(out)] == [0]
    ckpt = load_latest(out / "checkpoints")
    assert (ckpt.manifest.step, ckpt.read_json("state.json")["loop"]["step"]) == (1, 1)
    assert not (out / "rollouts" / "step_00001").exists()
    # The run continues from there once the sampler works again.
    assert [line["step"] for line in run(out, resume=True)] == [0, 1, 2]


# -- vLLM (the fake server) ------------------------------------------------------------------------


def crash_fake_server(base_url: str) -> None:
    """Make the fake server at `base_url` exit at once, and wait until it answers no more."""
    root = base_url.removesuffix("/v1")
    try:
        urllib.request.urlopen(urllib.request.Request(f"{root}/fake/exit", data=b"{}", method="POST"), timeout=5)
    except OSError:
        pass  # the process exits without answering
    while http_ok(f"{root}/health", 1):
        time.sleep(0.1)


def kill_server_at(version: int):
    """A tree policy that makes the server crash when the round of `version` starts sampling."""
    done = []

    def tree_policy(policy, task, k):
        if not done and policy.model == f"policy-v{version:06d}":
            done.append(task.id)
            crash_fake_server(policy.base_url)
        return policy

    return tree_policy


def test_vllm_backend_hot_loads_every_version_and_restarts_a_server_killed_mid_round(tmp_path, fake_vllm_python) -> None:
    out = tmp_path / "run"
    got = run(out, "max_steps=3", *LORA, "sampler.backend=vllm", f"sampler.vllm.python={fake_vllm_python}",
              "sampler.vllm.start_timeout_s=120", "sampler.vllm.restarts=1", tree_policy=kill_server_at(1))
    assert [line["policy_version"] for line in got] == [0, 1, 2]
    assert [line["sync/adapter"] for line in got] == ["policy-v000001", "policy-v000002", "policy-v000003"]
    assert [line["infra/restarts"] for line in got] == [0, 1, 0]
    assert [line["infra/resampled_rounds"] for line in got] == [0, 1, 0]
    for line in got:
        assert line["sync/canary_gap"] <= 1e-3 and line["sync/load_s"] > 0 and line["sync/save_s"] > 0
        recorded = trees(out, line["step"])
        assert len(recorded) == 64
        assert {s["policy_version"] for t in recorded for n in t["nodes"].values() for s in n["steps"]} == {
            line["policy_version"]}
    assert [p.name for p in (out / "adapters").iterdir()] == ["v000003"]
    assert (out / "sampler_base" / "config.json").is_file()  # the tiny model is served from its saved copy
    log = (out / "vllm-server.log").read_text()
    assert log.count("--- sera: starting") == 2 and "--enable-lora --max-lora-rank 8 --max-loras 2" in log
    port = log.split("--port ")[1].split()[0]
    assert not http_ok(f"http://127.0.0.1:{port}/health", 1)  # stopped when the run ended


def server_gone(out: Path) -> bool:
    """The last server the run started answers no more and its process is gone."""
    log = (out / "vllm-server.log").read_text()
    port = log.split("--port ")[-1].split()[0]
    pid = int(re.findall(r"APIServer pid=(\d+)", log)[-1])
    try:
        os.kill(pid, 0)
        return False
    except ProcessLookupError:
        return not http_ok(f"http://127.0.0.1:{port}/health", 1)


def test_the_started_server_is_stopped_on_a_signal_and_on_an_exception_and_the_run_resumes(tmp_path,
                                                                                         fake_vllm_python) -> None:
    out = tmp_path / "run"
    keys = ["max_steps=3", *LORA, "sampler.backend=vllm", f"sampler.vllm.python={fake_vllm_python}",
            "sampler.vllm.start_timeout_s=120"]
    interrupt = at_version(1, lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C during round 1
    cfg = load_config(CONFIG, overrides=["checkpoint.every=100", *keys])
    result = loop.run_train(cfg, out, tree_policy=interrupt, log=lambda line: None)
    assert result.stopped_by == "SIGINT" and result.version == 2 and server_gone(out)

    def broken(policy, task, k):
        raise RuntimeError("a bug in the tree policy")

    with pytest.raises(RuntimeError, match="a bug in the tree policy"):
        loop.run_train(None, out, resume=True, tree_policy=broken, log=lambda line: None)
    assert server_gone(out)
    # A resumed run serves its checkpointed version from a fresh server and carries on.
    got = run(out, resume=True)
    assert [line["policy_version"] for line in got] == [0, 1, 2]
    assert got[-1]["sync/adapter"] == "policy-v000003" and [p.name for p in (out / "adapters").iterdir()] == ["v000003"]
    assert server_gone(out)


@pytest.fixture
def user_server(tmp_path: Path):
    """A fake server the user started, serving the tiny model of the letters config's seed (11)."""
    model, tokenizer = tiny_model_and_tokenizer(seed=11)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    fake = FakeVLLM(tmp_path / "base", "base", max_lora_rank=8).start()
    yield fake
    try:
        fake.vanish()
    except OSError:
        pass


def at_version(version: int, action):
    done = []

    def tree_policy(policy, task, k):
        if not done and policy.model == f"policy-v{version:06d}":
            done.append(action())
        return policy

    return tree_policy


def test_a_refused_adapter_after_an_update_checkpoints_the_update_and_stops(tmp_path, user_server) -> None:
    out = tmp_path / "run"

    def refuse():
        user_server.refuse_loads = "Error while deserializing header: header too small"

    with pytest.raises(TrainError) as stopped:
        run(out, "max_steps=3", *LORA, "sampler.backend=vllm", f"sampler.vllm.base_url={user_server.base_url}",
            tree_policy=at_version(1, refuse))
    text = str(stopped.value)
    assert "\n" not in text and "policy version 2" in text and "AdapterLoadError" in text
    assert "'policy-v000002'" in text and "header too small" in text and "--resume" in text
    got = lines(out)
    assert [line["step"] for line in got] == [0, 1] and "sync/error" in got[1] and got[1]["trained"]
    ckpt = load_latest(out / "checkpoints")
    assert (ckpt.manifest.step, ckpt.manifest.version) == (2, 2)
    assert not (out / "sampler_base").exists()  # a given server serves its own base


def test_a_given_server_that_vanishes_is_not_restarted_and_the_run_stops_checkpointed(tmp_path, user_server) -> None:
    out = tmp_path / "run"
    with pytest.raises(InfraFailure) as stopped:
        run(out, "max_steps=3", *LORA, "sampler.backend=vllm", f"sampler.vllm.base_url={user_server.base_url}",
            tree_policy=at_version(1, user_server.vanish))
    text = str(stopped.value)
    assert "\n" not in text and "sampler.vllm.base_url" in text and "cannot restart" in text
    assert [line["step"] for line in lines(out)] == [0]
    assert load_latest(out / "checkpoints").manifest.step == 1


def test_a_missing_vllm_python_stops_the_run_before_any_step_with_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(ServingError) as missing:
        run(out, "max_steps=1", *LORA, "sampler.backend=vllm", f"sampler.vllm.python={tmp_path / 'venv/bin/python'}")
    text = str(missing.value)
    assert "\n" not in text and str(tmp_path / "venv/bin/python") in text and "make vllm-setup" in text
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()


# -- colocation: the server sleeps during the update (sampler.vllm.sleep_during_update) -----------


def _served(events: list[str]) -> list[str]:
    """`events` with each run of completions for one name folded into `complete NAME xN`."""
    out: list[str] = []
    for event in events:
        if out and event.startswith("complete ") and out[-1].startswith(event + " x"):
            name, n = out[-1].rsplit(" x", 1)
            out[-1] = f"{name} x{int(n) + 1}"
        else:
            out.append(f"{event} x1" if event.startswith("complete ") else event)
    return out


@pytest.fixture
def sleepy_server(tmp_path: Path):
    """A fake server started with --enable-sleep-mode (the letters config's model, seed 11)."""
    model, tokenizer = tiny_model_and_tokenizer(seed=11)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    fake = FakeVLLM(tmp_path / "base", "base", max_lora_rank=8, sleep_mode=True).start()
    yield fake
    fake.vanish()


SLEEP = [*LORA, "sampler.backend=vllm", "sampler.vllm.sleep_during_update=true"]


def test_a_colocated_server_sleeps_through_every_update_and_wakes_for_the_sync(tmp_path, sleepy_server) -> None:
    out = tmp_path / "run"
    got = run(out, "max_steps=2", *SLEEP, f"sampler.vllm.base_url={sleepy_server.base_url}")
    assert [line["trained"] for line in got] == [True, True]
    assert [line["sync/adapter"] for line in got] == ["policy-v000001", "policy-v000002"]
    # Each round samples (64 one-call trees), the server sleeps through the update, wakes, loads the
    # new adapter and answers the canary's one probe; nothing is asked of it while it sleeps.
    assert _served(sleepy_server.events) == [
        "load policy-v000000", "complete policy-v000000 x65",
        "sleep", "wake_up", "load policy-v000001", "complete policy-v000001 x65",
        "sleep", "wake_up", "load policy-v000002", "complete policy-v000002 x1",
    ]


def test_a_server_without_sleep_mode_stops_the_run_before_the_update_with_one_line(tmp_path, user_server) -> None:
    out = tmp_path / "run"
    with pytest.raises(InfraFailure) as refused:
        run(out, "max_steps=2", *SLEEP, f"sampler.vllm.base_url={user_server.base_url}")
    text = str(refused.value)
    assert "\n" not in text and text.startswith("sampler.vllm.sleep_during_update: ") and "--enable-sleep-mode" in text
    assert not (out / "metrics.jsonl").exists() or not lines(out)  # no update was made


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU server can sleep")
def test_sleep_mode_for_a_server_started_on_the_cpu_is_refused_before_it_starts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(ServingError, match=r"^sampler.vllm.sleep_during_update: vLLM's sleep mode needs a GPU server"):
        run(out, "max_steps=1", *SLEEP)
    assert not (out / "vllm-server.log").exists()


def test_sleeping_during_the_update_and_sampling_during_it_are_refused_together() -> None:
    with pytest.raises(ConfigError, match=r"sleep_during_update .* steps.max_offpolicy_versions=1"):
        load_config(CONFIG, overrides=[*SLEEP, "steps.max_offpolicy_versions=1"])
