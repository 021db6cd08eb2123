"""A stand-in for a vLLM server with runtime LoRA, for tests that cannot run vLLM.

It speaks the part of vLLM's HTTP API that training uses, with vLLM 0.32's shapes and refusals:
`GET /health`, `GET /v1/models`, `POST /v1/load_lora_adapter` (a loaded name: 400; an adapter
peft cannot read or a rank over `--max-lora-rank`: 500 "Call to add_lora method failed: ..."),
`POST /v1/unload_lora_adapter` (unknown name: 404), and `POST /v1/chat/completions` /
`/v1/completions` with `return_token_ids` and log-probs (an unknown model: 404). Generation is a
`TransformersSampler` over the base model or over a fresh copy of it with the adapter applied by
peft, so what it serves is what the adapter folder holds.

With `sleep_mode` (`--enable-sleep-mode`) it answers `POST /sleep` and `POST /wake_up` and
refuses completions (503) while asleep; `events` records sleeps, wakes, loads and completions
in order.

Test hooks: `refuse_loads` (every load answers 500 with that message), `POST /fake/exit` (the
process exits at once, as a crashed server), `vanish()` (an in-thread server stops listening).
Run as a process it takes vLLM's command line (`main()`; unknown flags are ignored), so a test can
put a `vllm/entrypoints/openai/api_server.py` calling it on `PYTHONPATH` and let `VLLMServer`
start it.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sera.policy.errors import SamplerError
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message


class FakeVLLM:
    """The fake server over the model folder `model_dir` (module docstring)."""

    def __init__(self, model_dir: str | Path, served_name: str = "base", port: int = 0, max_lora_rank: int = 16,
                 sleep_mode: bool = False) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        self.base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True).eval()
        self.served_name = served_name
        self.max_lora_rank = max_lora_rank
        self.refuse_loads: str | None = None
        """When set, every adapter load answers 500 with this message."""
        self.requests: list[tuple[str, str]] = []
        """(route, model name) of every completion request served."""
        self.sleep_mode = sleep_mode
        """`--enable-sleep-mode` (in dev mode): `POST /sleep` and `/wake_up` answer; otherwise 404."""
        self.asleep = False
        self.events: list[str] = []
        """`sleep`, `wake_up`, `load <name>` and `complete <name>`, in the order served."""
        self.samplers: dict[str, Any] = {served_name: self._sampler(self.base)}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible root."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _sampler(self, model: Any) -> Any:
        from sera.policy.threaded import ThreadedPolicy
        from sera.policy.transformers_sampler import TransformersSampler

        return ThreadedPolicy(TransformersSampler(model, self.tokenizer, max_batch_size=64))

    def start(self) -> FakeVLLM:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def vanish(self) -> None:
        """Stop listening, as a server that died (connections are refused afterwards)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        for sampler in self.samplers.values():
            sampler.close_now()

    # -- the API ----------------------------------------------------------------------------------

    def load(self, name: str, path: str) -> tuple[int, dict[str, Any]]:
        if name in self.samplers:
            return 400, _error(f"The lora adapter '{name}' has already been loaded. If you want to load the adapter "
                               "in place, set 'load_inplace' to True.", 400)
        if self.refuse_loads is not None:
            return 500, _error(f"Call to add_lora method failed: {self.refuse_loads}", 500)
        try:
            from peft import PeftModel

            config = json.loads((Path(path) / "adapter_config.json").read_text())
            if config["r"] > self.max_lora_rank:
                raise ValueError(f"LoRA rank {config['r']} is greater than max_lora_rank {self.max_lora_rank}.")
            model = PeftModel.from_pretrained(copy.deepcopy(self.base), path).eval()
        except Exception as exc:  # what vLLM's worker reports for an adapter it cannot use
            return 500, _error(f"Call to add_lora method failed: Worker failed with error '{exc}'", 500)
        self.samplers[name] = self._sampler(model)
        self.events.append(f"load {name}")
        return 200, {}

    def unload(self, name: str) -> tuple[int, dict[str, Any]]:
        if name == self.served_name or name not in self.samplers:
            return 404, _error(f"The lora adapter '{name}' cannot be found.", 404)
        self.samplers.pop(name).close_now()
        return 200, {}

    def complete(self, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("model", "")
        if name not in self.samplers:
            return 404, _error(f"The model `{name}` does not exist.", 404)
        if self.asleep:  # vLLM has no weights on the GPU to sample with
            return 503, _error("the engine is sleeping", 503)
        self.requests.append((route, name))
        self.events.append(f"complete {name}")
        sampling = SamplingParams(temperature=body.get("temperature", 1.0), top_p=body.get("top_p", 1.0),
                                  max_tokens=body.get("max_tokens", 16), stop=tuple(body.get("stop") or ()),
                                  seed=body.get("seed"), logprobs=body.get("logprobs") is not None)
        sampler = self.samplers[name]
        try:
            if route == "chat":
                messages = [Message(role=m["role"], content=m["content"]) for m in body["messages"]]
                done = asyncio.run(sampler(messages, sampling))
            else:
                done = asyncio.run(sampler.complete_tokens(body["prompt"], sampling))
        except SamplerError as exc:
            return 400, _error(str(exc), 400)
        return 200, _reply(route, done)

    def sleep(self, asleep: bool) -> tuple[int, dict[str, Any]]:
        if not self.sleep_mode:
            return 404, _error("Not Found", 404)
        self.asleep = asleep
        self.events.append("sleep" if asleep else "wake_up")
        return 200, {"status": "sleeping" if asleep else "awake"}

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model"} for name in self.samplers]}


def _error(message: str, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": "Error", "code": code}}


def _reply(route: str, done: Completion) -> dict[str, Any]:
    usage = {"prompt_tokens": len(done.prompt_token_ids or []), "completion_tokens": len(done.token_ids or [])}
    if route == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": done.text}, "finish_reason": done.finish_reason,
                  "token_ids": done.token_ids,
                  "logprobs": {"content": [{"logprob": lp} for lp in done.logprobs or []]}}
        return {"choices": [choice], "prompt_token_ids": done.prompt_token_ids, "usage": usage}
    choice = {"index": 0, "text": done.text, "finish_reason": done.finish_reason, "token_ids": done.token_ids,
              "prompt_token_ids": done.prompt_token_ids, "logprobs": {"token_logprobs": done.logprobs or []}}
    return {"choices": [choice], "usage": usage}


def _handler(fake: FakeVLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, payload: dict[str, Any] | None) -> None:
            data = json.dumps(payload).encode() if payload is not None else b""
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                self._send(200, None)
            elif self.path == "/v1/models":
                self._send(200, fake.models())
            else:
                self._send(404, _error(f"no route {self.path}", 404))

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/fake/exit":
                os._exit(1)  # a crash: no goodbye, no cleanup
            routes = {
                "/v1/load_lora_adapter": lambda: fake.load(body.get("lora_name", ""), body.get("lora_path", "")),
                "/v1/unload_lora_adapter": lambda: fake.unload(body.get("lora_name", "")),
                "/v1/chat/completions": lambda: fake.complete("chat", body),
                "/v1/completions": lambda: fake.complete("text", body),
                "/wake_up": lambda: fake.sleep(False),
            }
            if self.path.split("?")[0] == "/sleep":
                self._send(*fake.sleep(True))
                return
            if self.path not in routes:
                self._send(404, _error(f"no route {self.path}", 404))
                return
            code, payload = routes[self.path]()
            self._send(code, payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve as a process, taking vLLM's command line (`--model`, `--served-model-name`, `--port`, `--max-lora-rank`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", default="base")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-lora-rank", type=int, default=16)
    parser.add_argument("--enable-sleep-mode", action="store_true")
    args, _ = parser.parse_known_args(argv)
    fake = FakeVLLM(args.model, args.served_model_name, args.port, args.max_lora_rank, args.enable_sleep_mode)
    print(f"(APIServer pid={os.getpid()}) fake vllm serving {args.model} as {args.served_model_name} on port "
          f"{fake.port}: {' '.join(sys.argv)}", flush=True)  # vLLM's log names its pid the same way
    fake.httpd.serve_forever()


if __name__ == "__main__":
    main()
