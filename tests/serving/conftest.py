"""Shared pieces of the serving tests: a stand-in for vLLM's OpenAI entry point."""

from __future__ import annotations

import sys
from pathlib import Path

from sera.serving.vllm_server import VLLMServer

FAKE_SERVER = '''
import argparse, http.server, sys
p = argparse.ArgumentParser(); p.add_argument("--port", type=int)
args, _ = p.parse_known_args()
print("fake vllm starting", flush=True)
if "--crash" in sys.argv:
    sys.exit("fake vllm: model not found")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", args.port), H).serve_forever()
'''
"""`vllm.entrypoints.openai.api_server` as a process: answers `/health`; `--crash` exits at start."""


def fake_vllm_server(tmp_path: Path, served_name: str, *extra: str) -> VLLMServer:
    """A `VLLMServer` whose python finds `FAKE_SERVER` as vLLM's entry point (on `PYTHONPATH`)."""
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return VLLMServer(python=sys.executable, model_dir=model, served_name=served_name, log_path=tmp_path / "server.log",
                      extra_args=extra, extra_env={"PYTHONPATH": str(tmp_path / "fake")})
