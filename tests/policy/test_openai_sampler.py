"""OpenAISampler against mock servers that answer like vLLM 0.32.

Reply shapes follow vLLM 0.32's `entrypoints/openai/chat_completion/protocol.py` and
`completion/protocol.py`: `choices[0].token_ids`, top-level `prompt_token_ids` (chat) or
`choices[0].prompt_token_ids` (completions), `choices[0].logprobs.content[i].logprob` (chat),
`choices[0].logprobs.token_logprobs` (completions), errors as `{"error": {"message", "type",
"param", "code"}}`.
"""

from __future__ import annotations

import asyncio
import json
import socket

import httpx2
import pytest

from sera.policy.errors import SamplerError
from sera.policy.openai_http import HttpSettings
from sera.policy.openai_sampler import OpenAISampler
from sera.policy.repetition import loop_cut
from sera.runtime.policy import SamplingParams
from sera.testing.tiny import tiny_tokenizer
from sera.types import Message

BASE = "http://vllm.test/v1"
FAST = {"max_retries": 3, "backoff_s": (0.001, 0.002)}
MSGS = [Message(role="system", content="You act."), Message(role="user", content="Craft a stick.")]


def chat_body(text="craft('stick')", ids=(11, 12, 13), lps=(-0.5, -0.25, -0.125), prompt_ids=(1, 2, 3, 4),
              with_ids=True, with_logprobs=True, finish="stop"):
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
              "stop_reason": None}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                      "total_tokens": len(prompt_ids) + len(ids)}}
    if with_logprobs:
        choice["logprobs"] = {"content": [{"token": f"t{i}", "logprob": lp, "bytes": [], "top_logprobs": []}
                                          for i, lp in zip(ids, lps)]}
    if with_ids:
        choice["token_ids"] = list(ids)
        body["prompt_token_ids"] = list(prompt_ids)
    return body


def vllm_error(status, message, kind="BadRequestError"):
    return httpx2.Response(status, json={"error": {"message": message, "type": kind, "param": None, "code": status}})


class Server:
    """A scripted mock endpoint: each request gets the next reply; requests are recorded."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append({"path": request.url.path, "json": json.loads(request.content)})
        reply = self.replies[0] if len(self.replies) == 1 else self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, httpx2.Response):
            return reply
        return httpx2.Response(200, json=reply)


def sampler_for(server, **kwargs) -> OpenAISampler:
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(server))
    return OpenAISampler(BASE, "smollm2", http_client=client, **{**FAST, **kwargs})


async def test_success_reads_ids_logprobs_prompt_ids_and_sends_vllm_extension():
    server = Server(chat_body())
    sampler = sampler_for(server)
    sp = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=64, stop=("</code>",), seed=5)
    out = await sampler(MSGS, sp)
    assert out.text == "craft('stick')"
    assert out.token_ids == [11, 12, 13] and out.logprobs == [-0.5, -0.25, -0.125]
    assert out.prompt_token_ids == [1, 2, 3, 4] and out.finish_reason == "stop"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (4, 3)
    assert out.prompt_messages is None
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    body = sent["json"]
    assert body["return_token_ids"] is True and body["logprobs"] is True
    assert body["include_stop_str_in_output"] is True  # stop strings given: the text keeps the one generated
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["stop"], body["seed"]) == (
        0.7, 0.9, 64, ["</code>"], 5)
    assert body["messages"] == [{"role": "system", "content": "You act."}, {"role": "user", "content": "Craft a stick."}]
    await sampler.close()


async def test_a_stop_string_completion_keeps_the_stop_string_and_its_ids_decode_to_the_text():
    tokenizer = tiny_tokenizer()
    generated = "<python>print(1)</python>"
    ids = tokenizer.encode(generated, add_special_tokens=False)
    # vLLM with include_stop_str_in_output: the text ends with the stop string.
    server = Server(chat_body(text=generated, ids=ids, lps=[-0.1] * len(ids)))
    out = await sampler_for(server, tokenizer=tokenizer)(MSGS, SamplingParams(stop=("</python>",)))
    assert server.requests[0]["json"]["include_stop_str_in_output"] is True
    assert out.text == generated and out.text.endswith("</python>") and out.finish_reason == "stop"
    assert tokenizer.decode(out.token_ids, skip_special_tokens=True) == out.text


async def test_text_cut_inside_the_last_token_is_completed_to_the_generated_ids():
    tokenizer = tiny_tokenizer()
    ids = tokenizer.encode("<python>print(1)</python", add_special_tokens=False)  # last token: "python"
    # vLLM ends the text right after the stop string "</py", though the token spelled "python".
    server = Server(chat_body(text="<python>print(1)</py", ids=ids, lps=[-0.1] * len(ids)))
    with_tokenizer = await sampler_for(server, tokenizer=tokenizer)(MSGS, SamplingParams(stop=("</py",)))
    assert with_tokenizer.text == "<python>print(1)</python" == tokenizer.decode(with_tokenizer.token_ids)
    without = await sampler_for(server)(MSGS, SamplingParams(stop=("</py",)))
    assert without.text == "<python>print(1)</py"  # no tokenizer: the server's text as sent


async def test_no_logprobs_requested_sends_no_extension_and_requires_nothing():
    server = Server(chat_body(with_ids=False, with_logprobs=False))
    out = await sampler_for(server)(MSGS, SamplingParams(logprobs=False))
    assert out.token_ids is None and out.logprobs is None
    assert "return_token_ids" not in server.requests[0]["json"] and "logprobs" not in server.requests[0]["json"]
    assert "include_stop_str_in_output" not in server.requests[0]["json"]  # no stop strings, nothing to keep


async def test_server_ignoring_return_token_ids_is_missing_token_ids_when_required():
    sampler = sampler_for(Server(chat_body(with_ids=False)))
    with pytest.raises(SamplerError) as info:
        await sampler(MSGS, SamplingParams())
    assert info.value.kind == "missing_token_ids"
    assert "return_token_ids" in str(info.value) and "require_token_ids=False" in str(info.value)


async def test_server_without_logprobs_is_missing_token_ids():
    with pytest.raises(SamplerError) as info:
        await sampler_for(Server(chat_body(with_logprobs=False)))(MSGS, SamplingParams())
    assert info.value.kind == "missing_token_ids" and "logprobs" in str(info.value)


async def test_missing_ids_accepted_when_not_required():
    out = await sampler_for(Server(chat_body(with_ids=False, with_logprobs=False)), require_token_ids=False)(
        MSGS, SamplingParams())
    assert out.text == "craft('stick')" and out.token_ids is None and out.logprobs is None


async def test_500_then_200_is_retried_and_counted():
    server = Server(vllm_error(500, "engine hiccup", "InternalServerError"), chat_body())
    sampler = sampler_for(server)
    out = await sampler(MSGS, SamplingParams())
    assert out.token_ids == [11, 12, 13]
    assert len(server.requests) == 2
    assert (sampler.stats.attempts, sampler.stats.retries, sampler.stats.failures) == (2, 1, {})


async def test_503_forever_is_server_error_after_retries():
    server = Server(vllm_error(503, "overloaded", "ServiceUnavailableError"))
    sampler = sampler_for(server)
    with pytest.raises(SamplerError) as info:
        await sampler(MSGS, SamplingParams())
    assert info.value.kind == "server_error" and "503" in str(info.value) and "after 3 retries" in str(info.value)
    assert len(server.requests) == 4  # 1 + max_retries
    assert sampler.stats.failures == {"server_error": 1}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed when the block ends: nothing listens there


async def test_connection_refused_is_endpoint_down():
    sampler = OpenAISampler(f"http://127.0.0.1:{closed_port()}/v1", "m", max_retries=1, backoff_s=(0.001, 0.001))
    with pytest.raises(SamplerError) as info:
        await sampler(MSGS, SamplingParams())
    assert info.value.kind == "endpoint_down" and "127.0.0.1" in str(info.value)
    assert sampler.stats.attempts == 2
    await sampler.close()


async def test_timeout_is_retried_then_reported():
    server = Server(httpx2.ReadTimeout("slow"))
    sampler = sampler_for(server)
    with pytest.raises(SamplerError) as info:
        await sampler(MSGS, SamplingParams())
    assert info.value.kind == "timeout" and len(server.requests) == 4


async def test_timeout_then_success():
    server = Server(httpx2.ReadTimeout("slow"), chat_body())
    out = await sampler_for(server)(MSGS, SamplingParams())
    assert out.text == "craft('stick')" and len(server.requests) == 2


async def test_truncated_json_is_bad_response_not_retried():
    truncated = json.dumps(chat_body())[:60].encode()
    server = Server(httpx2.Response(200, content=truncated, headers={"content-type": "application/json"}))
    sampler = sampler_for(server)
    with pytest.raises(SamplerError) as info:
        await sampler(MSGS, SamplingParams())
    assert info.value.kind == "bad_response" and "unreadable JSON" in str(info.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda b: b.pop("choices"), "response.choices"),
        (lambda b: b["choices"][0].pop("message"), "choices[0].message"),
        (lambda b: b.pop("usage"), "response.usage"),
        (lambda b: b["choices"][0].update(token_ids=[1, 2]), "2 token ids but 3 logprobs"),
        (lambda b: b["choices"][0].update(token_ids=["a", "b", "c"]), "list of ints"),
    ],
)
async def test_missing_or_wrong_fields_are_bad_response(mutate, needle):
    body = chat_body()
    mutate(body)
    with pytest.raises(SamplerError) as info:
        await sampler_for(Server(body))(MSGS, SamplingParams())
    assert info.value.kind == "bad_response" and needle in str(info.value)


async def test_context_length_400_is_prompt_too_long():
    msg = ("This model's maximum context length is 8192 tokens. However, your prompt contains 9000 input "
           "tokens, which exceeds this limit even without any output tokens.")
    server = Server(vllm_error(400, msg))
    with pytest.raises(SamplerError) as info:
        await sampler_for(server)(MSGS, SamplingParams())
    assert info.value.kind == "prompt_too_long" and "8192" in str(info.value)
    assert len(server.requests) == 1


async def test_other_400_is_invalid_request_not_retried():
    server = Server(vllm_error(400, "temperature must be non-negative"))
    sampler = sampler_for(server)
    with pytest.raises(SamplerError) as info:
        await sampler(MSGS, SamplingParams(temperature=-1.0))
    assert info.value.kind == "invalid_request" and "temperature" in str(info.value)
    assert len(server.requests) == 1 and sampler.stats.failures == {"invalid_request": 1}


async def test_empty_completion_is_empty_text():
    body = chat_body(text=None, ids=(2,), lps=(-0.01,), finish="stop")
    out = await sampler_for(Server(body))(MSGS, SamplingParams())
    assert out.text == "" and out.token_ids == [2] and out.finish_reason == "stop"


async def test_zero_token_completion_has_empty_logprobs():
    body = chat_body(text="", ids=(), lps=(), finish="length")
    body["choices"][0]["logprobs"] = None
    out = await sampler_for(Server(body))(MSGS, SamplingParams())
    assert out.text == "" and out.token_ids == [] and out.logprobs == []


def long_conversation(turns: int) -> list[Message]:
    msgs = list(MSGS)
    for i in range(turns):
        msgs += [Message(role="assistant", content=f"action {i} " + "x" * 200),
                 Message(role="user", content=f"observation {i} " + "y" * 200)]
    return msgs


async def test_context_policy_drops_oldest_turns_and_reports_prompt():
    server = Server(chat_body())
    msgs = long_conversation(6)
    out = await sampler_for(server)(msgs, SamplingParams(max_prompt_tokens=250))
    sent = server.requests[0]["json"]["messages"]
    assert out.prompt_messages is not None and len(sent) == len(out.prompt_messages) < len(msgs)
    assert sent[:2] == [m.model_dump() for m in msgs[:2]] and sent[-1] == msgs[-1].model_dump()
    assert [m["content"] for m in sent] == [m.content for m in out.prompt_messages]


async def test_context_policy_with_tokenizer_counts_template_tokens():
    class CharTokenizer:  # one token per character of the rendered template
        def apply_chat_template(self, conv, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "".join(f"<{m['role']}>{m['content']}" for m in conv) + "<assistant>"

        def __call__(self, text, add_special_tokens):
            return {"input_ids": list(range(len(text)))}

    server = Server(chat_body())
    msgs = long_conversation(4)
    sampler = sampler_for(server, tokenizer=CharTokenizer())
    cap = sampler.count_prompt_tokens(msgs[:2] + msgs[-4:])
    out = await sampler(msgs, SamplingParams(max_prompt_tokens=cap))
    assert out.prompt_messages == msgs[:2] + msgs[-4:]


async def test_prompt_too_long_even_after_dropping_turns_sends_nothing():
    server = Server(chat_body())
    msgs = [MSGS[0], Message(role="user", content="z" * 4000)]
    with pytest.raises(SamplerError) as info:
        await sampler_for(server)(msgs, SamplingParams(max_prompt_tokens=100))
    assert info.value.kind == "prompt_too_long" and server.requests == []


async def test_complete_tokens_uses_completions_endpoint_with_token_prompt():
    body = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "text": " stick", "finish_reason": "length", "token_ids": [7, 8],
                         "prompt_token_ids": [1, 2, 3],
                         "logprobs": {"text_offset": [0, 1], "token_logprobs": [-1.0, -2.0],
                                      "tokens": ["a", "b"], "top_logprobs": [None, None]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    server = Server(body)
    out = await sampler_for(server).complete_tokens([1, 2, 3], SamplingParams(max_tokens=2))
    assert (out.text, out.token_ids, out.logprobs, out.prompt_token_ids) == (" stick", [7, 8], [-1.0, -2.0], [1, 2, 3])
    sent = server.requests[0]
    assert sent["path"] == "/v1/completions" and sent["json"]["prompt"] == [1, 2, 3]
    assert sent["json"]["logprobs"] == 0 and sent["json"]["return_token_ids"] is True


async def test_concurrency_limit_is_respected():
    in_flight, peak = 0, 0

    async def slow(request):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return httpx2.Response(200, json=chat_body())

    sampler = OpenAISampler(BASE, "m", max_concurrency=3,
                            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(slow)))
    await asyncio.gather(*(sampler(MSGS, SamplingParams()) for _ in range(10)))
    assert peak == 3


def test_backoff_is_exponential_capped_and_jittered():
    policy = HttpSettings(max_retries=5, backoff_s=(1.0, 8.0))
    for k, ceiling in enumerate([1, 2, 4, 8, 8]):
        delays = {policy.delay(k) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(delays) > 1
    with pytest.raises(ValueError, match="backoff_s"):
        HttpSettings(backoff_s=(5.0, 1.0))


async def test_repetition_stop_cuts_a_served_loop_where_the_in_process_sampler_would_stop():
    # vLLM has no such stop: the server generates to the cap and the client cuts the loop.
    tokenizer = tiny_tokenizer()
    prose = tokenizer.encode("<thought>craft", add_special_tokens=False)
    loop = tokenizer.encode(" 1.", add_special_tokens=False) * 40
    ids = prose + loop
    server = Server(chat_body(text=tokenizer.decode(ids), ids=ids, lps=[-0.1] * len(ids), finish="length"))
    out = await sampler_for(server, tokenizer=tokenizer)(MSGS, SamplingParams(max_tokens=len(ids), repetition_stop=32))
    end = loop_cut(ids, 32)
    assert end is not None and end < len(ids)
    assert out.finish_reason == "repetition" and out.token_ids == ids[:end] and len(out.logprobs) == end
    assert out.text == tokenizer.decode(ids[:end], skip_special_tokens=True) and out.usage.completion_tokens == end
    unchecked = await sampler_for(Server(chat_body(text="x", ids=ids, lps=[-0.1] * len(ids), finish="length")),
                                  tokenizer=tokenizer)(MSGS, SamplingParams(max_tokens=len(ids)))
    assert unchecked.token_ids == ids and unchecked.finish_reason == "length"


async def test_repetition_stop_cuts_a_loop_that_a_later_stop_string_ended():
    # The in-process sampler would have stopped at the loop, before the stop string came.
    tokenizer = tiny_tokenizer()
    ids = tokenizer.encode(" 1." * 40 + "</python>", add_special_tokens=False)
    server = Server(chat_body(text=tokenizer.decode(ids), ids=ids, lps=[-0.1] * len(ids), finish="stop"))
    out = await sampler_for(server, tokenizer=tokenizer)(MSGS, SamplingParams(stop=("</python>",), repetition_stop=32))
    assert out.finish_reason == "repetition" and out.token_ids == ids[:loop_cut(ids, 32)]
