"""`VLLMAdapterSync` against the fake vLLM (`sera.testing.fake_vllm`, the tiny model with peft
adapters, served on 127.0.0.1): versioned names, routing, retiring, the canary, and every failure
as a one-line error."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import safetensors.torch
from safetensors import SafetensorError

from sera.policy.openai_sampler import OpenAISampler
from sera.policy.threaded import ThreadedPolicy
from sera.serving.vllm_admin import AdapterAdmin, AdapterLoadError, ServerUnreachable
from sera.serving.vllm_backend import VllmBackend
from sera.serving.vllm_sync import AdapterSaveError, VLLMAdapterSync
from sera.serving.weight_sync import CanaryError, SyncError
from sera.testing.fake_vllm import FakeVLLM
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.train.datums import Datum
from sera.train.learner import LearnerConfig, LoraSettings, TorchLearner


@pytest.fixture
def parts(tmp_path: Path):
    """A LoRA learner on the tiny model, the fake server serving its base, and a routed sampler."""
    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    base = tmp_path / "base"
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    learner = TorchLearner(model, LearnerConfig(lr=3e-2, lora=LoraSettings(rank=8, alpha=16), pad_id=tokenizer.pad_token_id),
                           tokenizer=tokenizer)
    fake = FakeVLLM(base, "base", max_lora_rank=8).start()
    sampler = OpenAISampler(fake.base_url, "base", tokenizer=tokenizer, max_retries=0)
    policy = ThreadedPolicy(sampler)
    sync = VLLMAdapterSync(AdapterAdmin(fake.base_url, timeout_s=30), policy, lambda name: setattr(sampler, "model", name),
                           tmp_path / "run" / "adapters")
    yield learner, fake, sampler, sync
    policy.close_now()
    fake.vanish()


def update(learner: TorchLearner) -> None:
    """One SFT step, so the adapter's B is no longer 0 and the policy differs from the base."""
    ids = learner.tokenizer("The quick brown fox jumps over the lazy dog.")["input_ids"]
    datum = Datum(tokens=tuple(ids), mask=(False,) + (True,) * (len(ids) - 1), sampler_logprobs=(math.nan,) * len(ids),
                  advantage=1.0, depth=0, trajectory_id="t", node_id="n", stage="execution", steps=())
    learner.train_step([datum], "sft")


def test_each_version_is_a_new_adapter_routed_and_checked_and_the_old_one_retired(parts) -> None:
    learner, fake, sampler, sync = parts
    reports = []
    for version in range(3):
        if version:
            update(learner)
        reports.append(sync.sync(learner, version))
        name = f"policy-v{version:06d}"
        assert sampler.model == name
        assert fake.models()["data"] == [{"id": "base", "object": "model"}, {"id": name, "object": "model"}]
        assert [p.name for p in sync.folder.iterdir()] == [f"v{version:06d}"]
        assert fake.requests[-1] == ("chat", name)  # the canary asked the new adapter
    for version, report in enumerate(reports):
        assert report.version == version and report.adapter == f"policy-v{version:06d}"
        assert report.canary_gap <= 1e-3 and report.canary_tokens > 0
        assert min(report.save_s, report.load_s, report.canary_s) > 0
        assert report.seconds >= report.save_s + report.load_s + report.canary_s - 1e-6
        assert {"sync/save_s", "sync/load_s", "sync/canary_s", "sync/adapter"} <= set(report.as_metrics())


def test_the_canary_fails_when_the_sampler_is_left_on_old_weights(parts) -> None:
    learner, fake, sampler, sync = parts
    sync.sync(learner, 0)
    update(learner)
    # The new adapter is loaded, but requests go to the base: the weights of version 0 (B = 0).
    sync.route = lambda name: setattr(sampler, "model", "base")
    with pytest.raises(CanaryError, match="policy version 1.*bound 0.001"):
        sync.sync(learner, 1)


def test_a_refused_adapter_is_one_line_naming_it_its_folder_and_the_servers_message(parts) -> None:
    learner, fake, sampler, sync = parts
    sync.sync(learner, 0)
    update(learner)
    fake.refuse_loads = "Error while deserializing header: header too small"
    with pytest.raises(AdapterLoadError) as refused:
        sync.sync(learner, 1)
    text = str(refused.value)
    assert "\n" not in text and "'policy-v000001'" in text and str(sync.folder.resolve() / "v000001") in text
    assert "header too small" in text
    assert sampler.model == "policy-v000000"  # still routed to the adapter that loaded


def test_a_full_disk_names_the_folder_and_keeps_serving_the_previous_adapter(parts, monkeypatch) -> None:
    learner, fake, sampler, sync = parts
    sync.sync(learner, 0)

    def full(*args, **kwargs):  # what safetensors raises when the disk is full (CI met it)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "serialize_file", full)
    with pytest.raises(AdapterSaveError) as failed:
        sync.sync(learner, 1)
    assert str(failed.value) == (f"writing the adapter of policy version 1 into {sync.folder.resolve() / 'v000001'} "
                                 "failed: No space left on device")
    assert sorted(p.name for p in sync.folder.iterdir()) == ["v000000"]  # no partial folder left
    assert sampler.model == "policy-v000000"


def test_a_vanished_server_it_did_not_start_stops_the_sync_with_a_named_cause(parts) -> None:
    learner, fake, sampler, sync = parts
    sync.sync(learner, 0)
    fake.vanish()
    with pytest.raises(ServerUnreachable):
        sync.sync(learner, 1)
    backend = VllmBackend(sampler=sampler, adapters=sync, server=None, max_restarts=1, start_timeout_s=5)
    with pytest.raises(SyncError) as stopped:
        backend.sync(learner, 1)
    text = str(stopped.value)
    assert "\n" not in text and "InfraFailure" in text and "sampler.vllm.base_url" in text and "cannot restart" in text
    backend.policy.close_now()
