"""Ray rollout workers (`ray.address`) on a local Ray cluster of 2 CPUs, 2 workers, the tiny model.

Users get the same run as one process (trees are seeded per tree, so the worker that samples one
does not change it), trees of a worker killed mid-round re-planned and kept once, and one-line
errors for an unreachable address. Tree 0 of each task is the scripted expert (as in
tests/train/test_loop.py) so that steps update.
"""

from __future__ import annotations

import asyncio
from functools import partial
import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from sera.checkpoints.store import load_checkpoint  # noqa: E402
from sera.envs.registry import get_env  # noqa: E402
from sera.policy.model_registry import load_registered  # noqa: E402
from sera.testing.fake_vllm import FakeVLLM  # noqa: E402
from sera.testing.tiny import tiny_model_and_tokenizer  # noqa: E402
from sera.train import loop  # noqa: E402
from sera.train.config import load_config  # noqa: E402
from sera.train.learner import LearnerConfig, TorchLearner  # noqa: E402
from sera.train.ray_learner_ranks import RayFollowers  # noqa: E402
from sera.train.ray_rollouts import RayRollouts, RayUnavailable, check_reachable  # noqa: E402
from sera.train.sampler_setup import open_backend  # noqa: E402
from sera.train.sampling import InFlight  # noqa: E402
from sera.train.setup import load_model, make_learner, make_train_learner, training_tasks  # noqa: E402
from sera.train.sharded_learner import LearnerGroupError, ShardedLearner  # noqa: E402

from .test_fsdp_learner import _datums  # noqa: E402
from .test_loop import CONFIG, SMALL, expert_on_tree_zero  # noqa: E402
from .test_loop_infra import crash_fake_server  # noqa: E402

pytestmark = pytest.mark.slow  # local Ray clusters: `make test-slow` (and CI), not `make test`

TESTS = Path(__file__).resolve().parents[1]
LETTERS = "configs/letters/rao.yaml"


@pytest.fixture(scope="module")
def local_ray():
    """A 2-CPU Ray on this machine; the workers import this test package (the expert seam)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS), "HF_HUB_OFFLINE": "1"}})
    yield
    ray.shutdown()


def _config(*extra: str):
    return load_config(CONFIG, preset="tiny", overrides=[*SMALL, "max_steps=2", *extra])


def _trees(run: Path) -> dict[str, list]:
    """Each saved tree's node token ids, by file name."""
    out = {}
    for path in sorted((run / "rollouts").rglob("*.json")):
        tree = json.loads(path.read_text())
        out[str(path.relative_to(run))] = {node_id: [step["completion_token_ids"] for step in node["steps"]]
                                           for node_id, node in tree["nodes"].items()}
    return out


def test_two_ray_workers_give_the_single_process_run(local_ray, tmp_path: Path) -> None:
    # The letters world: its trees do not depend on timing (tests/train/test_kill_resume.py), so
    # the two runs must agree tree for tree: the model's trees are batched together in one
    # process and split across the two workers on Ray. Batch composition still moves fp32
    # log-probabilities by ~1e-7: a draw that close to a token boundary flips (seed 5 has one
    # such draw in 128, seed 7 none), and the sampler log-probabilities in CISPO's ratio move
    # step 1's loss by ~2e-4 relative.
    single, workers = tmp_path / "single", tmp_path / "ray"
    letters = ["max_steps=2", "seed=7"]
    loop.run_train(load_config(LETTERS, preset="tiny", overrides=letters), single)
    loop.run_train(load_config(LETTERS, preset="tiny", overrides=[*letters, "ray.address=local", "ray.workers=2"]), workers)

    a = [json.loads(x) for x in (single / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (workers / "metrics.jsonl").read_text().splitlines()]
    assert len(b) == 2 and any(r["trained"] for r in b)
    for x, y in zip(a, b):
        for key in ("policy_version", "trained", "datums", "trainable_datums", "root_success", "sampler_calls"):
            assert x[key] == y[key], key
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-3)
        if y["trained"]:
            assert y["sync/canary_gap"] < 1e-3  # every worker samples with the learner's weights
    assert _trees(single) == _trees(workers)


class _Slow:
    """A tree's policy that waits 0.4 s before each call, so that a kill lands mid-tree."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def __call__(self, messages, sampling):
        await asyncio.sleep(0.4)
        return await self.inner(messages, sampling)


def slow_trees(policy, task, k):
    return _Slow(expert_on_tree_zero(policy, task, k))


@pytest.mark.parametrize("served", [False, True], ids=["own-copies", "vllm-server"])
def test_a_worker_killed_mid_round_loses_no_tree_and_none_twice(local_ray, tmp_path: Path, served: bool) -> None:
    # Also: a worker killed just before a sync (as Ray's memory monitor does) is waited for, not a failed sync.
    keys = ["ray.address=local", "ray.workers=2", "rollout.trees_per_task=4"]
    if served:  # the workers send their requests to a (fake) vLLM server; a restarted one is routed again
        keys += ["model.finetune=lora", "model.lora_rank=8", "model.lora_alpha=16", "sampler.backend=vllm"]
    cfg = _config(*keys)
    spec = get_env(cfg.environment.name)
    model, tokenizer = load_model(cfg)
    fake, server, inflight = None, None, InFlight()
    if served:
        model.save_pretrained(tmp_path / "base")  # the server's base: the learner's, before LoRA
        tokenizer.save_pretrained(tmp_path / "base")
        fake = FakeVLLM(tmp_path / "base", "base", max_lora_rank=8).start()
        cfg = _config(*keys, f"sampler.vllm.base_url={fake.base_url}")
    learner = make_learner(cfg, model, tokenizer)
    if served:
        server = open_backend(cfg, tmp_path / "run", learner, tokenizer, inflight, None)
    tasks = training_tasks(cfg, spec)[:2]
    rollouts = RayRollouts(cfg, slow_trees, inflight, server=server, tokenizer=tokenizer)  # type: ignore[arg-type]
    try:
        rollouts.sync(learner, 0)
        clean = rollouts.sample(tasks, 0, "execution", 0)
        # At 0.6 s every tree of the round is in flight (each call waits 0.4 s first).
        killer = threading.Timer(0.6, lambda: ray.kill(rollouts.workers[1], no_restart=False))
        killer.start()
        again = rollouts.sample(tasks, 0, "execution", 0)
        killer.join()
        time.sleep(0.1)
        asked = {name for route, name in fake.requests} if fake is not None else set()
        ray.kill(rollouts.workers[0], no_restart=False)
        rollouts.sync(learner, 1)
        after = rollouts.sample(tasks, 1, "execution", 1)
    finally:
        rollouts.close()
        if fake is not None:
            fake.vanish()
    assert [len(g) for g in again] == [4, 4]
    assert [[t.task_id for t in g] for g in again] == [[t.id] * 4 for t in tasks]
    assert [[t.seed for t in g] for g in again] == [[t.seed for t in g] for g in clean]  # each tree once, in place
    assert rollouts.replanned >= 1  # the killed worker's trees went to a worker again
    if fake is not None:  # every model call asked the server for version 0's adapter
        assert asked == {"policy-v000000"}
    assert [[t.policy_version for t in g] for g in after] == [[1] * 4, [1] * 4]


def test_an_unreachable_address_is_a_one_line_error() -> None:
    with pytest.raises(RayUnavailable, match=r"^ray.address='ray://127.0.0.1:9': cannot reach 127.0.0.1:9 within 2s"):
        check_reachable("ray://127.0.0.1:9", 2.0)


# -- workers in front of a vLLM server (the fake one of sera.testing.fake_vllm) ----------------------

VLLM = ["checkpoint.every=100", "model.finetune=lora", "model.lora_rank=8", "model.lora_alpha=16",
        "sampler.backend=vllm", "ray.address=local", "ray.workers=2"]


class MarkWorker:
    """A tree policy that leaves a file named after the process that samples the tree."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, policy, task, k):
        (self.folder / str(os.getpid())).touch()
        return policy


class KillServerOnce:
    """A tree policy under which the first tree of `version`'s round, on whichever worker, makes the
    server crash (a file marks that it was done, for every process)."""

    def __init__(self, version: int, marker: Path) -> None:
        self.version, self.marker = version, marker

    def __call__(self, policy, task, k):
        if policy.model == f"policy-v{self.version:06d}":
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return policy
            crash_fake_server(policy.base_url)
        return policy


def _recorded_versions(run: Path, step: int) -> set[int]:
    trees = [json.loads(p.read_text()) for p in sorted((run / "rollouts" / f"step_{step:05d}").glob("*.json"))]
    assert len(trees) == 64
    return {s["policy_version"] for t in trees for n in t["nodes"].values() for s in n["steps"]}


def test_ray_workers_sample_from_the_vllm_server_the_driver_syncs(local_ray, tmp_path: Path) -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=11)  # the letters config's model
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    fake = FakeVLLM(tmp_path / "base", "base", max_lora_rank=8).start()
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "run"
    try:
        loop.run_train(load_config(LETTERS, overrides=[*VLLM, "max_steps=2", f"sampler.vllm.base_url={fake.base_url}"]),
                       out, tree_policy=MarkWorker(marks), log=lambda line: None)
    finally:
        fake.vanish()
    got = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["policy_version"] for line in got] == [0, 1]
    assert [line["sync/adapter"] for line in got] == ["policy-v000001", "policy-v000002"]
    for line in got:
        assert line["sync/canary_gap"] <= 1e-3
        assert _recorded_versions(out, line["step"]) == {line["policy_version"]}
    # Two worker processes sampled the trees, the driver none; the server answered every tree call
    # (under the version's adapter) and one canary probe per sync (versions 0, 1, 2).
    assert len(list(marks.iterdir())) == 2 and not (marks / str(os.getpid())).exists()
    tree_calls = [name for route, name in fake.requests]
    assert len(tree_calls) == got[-1]["sampler_calls"] + 3  # the run's calls so far
    assert set(tree_calls) == {"policy-v000000", "policy-v000001", "policy-v000002"}


@pytest.mark.parametrize("servers", [1, 2])
def test_a_server_killed_under_the_workers_is_restarted_alone_and_the_round_sampled_again(
        local_ray, tmp_path: Path, fake_vllm_python, servers: int) -> None:
    out = tmp_path / "run"
    cfg = load_config(LETTERS, overrides=[*VLLM, "max_steps=3", f"sampler.vllm.python={fake_vllm_python}",
                                          "sampler.vllm.start_timeout_s=120", "sampler.vllm.restarts=1",
                                          f"sampler.vllm.servers={servers}"])
    loop.run_train(cfg, out, tree_policy=KillServerOnce(1, tmp_path / "killed"), log=lambda line: None)
    got = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["policy_version"] for line in got] == [0, 1, 2]
    assert [line["infra/restarts"] for line in got] == [0, 1, 0]
    assert [line["infra/resampled_rounds"] for line in got] == [0, 1, 0]
    for line in got:
        assert _recorded_versions(out, line["step"]) == {line["policy_version"]}
    # One log per server; the killed server started twice, any other once.
    logs = {path.name: path.read_text().count("--- sera: starting") for path in out.glob("vllm-server*.log")}
    assert sorted(logs) == sorted(["vllm-server.log", "vllm-server-1.log"][:servers])
    assert sorted(logs.values()) == [1] * (servers - 1) + [2]


class MarkServer:
    """A tree policy that leaves a file named after the sampling process and the server it asks."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, policy, task, k):
        (self.folder / f"{os.getpid()} {policy.base_url.replace('/', '_')}").touch()
        return policy


def test_ray_workers_spread_over_two_vllm_servers_each_synced_and_checked(local_ray, tmp_path: Path) -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=11)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    fakes = [FakeVLLM(tmp_path / "base", "base", max_lora_rank=8).start() for _ in range(2)]
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "run"
    urls = f"[{fakes[0].base_url}, {fakes[1].base_url}]"
    try:
        loop.run_train(load_config(LETTERS, overrides=[*VLLM, "max_steps=2", f"sampler.vllm.base_url={urls}"]),
                       out, tree_policy=MarkServer(marks), log=lambda line: None)
    finally:
        for fake in fakes:
            fake.vanish()
    got = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["policy_version"] for line in got] == [0, 1]
    for line in got:
        assert line["sync/canary_gap"] <= 1e-3
        assert _recorded_versions(out, line["step"]) == {line["policy_version"]}
    # Each worker asked one server, each its own; each server loaded every version and answered
    # its own canary probe after each load; together they answered every call of the run.
    asked = {}
    for mark in marks.iterdir():
        pid, url = mark.name.split(" ")
        asked.setdefault(pid, set()).add(url)
    assert len(asked) == 2 and all(len(urls) == 1 for urls in asked.values())
    assert len(set().union(*asked.values())) == 2
    for fake in fakes:
        assert [e for e in fake.events if e.startswith("load")] == [f"load policy-v00000{v}" for v in range(3)]
        assert {name for route, name in fake.requests} == {"policy-v000000", "policy-v000001", "policy-v000002"}
    assert sum(len(fake.requests) for fake in fakes) == got[-1]["sampler_calls"] + 2 * 3


def test_a_started_server_on_127_0_0_1_is_refused_for_a_cluster_of_several_nodes(local_ray, monkeypatch) -> None:
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": True}])

    class Server:
        base_urls = ["http://10.0.0.5:8000/v1", "http://127.0.0.1:8011/v1"]  # what RayRollouts reads

    with pytest.raises(RayUnavailable, match=r"the cluster has 2 nodes but the vLLM server is at http://127.0.0.1:8011/v1"):
        RayRollouts(_config("ray.address=local"), slow_trees, InFlight(), server=Server())  # type: ignore[arg-type]


def test_ray_workers_sample_the_next_round_during_the_update(local_ray, tmp_path: Path) -> None:
    # With the weights held still (lr 1e-30) the round sampled ahead by the workers, at the version
    # before, is the round the on-policy run samples (tests/train/test_lookahead.py, in one process).
    keys = ["max_steps=3", "seed=7", "optimizer.lr=1e-30", "ray.address=local", "ray.workers=2"]
    on, ahead = tmp_path / "on", tmp_path / "ahead"
    loop.run_train(load_config(LETTERS, preset="tiny", overrides=keys), on)
    loop.run_train(load_config(LETTERS, preset="tiny", overrides=[*keys, "steps.max_offpolicy_versions=1"]), ahead)
    records = [json.loads(x) for x in (ahead / "metrics.jsonl").read_text().splitlines()]
    assert [r["offpolicy/ahead"] for r in records] == [0, 1, 1]
    assert [r["offpolicy/datum_lag_max"] for r in records] == [0, 1, 1]
    versions = [{json.loads(p.read_text())["policy_version"] for p in (ahead / "rollouts" / f"step_{s:05d}").glob("*.json")}
                for s in range(3)]
    assert versions == [{0}, {0}, {1}]
    assert _trees(on) == _trees(ahead)


FIRST_UPDATE_RTOL = 1e-2
"""Largest difference of the weights after one update, sharded over Ray ranks vs one process (the
same trees; gradients summed in another order), relative to how far the update moved them (L2).
Not an elementwise bound: AdamW moves a weight whose gradient is near its eps (1e-8) by a
fraction of lr that a 1e-9 change of that gradient shifts by ~1e-3 at lr 3e-3."""


def test_fsdp_ranks_on_ray_give_the_single_process_run(local_ray, tmp_path: Path) -> None:
    """`model.fsdp_placement: ray`: the learner's rank 1 is a Ray actor that meets rank 0 (this
    process) at this node's address, beside one rollout worker; the run is the single-process run
    up to the sharded step's summation order (tests/train/test_sharded_train.py's tolerances). The
    weights are compared after the first update: the second round is sampled from weights that
    differ in the last bits, so its trees are equal in distribution only (after two updates the
    largest difference was 0.7-1.4e-3 at lr 3e-3, run to run)."""
    single, ranks = tmp_path / "single", tmp_path / "ranks"
    letters = ["max_steps=2", "seed=7", "model.finetune=full", "checkpoint.every=1"]
    loop.run_train(load_config(LETTERS, preset="tiny", overrides=letters), single)
    made = []

    def keep(*args):
        made.append(make_train_learner(*args))
        return made[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "make_train_learner", keep)
        loop.run_train(load_config(LETTERS, preset="tiny", overrides=[
            *letters, "ray.address=local", "ray.workers=1", "model.fsdp_processes=2", "model.fsdp_placement=ray"]), ranks)
    assert isinstance(made[0]._group, RayFollowers) and made[0].settings.host == ray.util.get_node_ip_address()
    a = [json.loads(x) for x in (single / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (ranks / "metrics.jsonl").read_text().splitlines()]
    assert len(b) == 2 and all(r["trained"] for r in b)
    for x, y in zip(a, b):
        for key in ("policy_version", "datums", "trainable_datums", "trained_tokens"):
            assert x[key] == y[key], key
        assert y["sync/canary_gap"] < 1e-3  # the worker samples with the gathered weights
    assert b[0]["loss"] == pytest.approx(a[0]["loss"], rel=1e-5)
    assert b[0]["grad_norm"] == pytest.approx(a[0]["grad_norm"], rel=1e-5)
    wa, wb = (torch.load(load_checkpoint(run / loop.CKPT_DIR / "step_000001").file("learner.pt"), weights_only=True)
              ["weights"] for run in (single, ranks))
    assert wa.keys() == wb.keys()
    start = load_model(load_config(LETTERS, preset="tiny", overrides=letters))[0].state_dict()
    apart = sum(float((wa[k] - wb[k]).pow(2).sum()) for k in wa) ** 0.5
    moved = sum(float((wa[k] - start[k]).pow(2).sum()) for k in wa) ** 0.5
    assert apart < FIRST_UPDATE_RTOL * moved
    assert ray.is_initialized()  # the fixture's Ray: the run joined it and left it running


def test_a_killed_rank_actor_is_a_one_line_error(local_ray) -> None:
    model, tokenizer = load_registered("tiny", seed=0)
    config = LearnerConfig(lr=1e-3, device="cpu")
    learner = ShardedLearner(model, tokenizer, config, 2, partial(load_registered, "tiny", seed=0), placement="ray")
    try:
        reference = TorchLearner(load_registered("tiny", seed=0)[0], config)
        step = learner.train_step(_datums(), "cispo")
        assert step.forward_backward.loss == pytest.approx(reference.train_step(_datums(), "cispo").forward_backward.loss,
                                                           rel=1e-5)
        ray.kill(learner._group.actors[0], no_restart=True)
        with pytest.raises(LearnerGroupError, match=r"^learner rank 1 failed in train_step: its actor died") as err:
            learner.train_step(_datums(), "cispo")
        assert "\n" not in str(err.value)
    finally:
        learner.close()


def test_a_cluster_that_cannot_hold_every_rank_is_a_one_line_error_that_leaves_nothing_behind(local_ray) -> None:
    """Three follower ranks of one CPU each on a 2-CPU cluster: none is started (a group missing a
    rank would wait at the rendezvous), the error names what is missing, the reservation is gone."""
    model, tokenizer = load_registered("tiny", seed=0)
    started = time.monotonic()
    with pytest.raises(LearnerGroupError) as err:
        ShardedLearner(model, tokenizer, LearnerConfig(lr=1e-3, device="cpu"), 4, partial(load_registered, "tiny", seed=0),
                       placement="ray", placement_timeout_s=3)
    assert time.monotonic() - started < 60
    assert str(err.value) == ("the Ray cluster did not reserve the learner's 3 follower rank(s) (1 CPU each) within 3s "
                              "(ray.placement_timeout_s): it has 2 of 2 CPU free")
    assert all(group["state"] == "REMOVED" for group in ray.util.placement_group_table().values())
    assert ray.available_resources().get("CPU") == 2


def _build_fails():
    """What a rank actor runs instead of building the model: a failure to report."""
    raise RuntimeError("no such checkpoint: /nowhere")


def test_a_rank_actor_that_cannot_build_its_model_is_named_in_the_start_error(local_ray) -> None:
    """The actor joins the group, fails to build, and leaves it: rank 0's first collective fails at
    once (not after the 30-minute collective timeout) and the error names the actor's reason."""
    model, tokenizer = load_registered("tiny", seed=0)
    started = time.monotonic()
    with pytest.raises(LearnerGroupError) as err:
        ShardedLearner(model, tokenizer, LearnerConfig(lr=1e-3, device="cpu"), 2, _build_fails, placement="ray")
    text = str(err.value)
    assert time.monotonic() - started < 120
    assert text.startswith("the 2-process learner did not start: ") and "\n" not in text
    assert text.endswith(": rank 1: RuntimeError: no such checkpoint: /nowhere")
