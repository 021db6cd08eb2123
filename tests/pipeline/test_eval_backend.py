"""`pipeline.eval_backend`: the main job's evaluations sampled by a vLLM server started on the
evaluated weights (here the fake server of `sera.testing.fake_vllm`, started by `VLLMServer` as
vLLM would be), and `auto` falling back to the in-process sampler without vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sera.pipeline import evaluation
from sera.pipeline.eval_serving import SERVED_DIR, SERVER_LOG, chosen_backend
from sera.pipeline.record import PhaseFailed
from sera.train.config import load_config

CONFIG = "configs/letters/rao.yaml"
KEYS = ["pipeline.eval_tasks=6", "pipeline.eval_temperature=1.0", "pipeline.eval_samples=2",
        "sampler.vllm.start_timeout_s=120"]
CRASH = "import sys\nprint('fake vllm: out of memory', flush=True)\nsys.exit(1)\n"
"""A vLLM entry point that exits at start, as a server that cannot load would."""


def outcomes(folder: Path) -> dict[str, tuple[bool, list[str]]]:
    """(task, sample) -> (success, every reply of the tree)."""
    trees = {f"{f.parent.name}/{f.stem}": json.loads(f.read_text()) for f in folder.glob("rollouts/*/*.json")}
    return {key: (tree["root_success"], [m["content"] for node in tree["nodes"].values() for m in node["messages"]
                                         if m["role"] == "assistant"]) for key, tree in trees.items()}


def test_an_evaluation_through_a_vllm_server_samples_what_the_in_process_one_does_and_leaves_nothing_behind(
        tmp_path: Path, fake_vllm_python: str) -> None:
    python = fake_vllm_python
    served = load_config(CONFIG, overrides=[*KEYS, "pipeline.eval_backend=vllm", f"sampler.vllm.python={python}"])
    lines: list[str] = []
    summary, detail = evaluation.run_evaluation(served, tmp_path / "vllm", log=lines.append)
    plain = load_config(CONFIG, overrides=[*KEYS, "pipeline.eval_backend=inprocess"])
    _, plain_detail = evaluation.run_evaluation(plain, tmp_path / "inprocess")
    assert detail["backend"] == "vllm" and plain_detail["backend"] == "inprocess" and not lines
    assert summary.overall.tasks == 12 and detail["infra_failures"] == 0
    # The fake server samples with the same seeded sampler on the same weights: rollout for rollout equal.
    served_trees = outcomes(tmp_path / "vllm")
    assert served_trees == outcomes(tmp_path / "inprocess") and len(served_trees) == 12
    assert 0 < sum(success for success, _ in served_trees.values()) < 12  # a comparison with both outcomes in it
    assert json.loads((tmp_path / "vllm" / "run.json").read_text())["policy"] == "vllm:tiny"
    assert json.loads((tmp_path / "inprocess" / "run.json").read_text())["policy"] == "hf:tiny"
    log = (tmp_path / "vllm" / SERVER_LOG).read_text()
    assert "fake vllm serving" in log and f"vllm-{SERVED_DIR}" in log
    assert not (tmp_path / f"vllm-{SERVED_DIR}").exists()  # the weights written for the server are removed


def test_auto_evaluates_in_process_without_vllm_and_an_explicit_vllm_that_cannot_start_is_an_infrastructure_failure(
        tmp_path: Path, fake_vllm_python: str) -> None:
    missing = load_config(CONFIG, overrides=[*KEYS, "pipeline.eval_backend=auto", "sampler.vllm.python=/nowhere/python"])
    assert chosen_backend(missing) == "inprocess"
    _, detail = evaluation.run_evaluation(missing, tmp_path / "missing")
    assert detail["backend"] == "inprocess" and not (tmp_path / "missing" / SERVER_LOG).exists()

    python = fake_vllm_python
    auto = load_config(CONFIG, overrides=[*KEYS, "pipeline.eval_backend=auto", f"sampler.vllm.python={python}"])
    assert chosen_backend(auto) == "vllm"
    assert chosen_backend(auto, tmp_path / "missing") == "inprocess"  # a resumed evaluation keeps its backend
    evaluation.run_evaluation(auto, tmp_path / "served")
    assert chosen_backend(auto, tmp_path / "served") == "vllm"

    (tmp_path / "shim" / "vllm" / "entrypoints" / "openai" / "api_server.py").write_text(CRASH)
    lines: list[str] = []
    _, detail = evaluation.run_evaluation(auto, tmp_path / "auto", log=lines.append)
    assert detail["backend"] == "inprocess" and detail["rollouts"] == 12
    assert len(lines) == 1 and lines[0].startswith("the vLLM server did not start (") \
        and lines[0].endswith("evaluating in process (pipeline.eval_backend: auto)")
    assert not (tmp_path / f"auto-{SERVED_DIR}").exists()
    with pytest.raises(PhaseFailed) as begun:  # rollouts sampled by vLLM are never resumed in process
        evaluation.run_evaluation(auto, tmp_path / "served")
    assert begun.value.infra and "holds rollouts it sampled: rerun to retry, or remove" in str(begun.value)

    explicit = load_config(CONFIG, overrides=[*KEYS, "pipeline.eval_backend=vllm", f"sampler.vllm.python={python}"])
    with pytest.raises(PhaseFailed) as failed:
        evaluation.run_evaluation(explicit, tmp_path / "explicit")
    assert failed.value.infra and str(failed.value).startswith("the evaluation's vLLM server did not start: ")
    assert "\n" not in str(failed.value) and not (tmp_path / "explicit" / "rollouts").exists()
    assert not (tmp_path / f"explicit-{SERVED_DIR}").exists()
