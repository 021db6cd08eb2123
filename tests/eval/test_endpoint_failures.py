"""`sera eval --policy openai` against a local server that fails: errors by kind, exit status,
and a rerun after the server is fixed sends the failed requests again."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from sera.cli import app

runner = CliRunner()

REPLY = {"choices": [{"message": {"role": "assistant", "content": "no code"}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


class FakeServer:
    """A chat-completions endpoint on 127.0.0.1 whose behaviour the test switches."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests = 0
        self.release = threading.Event()  # ends hung requests at teardown
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests += 1
                if server.mode == "hang":
                    server.release.wait(10)
                    return
                status, body = {"500": (500, b'{"error": {"message": "boom"}}'),
                                "garbage": (200, b'{"choices": [tru'),
                                "ok": (200, json.dumps(REPLY).encode())}[server.mode]
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    fake = FakeServer()
    yield fake
    fake.close()


def _eval(server, out, *extra):
    args = ["eval", "--policy", "openai", "--model", "m", "--base-url", server.url, "--limit", "2",
            "--max-calls", "1", "--max-retries", "0", "--request-timeout", "0.5", "--total-timeout", "2",
            "--out", str(out), "--no-progress", *extra]
    return runner.invoke(app, args)


@pytest.mark.parametrize(("mode", "kind"), [("500", "server_error"), ("garbage", "bad_response"), ("hang", "timeout")])
def test_a_failing_server_is_an_error_with_its_kind_and_a_rerun_retries(tmp_path, server, mode, kind):
    out = tmp_path / "run"
    server.mode = mode
    failed = _eval(server, out)
    assert failed.exit_code == 1, failed.output
    text = " ".join(failed.output.split())
    assert "2 of 2 rollouts (100.0%) failed for infrastructure reasons" in text and kind in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors_by_kind"] == {kind: 2} and summary["infra_failures"] == 2
    assert summary["overall"]["errors"] == 2 and summary["overall"]["successes"] == 0
    assert all(f["kind"] == kind and f["infra"] for f in summary["failed"])

    server.mode = "ok"
    sent = server.requests
    fixed = _eval(server, out)
    assert fixed.exit_code == 0, fixed.output
    assert server.requests == sent + 2, "both failed rollouts are sent again"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors_by_kind"] == {} and summary["overall"]["errors"] == 0

    again = _eval(server, out)
    assert again.exit_code == 0 and server.requests == sent + 2, "model outcomes are final: nothing is resent"


def test_infrastructure_failures_within_the_allowed_share_exit_zero(tmp_path, server):
    server.mode = "500"
    result = _eval(server, tmp_path / "run", "--max-infra-failures", "1.0")
    assert result.exit_code == 0, result.output
    assert "server_error: 2" in result.output


def test_an_endpoint_that_is_down_is_endpoint_down(tmp_path, server):
    url = server.url
    server.close()
    result = runner.invoke(app, ["eval", "--policy", "openai", "--model", "m", "--base-url", url, "--limit", "1",
                                 "--max-retries", "0", "--out", str(tmp_path / "run"), "--no-progress"])
    assert result.exit_code == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["errors_by_kind"] == {"endpoint_down": 1}


def test_bad_timeouts_are_one_line_errors(tmp_path, server):
    result = _eval(server, tmp_path / "run", "--total-timeout", "0")
    assert result.exit_code == 2 and "total_timeout_s must be > 0" in " ".join(result.output.split())
