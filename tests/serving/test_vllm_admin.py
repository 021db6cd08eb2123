"""The adapter admin client against a scripted HTTP server on 127.0.0.1: what it sends, and how a
refusal, a vanished server and a silent one are reported (one line, naming adapter and folder)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sera.serving.vllm_admin import AdapterAdmin, AdapterLoadError, AdapterUnloadError, ServerUnreachable


class Scripted:
    """Answers POSTs with the next scripted (status, body); records what it got."""

    def __init__(self, replies: list[tuple[int, dict]], delay_s: float = 0.0) -> None:
        self.replies, self.delay_s, self.got = list(replies), delay_s, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                outer.got.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
                time.sleep(outer.delay_s)
                status, body = outer.replies.pop(0)
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except BrokenPipeError:  # the client gave up waiting (the timeout test)
                    pass

            def do_GET(self):  # noqa: N802
                data = json.dumps({"data": [{"id": "base"}, {"id": "policy-v000003"}]}).encode()
                self.send_response(200 if self.path == "/v1/models" else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scripted():
    servers = []

    def make(replies, delay_s=0.0):
        servers.append(Scripted(replies, delay_s))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_load_unload_and_models_send_what_vllm_expects(scripted) -> None:
    server = scripted([(200, "Success"), (200, "Success")])
    admin = AdapterAdmin(server.url)
    admin.load("policy-v000003", "/runs/a/adapters/v000003")
    admin.unload("policy-v000002")
    assert server.got == [
        ("/v1/load_lora_adapter", {"lora_name": "policy-v000003", "lora_path": "/runs/a/adapters/v000003"}),
        ("/v1/unload_lora_adapter", {"lora_name": "policy-v000002"}),
    ]
    assert admin.models() == ["base", "policy-v000003"]
    assert admin.root == server.url.removesuffix("/v1")


def test_a_refused_load_names_the_adapter_its_folder_and_the_servers_message(scripted) -> None:
    message = "Call to add_lora method failed: Worker failed with error 'LoRA rank 32 is greater than max_lora_rank 16.'"
    server = scripted([(500, {"error": {"message": message, "type": "InternalServerError", "code": 500}}),
                       (404, {"error": {"message": "The lora adapter 'policy-v000009' cannot be found.", "code": 404}})])
    admin = AdapterAdmin(server.url)
    with pytest.raises(AdapterLoadError) as refused:
        admin.load("policy-v000004", "/runs/a/adapters/v000004")
    text = str(refused.value)
    assert "\n" not in text
    assert "'policy-v000004'" in text and "/runs/a/adapters/v000004" in text and "HTTP 500" in text
    assert "LoRA rank 32 is greater than max_lora_rank 16" in text
    with pytest.raises(AdapterUnloadError, match="'policy-v000009'.*HTTP 404.*cannot be found"):
        admin.unload("policy-v000009")


def test_a_vanished_server_is_unreachable_not_a_refusal() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    admin = AdapterAdmin(f"http://127.0.0.1:{port}/v1", timeout_s=5)
    with pytest.raises(ServerUnreachable) as down:
        admin.load("policy-v000001", "/x")
    assert f"127.0.0.1:{port}/v1/load_lora_adapter" in str(down.value) and "\n" not in str(down.value)
    assert not admin.healthy()


def test_a_server_that_does_not_answer_in_time_is_unreachable(scripted) -> None:
    server = scripted([(200, "late")], delay_s=3.0)
    started = time.monotonic()
    with pytest.raises(ServerUnreachable, match="within 0.5 s"):
        AdapterAdmin(server.url, timeout_s=0.5).load("policy-v000001", "/x")
    assert time.monotonic() - started < 2.5
