"""benchmarks/gpu_two_steps.py: the MFU formula, the flag errors, the GPU run's config, and the
`--tiny` run end to end (~30 s on a loaded 2-core CPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sera.train.config import load_config

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_two_steps.py"
_spec = importlib.util.spec_from_file_location("gpu_two_steps", SCRIPT)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_mfu_is_six_n_per_token_over_peak():
    # 4e9 parameters, 10,000 tokens in 1 s: 2.4e14 FLOP/s, a quarter of 960 TFLOP/s.
    assert bench.mfu(4_000_000_000, 10_000, 1.0, 960.0) == pytest.approx(0.25)
    assert bench.mfu(4_000_000_000, 10_000, 0.0, 960.0) == 0.0


@pytest.mark.parametrize("argv, cuda, vllm, message", [
    (["--tiny", "--backend", "vllm"], False, True, "--tiny runs the in-process sampler"),
    ([], False, True, "needs a CUDA device"),
    (["--backend", "vllm"], True, False, "no python that imports vllm"),
    (["--steps", "0"], True, True, "--steps must be at least 1"),
    (["--peak-tflops", "0"], True, True, "--peak-tflops must be positive"),
])
def test_flag_errors_are_one_line(argv, cuda, vllm, message):
    args = bench.parse(["--out", "x", *argv])
    with pytest.raises(SystemExit) as raised:
        bench.check_flags(args, cuda, lambda: vllm)
    text = str(raised.value.code)
    assert message in text and "\n" not in text


def test_vllm_is_not_asked_for_the_inprocess_backend():
    args = bench.parse(["--out", "x", "--backend", "inprocess"])
    bench.check_flags(args, True, lambda: pytest.fail("vllm was probed"))


@pytest.mark.parametrize("backend", ["inprocess", "vllm"])
def test_gpu_overrides_load_into_a_paper_config(tmp_path, backend):
    args = bench.parse(["--out", str(tmp_path), "--backend", backend, "--set", "rollout.max_tokens=256"])
    cfg = load_config(bench.CONFIG_FILE, preset="paper", overrides=bench.overrides(args, tmp_path / "model"))
    assert (cfg.model.dtype, cfg.model.device, cfg.sampler.backend) == ("bf16", "cuda", backend)
    assert cfg.model.finetune == ("lora" if backend == "vllm" else "full")
    assert (cfg.steps.max_steps, cfg.rollout.batch_tasks, cfg.rollout.trees_per_task) == (2, 2, 4)
    assert cfg.rollout.max_tokens == 256  # --set comes last
    assert cfg.optimizer.lr == 3e-6  # the paper's optimizer is kept


def test_tiny_run_end_to_end(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--tiny"], capture_output=True, text=True,
                          cwd=ROOT, timeout=240, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.splitlines()[0])
    assert [s["trained"] for s in summary["steps"]] == [True, True]
    last = summary["last"]
    assert last["sampling_tok_s"] > 0 and last["learner_tok_s"] > 0 and last["mfu"] > 0
    assert last["time_s"]["step"] >= last["time_s"]["sampling"] + last["time_s"]["update"]
    assert "samp tok/s" in proc.stdout


def test_a_bad_override_fails_in_one_line_before_building(tmp_path):
    with pytest.raises(SystemExit) as raised:
        bench.main(["--out", str(tmp_path / "o"), "--tiny", "--set", "optimizer.lrr=1"])
    text = str(raised.value.code)
    assert "unknown key 'optimizer.lrr'" in text and "\n" not in text
    assert not (tmp_path / "o").exists()
