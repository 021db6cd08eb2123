"""One context policy for both samplers: the same over-long prompt becomes the same prompt
in-process and against a (mock) vLLM server, and the one difference (no tokenizer, no token
cut) is the named option `context_overflow="refuse"`."""

from __future__ import annotations

import json

import httpx2
import pytest

from sera.policy.errors import SamplerError
from sera.policy.openai_sampler import OpenAISampler
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.policy import SamplingParams
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.types import Message


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer(seed=0)


class Recorder:
    """A mock vLLM that answers both routes with a one-token completion and records requests."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append({"path": request.url.path, "json": body})
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if request.url.path.endswith("/chat/completions"):
            choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length",
                      "token_ids": [5], "logprobs": {"content": [{"token": "ok", "logprob": -0.1}]}}
            return httpx2.Response(200, json={"choices": [choice], "usage": usage, "prompt_token_ids": [1]})
        choice = {"index": 0, "text": "ok", "finish_reason": "length", "token_ids": [5],
                  "prompt_token_ids": body["prompt"], "logprobs": {"token_logprobs": [-0.1]}}
        return httpx2.Response(200, json={"choices": [choice], "usage": usage})


def remote(server: Recorder, **kwargs) -> OpenAISampler:
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(server))
    return OpenAISampler("http://vllm.test/v1", "m", http_client=client, max_retries=0, **kwargs)


def conversation(last: str) -> list[Message]:
    messages = [Message(role="system", content="You are an agent."), Message(role="user", content="Craft a stick.")]
    for i in range(3):
        messages += [Message(role="assistant", content=f"<python>craft({i})</python>"),
                     Message(role="user", content=f"[Cell {i} Output]\ndone")]
    return messages[:-1] + [Message(role="user", content=last)]


async def test_dropping_turns_keeps_the_same_messages_in_both(tiny) -> None:
    model, tokenizer = tiny
    local = TransformersSampler(model, tokenizer)
    messages = conversation("[Cell 2 Output]\ndone")
    cap = len(local.chat_ids(messages[:2] + messages[-2:]))
    sampling = SamplingParams(max_tokens=1, seed=0, max_prompt_tokens=cap)
    server = Recorder()
    here = await local(messages, sampling)
    there = await remote(server, tokenizer=tokenizer)(messages, sampling)
    assert here.prompt_messages == there.prompt_messages == messages[:2] + messages[-2:]
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert [m["content"] for m in server.requests[0]["json"]["messages"]] == [m.content for m in here.prompt_messages]
    await local.close()


async def test_a_newest_turn_over_the_cap_is_cut_the_same_way_by_both(tiny) -> None:
    model, tokenizer = tiny
    local = TransformersSampler(model, tokenizer)
    messages = conversation("word " * 300)
    head = local.chat_ids(messages[:2], add_generation_prompt=False)
    sampling = SamplingParams(max_tokens=1, seed=0, max_prompt_tokens=len(head) + 40)
    server = Recorder()
    sampler = remote(server, tokenizer=tokenizer)
    assert sampler.context.overflow == local.context.overflow == "cut_tokens"
    here = await local(messages, sampling)
    there = await sampler(messages, sampling)
    # The cut ids go to /completions as a token prompt: exactly the in-process prompt.
    sent = server.requests[0]
    assert sent["path"] == "/v1/completions" and sent["json"]["prompt"] == here.prompt_token_ids
    assert there.prompt_token_ids == here.prompt_token_ids and len(here.prompt_token_ids) == len(head) + 40
    assert here.prompt_messages == there.prompt_messages == messages[:2] + messages[-2:]
    await local.close()


async def test_without_a_tokenizer_the_server_sampler_refuses_what_the_local_one_cuts(tiny) -> None:
    model, tokenizer = tiny
    messages = conversation("word " * 300)
    sampling = SamplingParams(max_tokens=1, seed=0, max_prompt_tokens=120)
    server = Recorder()
    sampler = remote(server)  # no tokenizer: token counts are estimates, there are no ids to cut
    assert sampler.context.overflow == "refuse"
    with pytest.raises(SamplerError) as caught:
        await sampler(messages, sampling)
    assert caught.value.kind == "prompt_too_long" and server.requests == []
    with pytest.raises(ValueError, match="render_ids"):
        remote(server, context_overflow="cut_tokens")
    # The same option makes the in-process sampler refuse the same way.
    local = TransformersSampler(model, tokenizer, context_overflow="refuse")
    with pytest.raises(SamplerError) as caught:
        await local(messages, sampling)
    assert caught.value.kind == "prompt_too_long" and "overflow='refuse'" in str(caught.value)
    await local.close()
