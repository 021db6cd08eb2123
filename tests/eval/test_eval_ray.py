"""`sera eval --ray`: the evaluation split into shards run as Ray tasks (a local 2-CPU cluster), merged.

Users get the same merged run as one process (the shards are `--shard i/n` runs, so each task
is evaluated once, by the same seeds), the shard folders kept for a rerun, and one-line errors
for flags that do not combine with it and for an unreachable cluster.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

ray = pytest.importorskip("ray")

from sera.cli import app  # noqa: E402

pytestmark = pytest.mark.slow  # a local Ray cluster: `make test-slow` (and CI), not `make test`

runner = CliRunner()
EASY = ("--difficulty", "easy", "--limit", "4")
TIMING = {"wall_time_s", "mean_rollout_s"}


def _eval(out: Path, *extra: str):
    return runner.invoke(app, ["eval", "--out", str(out), "--no-progress", *extra])


def _summary(out: Path) -> dict:
    return {k: v for k, v in json.loads((out / "summary.json").read_text()).items() if k not in TIMING}


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}})
    yield
    ray.shutdown()


def test_ray_shards_merge_into_the_unsharded_run(local_ray, tmp_path: Path) -> None:
    sharded, whole = tmp_path / "ray", tmp_path / "whole"
    result = _eval(sharded, "--ray", "local", "--ray-shards", "2", *EASY)
    assert result.exit_code == 0, result.output
    assert "merged 4 rollout results" in result.output
    ran_on = re.findall(r"shard \d/2: \d/2 solved \(ran on [^:]+:(\d+)\)", result.output)
    assert len(ran_on) == 2 and str(os.getpid()) not in ran_on  # two shards, each in a Ray worker process
    assert sorted(p.name for p in (sharded / "shards").iterdir()) == ["0-of-2", "1-of-2"]
    assert _eval(whole, *EASY).exit_code == 0
    assert _summary(sharded) == _summary(whole)
    assert json.loads((sharded / "run.json").read_text()) == json.loads((whole / "run.json").read_text())
    assert sorted(p.name for p in (sharded / "rollouts").iterdir()) == sorted(p.name for p in (whole / "rollouts").iterdir())


@pytest.mark.parametrize(("extra", "message"), [
    (("--shard", "0/2"), "--ray splits the evaluation into shards itself; drop --shard 0/2"),
    (("--runs", "2"), "--ray with --runs is not supported"),
])
def test_flags_that_do_not_combine_with_ray_are_one_line_errors(tmp_path: Path, extra, message) -> None:
    result = _eval(tmp_path / "o", "--ray", "local", *extra, *EASY)
    assert result.exit_code != 0 and message in " ".join(result.output.split())
    assert not ray.is_initialized()  # refused before joining a cluster


def test_an_unreachable_cluster_is_a_one_line_error(tmp_path: Path) -> None:
    result = _eval(tmp_path / "o", "--ray", "127.0.0.1:9", *EASY)
    assert result.exit_code != 0
    assert "ray.address='127.0.0.1:9': cannot reach 127.0.0.1:9" in " ".join(result.output.split())
