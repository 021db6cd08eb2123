"""SERA execution stage: a frozen rubric per child, written from the delegation point only."""

from __future__ import annotations

import json

import pytest

from sera.credit.execution import execution_rewards
from sera.envs.registry import get_env
from sera.rubric import RUBRIC_SCORER_MARKER, RUBRIC_WRITER_MARKER, rubric_from_dict
from sera.rubric.scripted import RubricOracle
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import Completion
from sera.runtime.rollout import run_rollout
from sera.launchers.rubric_calls import PolicyRubricScorer, PolicyRubricWriter
from sera.launchers.frozen_rubric import FrozenRubricLauncher

TEXTCRAFT = get_env("textcraft-synth")


class Recorder:
    """Wraps a policy and logs every call in order: (kind, messages, reply)."""

    def __init__(self, inner, break_rubric_for: str | None = None):
        self.inner = inner
        self.calls: list[tuple[str, list, str]] = []
        self.break_rubric_for = break_rubric_for

    async def __call__(self, messages, sampling):
        system = messages[0].content
        kind = "rubric" if RUBRIC_WRITER_MARKER in system else "score" if RUBRIC_SCORER_MARKER in system else "act"
        if kind == "rubric" and self.break_rubric_for and self.break_rubric_for in messages[-1].content:
            completion = Completion(text='{"rubric_items": []}')
        else:
            completion = await self.inner(messages, sampling)
        self.calls.append((kind, list(messages), completion.text))
        return completion


async def _run(task_id="textcraft_synth.val.3", **kwargs):
    task = next(t for t in TEXTCRAFT.load_split("val") if t.id == task_id)
    policy = Recorder(RubricOracle(TEXTCRAFT.oracle([task])), **kwargs)
    launcher = FrozenRubricLauncher(PolicyRubricWriter(policy), PolicyRubricScorer(policy))
    tree = await run_rollout(task, policy, TEXTCRAFT.root_env(task), RuntimeConfig(sampling=TEXTCRAFT.sampling),
                             launcher=launcher)
    return tree, policy


async def test_every_child_gets_a_frozen_hashed_rubric_and_a_gated_score():
    tree, policy = await _run()
    children = [n for n in tree.nodes.values() if n.parent_id is not None]
    assert children and tree.root_success is True
    for child in children:
        rubric = rubric_from_dict(child.rubric)
        assert child.rubric_hash == rubric.hash()
        assert child.rubric_call.role == "rubric" and child.score_call.role == "score"
        # The scorer was given exactly the frozen rubric.
        payload_text = child.score_call.prompt_messages[-1].content
        payload, _ = json.JSONDecoder().raw_decode(payload_text[payload_text.find("{"):])
        assert rubric_from_dict(payload["frozen_rubric"]).hash() == child.rubric_hash
        assessment = child.rubric_assessment
        expected = sum(rubric.weight_of(n) * s for n, s in assessment["criterion_scores"].items())
        assert child.rubric_score == pytest.approx(expected if assessment["success"] else 0.0)
    assert tree.counters["rubric_calls"] == tree.counters["score_calls"] == len(children)


async def test_the_rubric_request_holds_only_what_the_parent_had_at_the_launch():
    tree, policy = await _run()
    for child in (n for n in tree.nodes.values() if n.parent_id is not None):
        parent = tree.nodes[child.parent_id]
        request = child.rubric_call.prompt_messages[-1].content
        launching = parent.steps[child.fork_step]
        assert launching.completion_text in request  # the delegating reply
        for message in parent.messages[: launching.prompt_len]:
            assert message.content[:200] in request  # what the parent saw before deciding
        for step in child.steps:  # nothing the child did
            assert step.completion_text not in request
        assert launching.observation[:80] not in request  # nor what the launch returned
        first_child_call = next(
            i for i, (kind, messages, _) in enumerate(policy.calls)
            if kind == "act" and messages[1].content == child.messages[1].content
        )
        own_rubric_call = next(
            i for i, (kind, messages, _) in enumerate(policy.calls)
            if kind == "rubric" and messages == child.rubric_call.prompt_messages
        )
        assert own_rubric_call < first_child_call  # written concurrently, requested first


async def test_invalid_rubrics_follow_the_failure_policy():
    tree, _ = await _run(task_id="textcraft_synth.val.5", break_rubric_for="Delegated SubAgent Task")
    children = [n for n in tree.nodes.values() if n.parent_id is not None]
    assert children and all(c.rubric is None and c.rubric_score is None for c in children)
    assert all("invalid rubric" in c.rubric_call.error for c in children)
    assert tree.counters["rubric_invalid"] == len(children)
    dropped = execution_rewards(tree, credit="rubric", label_source="verifier", failure_policy="drop")
    assert set(dropped.rewards) == {tree.root_id} and set(dropped.dropped) == {c.id for c in children}
    assert all(reason.startswith("invalid rubric") for reason in dropped.dropped.values())
    binary = execution_rewards(tree, credit="rubric", label_source="verifier", failure_policy="binary")
    assert binary.rewards == {tree.root_id: 1.0, **{c.id: float(c.verified_success) for c in children}}
    skipped = execution_rewards(tree, credit="rubric", label_source="verifier", failure_policy="skip_rollout")
    assert skipped.skip_rollout is not None and skipped.rewards == {}


async def test_a_hanging_scorer_cannot_hang_the_rollout():
    import asyncio

    task = next(t for t in TEXTCRAFT.load_split("val") if t.id == "textcraft_synth.val.5")
    policy = RubricOracle(TEXTCRAFT.oracle([task]))

    class Hanging:
        async def score(self, rubric, child):
            await asyncio.sleep(3600)

    launcher = FrozenRubricLauncher(PolicyRubricWriter(policy), Hanging())
    config = RuntimeConfig(sampling=TEXTCRAFT.sampling, policy_timeout_s=0.5)
    tree = await run_rollout(task, policy, TEXTCRAFT.root_env(task), config, launcher=launcher)
    assert tree.root_success is True and "pending work timed out" in tree.error
    children = [n for n in tree.nodes.values() if n.parent_id is not None]
    assert children and all(c.rubric_score is None for c in children)
    dropped = execution_rewards(tree, credit="rubric", label_source="verifier").dropped
    assert set(dropped) == {c.id for c in children}
