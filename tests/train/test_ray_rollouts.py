"""Ray rollout workers (`ray.address`) on a local Ray cluster of 2 CPUs, 2 workers, the tiny model.

Users get the same run as one process (trees are seeded per tree, so the worker that samples one
does not change it), trees of a worker killed mid-round re-planned and kept once, and one-line
errors for an unreachable address. Tree 0 of each task is the scripted expert (as in
tests/train/test_loop.py) so that steps update.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from sera.envs.registry import get_env  # noqa: E402
from sera.train import loop  # noqa: E402
from sera.train.config import load_config  # noqa: E402
from sera.train.ray_rollouts import RayRollouts, RayUnavailable, check_reachable  # noqa: E402
from sera.train.sampling import InFlight  # noqa: E402
from sera.train.setup import load_model, make_learner, training_tasks  # noqa: E402

from .test_loop import CONFIG, SMALL, expert_on_tree_zero  # noqa: E402

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


def test_a_worker_killed_mid_round_loses_no_tree_and_none_twice(local_ray) -> None:
    cfg = _config("ray.address=local", "ray.workers=2", "rollout.trees_per_task=4")
    spec = get_env(cfg.environment.name)
    model, tokenizer = load_model(cfg)
    learner = make_learner(cfg, model, tokenizer)
    tasks = training_tasks(cfg, spec)[:2]
    rollouts = RayRollouts(cfg, slow_trees, InFlight())
    try:
        rollouts.sync(learner, 0)
        clean = rollouts.sample(tasks, 0, "execution", 0)
        # At 0.6 s every tree of the round is in flight (each call waits 0.4 s first).
        killer = threading.Timer(0.6, lambda: ray.kill(rollouts.workers[1], no_restart=False))
        killer.start()
        again = rollouts.sample(tasks, 0, "execution", 0)
        killer.join()
        time.sleep(0.1)
    finally:
        rollouts.close()
    assert [len(g) for g in again] == [4, 4]
    assert [[t.task_id for t in g] for g in again] == [[t.id] * 4 for t in tasks]
    assert [[t.seed for t in g] for g in again] == [[t.seed for t in g] for g in clean]  # each tree once, in place
    assert rollouts.replanned >= 1  # the killed worker's trees went to a worker again


def test_an_unreachable_address_is_a_one_line_error() -> None:
    with pytest.raises(RayUnavailable, match=r"^ray.address='ray://127.0.0.1:9': cannot reach 127.0.0.1:9 within 2s"):
        check_reachable("ray://127.0.0.1:9", 2.0)
