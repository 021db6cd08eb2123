"""`ThreadedPolicy`: calls from successive `asyncio.run` loops all run on the sampler's one loop."""

from __future__ import annotations

import asyncio

import pytest

from sera.policy.threaded import ThreadedPolicy
from sera.runtime.policy import Completion, SamplingParams


class LoopBound:
    """Like an async HTTP client: fails when used from a loop other than its first one."""

    def __init__(self) -> None:
        self.loop = None
        self.model = "base"
        self.closed = False

    async def __call__(self, messages, sampling):
        loop = asyncio.get_running_loop()
        self.loop = self.loop or loop
        if loop is not self.loop:
            raise RuntimeError("Event loop is closed")
        await asyncio.sleep(0)
        return Completion(text=self.model)

    async def close(self):
        self.closed = True


def test_calls_from_successive_event_loops_share_the_samplers_loop() -> None:
    inner = LoopBound()
    policy = ThreadedPolicy(inner)
    first = asyncio.run(policy([], SamplingParams()))
    inner.model = "policy-v000001"  # attributes are the inner sampler's
    second = asyncio.run(asyncio.wait_for(policy([], SamplingParams()), 5))
    assert (first.text, second.text) == ("base", "policy-v000001") and policy.model == "policy-v000001"
    with pytest.raises(RuntimeError, match="Event loop is closed"):  # what the unwrapped sampler would do
        asyncio.run(inner([], SamplingParams()))
    policy.close_now()
    assert inner.closed and not policy._thread.is_alive()
    with pytest.raises(RuntimeError, match="the sampler is closed"):
        asyncio.run(policy([], SamplingParams()))
    policy.close_now()  # idempotent
