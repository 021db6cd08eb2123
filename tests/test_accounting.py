"""Run accounting: per step and per role counts, and the AccountedPolicy wrapper."""

from __future__ import annotations

import asyncio
import json

import pytest

from sera.accounting import Accounting, AccountedPolicy
from sera.policy.errors import SamplerError
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.types import Message, Usage

MSGS = [Message(role="user", content="go")]


class ScriptedPolicy:
    """Returns or raises the next scripted outcome."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)

    async def __call__(self, messages, sampling):
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def completion(prompt_tokens, completion_tokens):
    return Completion(text="ok", usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens))


def test_counts_per_step_and_role_and_totals_are_json():
    acc = Accounting()
    acc.begin_step(0)
    acc.record_call("act", Usage(prompt_tokens=10, completion_tokens=5))
    acc.record_call("act", Usage(prompt_tokens=20, completion_tokens=7))
    acc.record_call("rubric", Usage(prompt_tokens=30, completion_tokens=40))
    acc.record_failure("score", "timeout")
    acc.record_world_clone(8)
    acc.begin_step(1)
    acc.record_call("judge", Usage(prompt_tokens=100, completion_tokens=9), invalid=True)
    acc.record_call("judge", Usage(prompt_tokens=50, completion_tokens=1))
    acc.record_cache_hit("judge")
    acc.record_failure("judge", "server_error")
    acc.record_verifier_call(3)

    snap = json.loads(json.dumps(acc.snapshot()))  # JSON-able
    step0, step1 = snap["steps"]
    assert step0["step"] == 0 and step1["step"] == 1
    assert step0["roles"]["act"] == {"calls": 2, "failed": 0, "failed_by_kind": {}, "invalid_replies": 0,
                                     "prompt_tokens": 30, "completion_tokens": 12, "cache_hits": 0}
    assert step0["roles"]["score"]["failed_by_kind"] == {"timeout": 1}
    assert (step0["model_calls"], step0["judge_calls"], step0["world_clones"]) == (4, 0, 8)
    judge = step1["roles"]["judge"]
    assert (judge["calls"], judge["failed"], judge["invalid_replies"], judge["cache_hits"]) == (3, 1, 1, 1)
    assert (step1["judge_calls"], step1["judge_tokens"], step1["external_calls"]) == (3, 160, 3)
    assert step1["verifier_calls"] == 3
    totals = snap["totals"]
    assert totals["model_calls"] == 7 and totals["failed_calls"] == 2 and totals["cache_hits"] == 1
    assert totals["prompt_tokens"] == 210 and totals["completion_tokens"] == 62
    assert totals["roles"]["act"]["calls"] == 2 and totals["world_clones"] == 8


def test_events_before_first_step_and_revisited_steps():
    acc = Accounting()
    acc.record_call("act")
    acc.begin_step(2)
    acc.record_call("act")
    acc.begin_step(1)
    acc.record_call("act")
    acc.begin_step(2)
    acc.record_call("act")
    steps = acc.snapshot()["steps"]
    assert [(s["step"], s["model_calls"]) for s in steps] == [(None, 1), (1, 1), (2, 2)]
    with pytest.raises(ValueError, match="step"):
        acc.begin_step(-1)


def test_external_roles_are_configurable():
    acc = Accounting(external_roles={"judge", "kimi_rubric"})
    acc.record_call("kimi_rubric", Usage(prompt_tokens=5, completion_tokens=5))
    acc.record_call("rubric", Usage(prompt_tokens=5, completion_tokens=5))
    totals = acc.snapshot()["totals"]
    assert (totals["external_calls"], totals["external_tokens"], totals["judge_calls"]) == (1, 10, 0)


async def test_accounted_policy_records_usage_and_failures_and_reraises():
    acc = Accounting()
    acc.begin_step(0)
    inner = ScriptedPolicy(completion(11, 3), SamplerError("endpoint_down", "refused"), ValueError("bug"))
    policy = AccountedPolicy(inner, acc, role="act")
    assert isinstance(policy, Policy)
    out = await policy(MSGS, SamplingParams())
    assert out.text == "ok"
    with pytest.raises(SamplerError) as info:
        await policy(MSGS, SamplingParams())
    assert info.value.kind == "endpoint_down"
    with pytest.raises(ValueError, match="bug"):
        await policy(MSGS, SamplingParams())
    act = acc.snapshot()["totals"]["roles"]["act"]
    assert act["calls"] == 3 and act["prompt_tokens"] == 11 and act["completion_tokens"] == 3
    assert act["failed_by_kind"] == {"endpoint_down": 1, "unexpected:ValueError": 1}


async def test_concurrent_recording_loses_nothing():
    acc = Accounting()
    policy = AccountedPolicy(ScriptedPolicy(*[completion(1, 1) for _ in range(200)]), acc, role="score")
    await asyncio.gather(*(policy(MSGS, SamplingParams()) for _ in range(200)))
    score = acc.snapshot()["totals"]["roles"]["score"]
    assert score["calls"] == 200 and score["prompt_tokens"] == 200
