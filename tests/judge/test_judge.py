"""The external judge client: prompts, strict parsing, cache, retries, usage counts."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx2
import pytest

from sera.judge import JudgeClient, build_judge_messages, render_trajectory
from sera.judge.cache import ReplyCache, request_key
from sera.judge.parse import parse_judgement
from sera.types import Action, AgentNode, Message, Step

BASE = "http://judge.test/v1"
FAST = {"max_retries": 2, "backoff_s": (0.001, 0.002)}


def reply(text, prompt_tokens=100, completion_tokens=20):
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "kimi",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class Judge:
    """Mock judge endpoint: answers each request with the next scripted reply."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests: list[dict] = []

    def __call__(self, request):
        self.requests.append(json.loads(request.content))
        item = self.replies[0] if len(self.replies) == 1 else self.replies.pop(0)
        if isinstance(item, Exception):
            raise item
        if isinstance(item, httpx2.Response):
            return item
        return httpx2.Response(200, json=reply(item) if isinstance(item, str) else item)


def client_for(handler, **kwargs) -> JudgeClient:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return JudgeClient(BASE, "kimi-k2.6", http_client=http, **{**FAST, **kwargs})


def child_node(**changes) -> AgentNode:
    steps = [
        Step(index=0, prompt_len=2, completion_text="<action>take carrot</action>",
             action=Action(kind="text", thought="I need the carrot.", body="take carrot"),
             observation="You take the carrot."),
        Step(index=1, prompt_len=4, completion_text="???", action=Action(kind="invalid", parse_error="no tag"),
             observation="Invalid action.", error="parse error: no tag"),
    ]
    fields = dict(id="root.0", parent_id="root", fork_step=3, depth=1, goal="Fetch the carrot", budget=20,
                  steps=steps, finish_message="I hold the carrot.", verified_success=True,
                  verifier_info={"world_success_flag": "LEAKED_FLAG"}, rubric_score=0.9)
    fields.update(changes)
    return AgentNode(**fields)


# -- prompt --------------------------------------------------------------------------------------


def test_render_trajectory_shows_steps_and_ending_but_no_success_flags():
    text = render_trajectory(child_node())
    for needle in ["Action: take carrot", "Observation: You take the carrot.", "Thought: I need the carrot.",
                   "could not be parsed", "Error: parse error: no tag", "finished with the message: I hold the carrot."]:
        assert needle in text
    assert "LEAKED_FLAG" not in text and "verified" not in text.lower() and "0.9" not in text
    stopped = render_trajectory(child_node(finish_message=None, error="budget exhausted", steps=[]))
    assert "took no step" in stopped and "stopped without finishing: budget exhausted" in stopped


def test_render_trajectory_clips_long_observations():
    node = child_node()
    node.steps[0].observation = "a" * 5000 + "END"
    text = render_trajectory(node, max_observation_chars=100)
    assert "characters omitted" in text and "END" in text and "a" * 200 not in text


def test_judge_messages_label_child_goal_and_parent_goal_correctly():
    system, user = build_judge_messages("Fetch the carrot", "steps...", "carrot in inventory",
                                        parent_goal="Cook the soup")
    assert system.role == "system" and '"success"' in system.content
    assert "## Assigned goal of the sub-agent (this is what you judge)\nFetch the carrot" in user.content
    assert "## Goal of the parent agent that delegated it (context only)\nCook the soup" in user.content
    assert "Root Task" not in user.content and "root task" not in user.content.lower()
    _, no_parent = build_judge_messages("Fetch the carrot", "steps", "state")
    assert "parent agent that delegated" not in no_parent.content
    with pytest.raises(ValueError, match="goal"):
        build_judge_messages("  ", "steps", "state")


# -- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "success"),
    [
        ('{"success": true, "reason": "carrot taken"}', True),
        ('Verdict:\n```json\n{"success": false, "reason": "no carrot"}\n```', False),
        ('I think {"success": true, "reason": "ok"} is right.', True),
    ],
)
def test_parse_valid_judgements(text, success):
    parsed = parse_judgement(text)
    assert parsed.valid and parsed.success is success and parsed.reason


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"success": "yes", "reason": "ok"}', "'success' must be a JSON boolean, got str 'yes'"),
        ('{"success": 1, "reason": "ok"}', "got int 1"),
        ('{"reason": "ok"}', "missing key 'success'"),
        ('{"success": true}', "missing key 'reason'"),
        ('{"success": true, "reason": 3}', "'reason' must be a string"),
        ('{"success": true, "reason": "the carrot was', "truncated JSON"),
        ("The agent succeeded.", "no JSON object"),
        ("", "empty reply"),
        ('{"success": true, "reason": "a" "b"}', "malformed JSON"),
    ],
)
def test_parse_invalid_judgements_say_what_is_wrong(text, needle):
    parsed = parse_judgement(text)
    assert not parsed.valid and parsed.success is None
    assert parsed.error.startswith("invalid judgement: ") and needle in parsed.error


# -- client --------------------------------------------------------------------------------------


async def test_valid_true_and_false_judgements_and_request_shape():
    judge = Judge('{"success": true, "reason": "took it"}', '{"success": false, "reason": "did not"}')
    client = client_for(judge, extra_body={"reasoning_effort": "none"}, temperature=1.0,
                        max_tokens=1024)
    yes = await client.judge_child("Fetch the carrot", child_node(), "carrot: inventory", parent_goal="Cook")
    no = await client.judge_child("Fetch the carrot", "step text", "carrot: fridge")
    assert (yes.valid, yes.success, yes.reason, yes.cached) == (True, True, "took it", False)
    assert (no.valid, no.success) == (True, False)
    assert yes.usage.prompt_tokens == 100 and yes.usage.completion_tokens == 20
    sent = judge.requests[0]
    assert sent["model"] == "kimi-k2.6" and sent["temperature"] == 1.0 and sent["max_tokens"] == 1024
    assert sent["reasoning_effort"] == "none"
    assert "take carrot" in sent["messages"][1]["content"] and "LEAKED_FLAG" not in sent["messages"][1]["content"]
    judge_counts = client.usage.snapshot()["judge"]
    assert (judge_counts["calls"], judge_counts["prompt_tokens"] + judge_counts["completion_tokens"]) == (2, 240)
    await client.close()


async def test_invalid_judgement_is_returned_and_counted_as_invalid_reply():
    client = client_for(Judge('{"success": "yes", "reason": "ok"}'))
    out = await client.judge_child("Fetch", "steps", "state")
    assert not out.valid and out.success is None and "must be a JSON boolean" in out.error
    assert out.raw_text == '{"success": "yes", "reason": "ok"}'
    role = client.usage.snapshot()["judge"]
    assert (role["calls"], role["invalid_replies"], role["failed"]) == (1, 1, 0)


async def test_cache_hit_makes_no_request_and_is_counted_apart(tmp_path):
    judge = Judge('{"success": true, "reason": "ok"}')
    client = client_for(judge, cache_dir=str(tmp_path))
    first = await client.judge_child("Fetch", "steps", "state")
    second = await client.judge_child("Fetch", "steps", "state")
    assert len(judge.requests) == 1
    assert not first.cached and second.cached and second.success is True and second.usage == first.usage
    role = client.usage.snapshot()["judge"]
    assert (role["calls"], role["cache_hits"]) == (1, 1)
    await client.judge_child("Fetch", "other steps", "state")  # another request, another key
    assert len(judge.requests) == 2


async def test_invalid_replies_are_not_cached(tmp_path):
    judge = Judge("no json here", '{"success": false, "reason": "no"}')
    client = client_for(judge, cache_dir=str(tmp_path))
    assert not (await client.judge_child("Fetch", "steps", "state")).valid
    again = await client.judge_child("Fetch", "steps", "state")
    assert again.valid and not again.cached and len(judge.requests) == 2


async def test_corrupt_cache_file_is_reported_and_recomputed(tmp_path, caplog):
    judge = Judge('{"success": true, "reason": "ok"}')
    client = client_for(judge, cache_dir=str(tmp_path))
    await client.judge_child("Fetch", "steps", "state")
    (entry,) = list(tmp_path.rglob("*.json"))
    entry.write_text('{"format": 1, "key": "trunc')
    out = await client.judge_child("Fetch", "steps", "state")
    assert out.valid and not out.cached and len(judge.requests) == 2
    assert client.cache.corrupt_entries == 1 and "unreadable entry" in caplog.text
    assert json.loads(entry.read_text())["text"] == '{"success": true, "reason": "ok"}'  # rewritten


def test_cache_key_covers_every_request_field(tmp_path):
    msgs = [Message(role="user", content="x")]
    base = request_key("judge_child", "kimi", msgs, 1.0, 1024, {"a": 1})
    assert base == request_key("judge_child", "kimi", msgs, 1.0, 1024, {"a": 1})
    others = [
        request_key("rubric", "kimi", msgs, 1.0, 1024, {"a": 1}),
        request_key("judge_child", "other", msgs, 1.0, 1024, {"a": 1}),
        request_key("judge_child", "kimi", [Message(role="user", content="y")], 1.0, 1024, {"a": 1}),
        request_key("judge_child", "kimi", msgs, 0.0, 1024, {"a": 1}),
        request_key("judge_child", "kimi", msgs, 1.0, 512, {"a": 1}),
        request_key("judge_child", "kimi", msgs, 1.0, 1024, {"a": 2}),
    ]
    assert base not in others and len(set(others)) == len(others)
    cache = ReplyCache(tmp_path)
    assert cache.get(base) is None and not list(tmp_path.rglob("*.tmp"))


async def test_retries_5xx_then_succeeds():
    judge = Judge(httpx2.Response(502, text="bad gateway"), '{"success": true, "reason": "ok"}')
    client = client_for(judge)
    out = await client.judge_child("Fetch", "steps", "state")
    assert out.valid and len(judge.requests) == 2 and client.stats.retries == 1


async def test_endpoint_down_returns_invalid_judgement_not_exception():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = JudgeClient(f"http://127.0.0.1:{port}/v1", "kimi", max_retries=1, backoff_s=(0.001, 0.001),)
    out = await client.judge_child("Fetch", "steps", "state")
    assert not out.valid and "endpoint_down" in out.error
    role = client.usage.snapshot()["judge"]
    assert role["failed_by_kind"] == {"endpoint_down": 1} and role["calls"] == 1
    await client.close()


async def test_server_error_and_timeout_return_invalid_judgements():
    for failure, kind in [(httpx2.Response(500, text="boom"), "server_error"),
                          (httpx2.ReadTimeout("slow"), "timeout")]:
        judge = Judge(failure)
        out = await client_for(judge).judge_child("Fetch", "steps", "state")
        assert not out.valid and kind in out.error and len(judge.requests) == 3  # 1 + 2 retries


async def test_concurrency_limit_respected():
    in_flight, peak = 0, 0

    async def slow(request):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return httpx2.Response(200, json=reply('{"success": true, "reason": "ok"}'))

    client = client_for(slow, max_concurrency=2)
    results = await asyncio.gather(*(client.judge_child("Fetch", f"steps {i}", "s") for i in range(7)))
    assert all(r.valid for r in results) and peak == 2


async def test_complete_json_for_rubric_roles():
    judge = Judge('```json\n{"criteria": [{"name": "a", "weight": 1.0}]}\n```', "not json")
    client = client_for(judge)
    good = await client.complete_json([Message(role="user", content="write a rubric")], role="ext_rubric",
                                      max_tokens=256)
    bad = await client.complete_json([Message(role="user", content="score it")], role="ext_score")
    assert good.valid and good.data == {"criteria": [{"name": "a", "weight": 1.0}]}
    assert not bad.valid and "invalid JSON reply" in bad.error
    assert judge.requests[0]["max_tokens"] == 256
    roles = client.usage.snapshot()
    assert sorted(roles) == ["ext_rubric", "ext_score"]  # no judge call was made
    assert roles["ext_rubric"]["calls"] == 1 and roles["ext_rubric"]["invalid_replies"] == 0
    assert roles["ext_score"]["invalid_replies"] == 1
