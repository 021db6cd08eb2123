"""Counterfactual collection (rubric training): copies, budget, commit, labels, no leaks."""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest

from sera.envs.registry import get_env
from sera.envs.textcraft.world import CraftingWorld
from sera.judge import JudgeClient
from sera.testing.sabotage import SabotagedPolicy
from sera.rubric.scripted import RubricOracle
from sera.runtime.config import RuntimeConfig
from sera.runtime.rollout import run_rollout
from sera.launchers.counterfactual import CounterfactualLauncher
from sera.launchers.labels import JudgeLabeler, VerifierLabeler
from sera.launchers.rubric_calls import PolicyRubricScorer, PolicyRubricWriter

TEXTCRAFT = get_env("textcraft-synth")
TEXTWORLD = get_env("textworld-sync")
MACHINERY_WORDS = ("branch", "counterfactual", "rubric", "fork group")


def _task(env, task_id):
    return next(t for t in env.load_split(task_id.split(".")[1] if env is TEXTCRAFT else "test") if t.id == task_id)


def _launcher(policy, labeler=None, **kwargs) -> CounterfactualLauncher:
    return CounterfactualLauncher(
        PolicyRubricWriter(policy), PolicyRubricScorer(policy), labeler or VerifierLabeler(), **kwargs
    )


async def _collect(env, task, policy, launcher):
    config = RuntimeConfig(sampling=env.sampling)
    return await run_rollout(task, policy, env.root_env(task), config, launcher=launcher)


@pytest.mark.parametrize("task_id", ["textcraft_synth.val.5", "textcraft_synth.val.3"])
async def test_parallel_launches_keep_each_others_work(task_id):
    """The oracle's root launches two children in one `asyncio.gather`; both fork. With the
    reference's overwrite-commit the second commit erases the first child's crafts."""
    task = _task(TEXTCRAFT, task_id)
    policy = RubricOracle(TEXTCRAFT.oracle([task]))
    tree = await _collect(TEXTCRAFT, task, policy, _launcher(policy))
    launches = [s for s in tree.root.steps if len(s.child_ids) >= 2]
    assert launches, "the oracle should launch children in parallel on this task"
    assert len(tree.fork_groups) == 2
    assert tree.root_success is True
    assert tree.counters["world_clones"] == 2 * (8 + 1)  # 8 branch copies + 1 merge base per group
    for group in tree.fork_groups:
        assert [b.index for b in group.branches] == list(range(8))
        assert group.committed_branch == 0 and group.merge_conflicts == 0
        assert all(tree.nodes[b.node_id].fork_group_id == group.id for b in group.branches)
    live = tree.live_nodes()
    assert {n.id for n in live.values() if n.parent_id == tree.root_id} == {g.branches[0].node_id for g in tree.fork_groups}


async def test_overwriting_commit_would_lose_a_siblings_work(monkeypatch):
    task = _task(TEXTCRAFT, "textcraft_synth.val.5")
    policy = RubricOracle(TEXTCRAFT.oracle([task]))
    monkeypatch.setattr(CraftingWorld, "merge", lambda self, branch, base: (self.commit(branch), 0)[1])
    tree = await _collect(TEXTCRAFT, task, policy, _launcher(policy))
    assert tree.root_success is False


async def test_no_training_text_reaches_any_agent():
    task = _task(TEXTCRAFT, "textcraft_synth.val.1")
    policy = RubricOracle(SabotagedPolicy(TEXTCRAFT.oracle([task]), rate=0.3, seed=3, protocol="codeact"))
    tree = await _collect(TEXTCRAFT, task, policy, _launcher(policy))
    assert tree.fork_groups
    for node in tree.nodes.values():
        for message in node.messages:
            lowered = message.content.lower()
            assert not any(word in lowered for word in MACHINERY_WORDS), (node.id, message.content[:300])


async def test_copy_budget_caps_the_groups_of_a_rollout():
    task = _task(TEXTCRAFT, "textcraft_synth.val.1")
    policy = RubricOracle(TEXTCRAFT.oracle([task]))
    one = await _collect(TEXTCRAFT, task, policy, _launcher(policy, max_envs=9))
    assert len(one.fork_groups) == 1 and one.counters["fork_groups_skipped_budget"] >= 1
    none = await _collect(TEXTCRAFT, task, policy, _launcher(policy, max_envs=1))
    assert none.fork_groups == [] and none.counters.get("world_clones", 0) == 0
    assert none.root_success is True and one.root_success is True
    # The budget is per root rollout: a launcher reused after a rollout ended starts afresh,
    # and one shared by two concurrent rollouts is refused.
    launcher = _launcher(policy, max_envs=9)
    first = await _collect(TEXTCRAFT, task, policy, launcher)
    second = await _collect(TEXTCRAFT, task, policy, launcher)
    assert len(first.fork_groups) == len(second.fork_groups) == 1
    with pytest.raises(RuntimeError, match="one root rollout at a time"):
        await asyncio.gather(
            _collect(TEXTCRAFT, task, policy, launcher), _collect(TEXTCRAFT, task, policy, launcher)
        )


async def test_branches_are_labelled_by_the_verifier_and_scored_by_one_rubric():
    task = _task(TEXTCRAFT, "textcraft_synth.val.1")
    policy = RubricOracle(SabotagedPolicy(TEXTCRAFT.oracle([task]), rate=0.4, seed=1, protocol="codeact"))
    tree = await _collect(TEXTCRAFT, task, policy, _launcher(policy))
    assert tree.fork_groups
    for group in tree.fork_groups:
        assert group.rubric is not None and len(group.rubric_hash) == 64
        assert group.rubric_call.role == "rubric" and group.state_digest
        assert group.initial_state == {"inventory": group.initial_state["inventory"]}
        for branch in group.branches:
            node = tree.nodes[branch.node_id]
            assert branch.label_source == "verifier" and branch.label == node.verified_success
            assert branch.rubric_score is not None and branch.score_call.role == "score"
            assert node.goal == group.child_goal and node.depth == group.parent_depth + 1
    labels = [b.label for g in tree.fork_groups for b in g.branches]
    assert True in labels and False in labels  # sabotage makes the groups mixed
    assert tree.counters["rubric_calls"] == len(tree.fork_groups)
    assert tree.counters["score_calls"] == 8 * len(tree.fork_groups)


def _scripted_judge(requests: list[dict]):
    def handle(request):
        body = json.loads(request.content)
        requests.append(body)
        text = body["messages"][-1]["content"]
        success = "### Step 2" in text  # judged on evidence: more than one step of work
        content = json.dumps({"success": success, "reason": "scripted"})
        return httpx2.Response(200, json={
            "id": "j", "object": "chat.completion", "created": 0, "model": "judge",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })
    return handle


def _judge(requests):
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(_scripted_judge(requests)))
    return JudgeClient("http://judge.test/v1", "judge", http_client=http, max_retries=0)


async def test_textworld_branches_are_judged_eight_calls_per_group():
    task = next(t for t in TEXTWORLD.load_split("test") if t.difficulty == "easy")
    policy = RubricOracle(SabotagedPolicy(TEXTWORLD.oracle([task]), rate=0.3, seed=0, protocol="text"))
    requests: list[dict] = []
    tree = await _collect(TEXTWORLD, task, policy, _launcher(policy, JudgeLabeler(_judge(requests))))
    assert 1 <= len(tree.fork_groups) <= 2
    assert len(requests) == 8 * len(tree.fork_groups) == tree.counters["judge_calls"]
    for group in tree.fork_groups:
        assert all(b.label_source == "judge" and b.label is not None for b in group.branches)


@pytest.mark.parametrize("overwrite", [False, True])
async def test_textworld_parallel_dish_children_keep_each_others_work(overwrite, monkeypatch):
    """Two dish children launched in one `<delegate>` block fork; a third runs plainly beside
    them. Merging keeps all three dishes; the reference's adopt-the-branch commit loses work."""
    from sera.envs.textworld.world import SyncWorld

    task = next(t for t in TEXTWORLD.load_split("test") if t.difficulty == "easy" and t.misc["family"] == "fork_join")
    policy = RubricOracle(TEXTWORLD.oracle([task]))
    if overwrite:
        monkeypatch.setattr(SyncWorld, "merge", lambda self, branch, base: (self.commit(branch), 0)[1])
    tree = await _collect(TEXTWORLD, task, policy, _launcher(policy, JudgeLabeler(_judge([]))))
    assert max(len(s.child_ids) for s in tree.root.steps) >= 16  # two groups of 8 in one step
    assert tree.root_success is (not overwrite)


async def test_a_group_without_a_valid_rubric_spends_no_judge_call():
    task = next(t for t in TEXTWORLD.load_split("test") if t.difficulty == "easy")

    async def no_json(messages, sampling):
        from sera.runtime.policy import Completion

        return Completion(text="I would rather not write JSON.")

    agent = TEXTWORLD.oracle([task])
    requests: list[dict] = []
    launcher = CounterfactualLauncher(
        PolicyRubricWriter(no_json), PolicyRubricScorer(no_json), JudgeLabeler(_judge(requests))
    )
    tree = await _collect(TEXTWORLD, task, agent, launcher)
    assert tree.fork_groups and requests == []
    for group in tree.fork_groups:
        assert group.rubric is None and group.rubric_error.startswith("invalid rubric")
        assert all(b.label is None and "no valid rubric" in b.label_error for b in group.branches)
    assert tree.counters["rubric_invalid"] == len(tree.fork_groups)
