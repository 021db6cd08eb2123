"""The shared OpenAI-compatible HTTP plumbing: explicit timeouts, a total budget per call, and
a judge that uses it without depending on the sampler."""

from __future__ import annotations

import asyncio
import inspect
import socket
import time

import httpx2
import pytest

import sera.judge.client
from sera.judge.client import JUDGE_HTTP, JudgeClient
from sera.policy.errors import SamplerError
from sera.policy.openai_http import HttpSettings, OpenAIEndpoint
from sera.policy.openai_sampler import OpenAISampler
from sera.runtime.policy import SamplingParams
from sera.types import Message

MSGS = [Message(role="user", content="hi")]


def test_defaults_detect_a_hung_server_within_minutes() -> None:
    settings = HttpSettings()
    assert settings.total_timeout_s <= 300 and settings.request_timeout_s <= settings.total_timeout_s
    timeout = settings.client_timeout()
    assert (timeout.connect, timeout.read) == (settings.connect_timeout_s, settings.request_timeout_s)
    assert JUDGE_HTTP.total_timeout_s == settings.total_timeout_s and JUDGE_HTTP.max_retries == 2
    with pytest.raises(ValueError, match="total_timeout_s"):
        HttpSettings(total_timeout_s=0)


async def test_a_server_that_never_answers_fails_with_timeout_within_the_total_budget() -> None:
    async def hang(request: httpx2.Request) -> httpx2.Response:
        await asyncio.sleep(60)
        raise AssertionError("unreachable")

    endpoint = OpenAIEndpoint(
        "http://hung.test/v1", api_key="x", max_concurrency=1,
        settings=HttpSettings(total_timeout_s=0.2, max_retries=5, backoff_s=(0.001, 0.001)),
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(hang)),
    )
    started = time.monotonic()
    with pytest.raises(SamplerError) as caught:
        await endpoint.chat(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.kind == "timeout" and "total_timeout_s=0.2" in str(caught.value)
    assert time.monotonic() - started < 2 and endpoint.stats.failures == {"timeout": 1}
    await endpoint.close()


async def test_request_timeout_bounds_each_attempt_against_a_silent_socket() -> None:
    with socket.socket() as listener:  # accepts connections (kernel backlog) but never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        settings = HttpSettings(request_timeout_s=0.2, connect_timeout_s=0.2, total_timeout_s=10,
                                max_retries=1, backoff_s=(0.001, 0.001))
        sampler = OpenAISampler(f"http://127.0.0.1:{port}/v1", "m", http=settings)
        started = time.monotonic()
        with pytest.raises(SamplerError) as caught:
            await sampler(MSGS, SamplingParams())
        assert caught.value.kind == "timeout" and "after 1 retries" in str(caught.value)
        assert sampler.stats.attempts == 2 and time.monotonic() - started < 5
        await sampler.close()


def test_overrides_replace_only_the_fields_given() -> None:
    sampler = OpenAISampler("http://x.test/v1", "m", http=HttpSettings(request_timeout_s=7), max_retries=1)
    assert (sampler.endpoint.settings.request_timeout_s, sampler.endpoint.settings.max_retries) == (7, 1)
    judge = JudgeClient("http://x.test/v1", "k", backoff_s=(0.5, 0.5))
    assert judge.endpoint.settings == HttpSettings(max_retries=2, backoff_s=(0.5, 0.5))


def test_the_judge_does_not_depend_on_a_sampler_module() -> None:
    assert "openai_sampler" not in inspect.getsource(sera.judge.client)


async def test_no_retry_is_waited_for_when_the_total_budget_would_run_out() -> None:
    calls = 0

    def overloaded(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        return httpx2.Response(503, json={"error": {"message": "overloaded"}})

    endpoint = OpenAIEndpoint(
        "http://busy.test/v1", api_key="x", max_concurrency=1,
        settings=HttpSettings(total_timeout_s=0.5, max_retries=5, backoff_s=(2.0, 2.0)),
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(overloaded)),
    )
    started = time.monotonic()
    with pytest.raises(SamplerError) as caught:
        await endpoint.chat(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.kind == "server_error" and "total_timeout_s=0.5 spent" in str(caught.value)
    assert calls == 1 and time.monotonic() - started < 0.5
    await endpoint.close()
