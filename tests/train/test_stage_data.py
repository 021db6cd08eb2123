"""Trees -> datums per stage: hand-computed trees, then recorded TextCraft rollouts with
counterfactual groups run through every credit rule."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import pytest

from sera.credit import leaf_coverage
from sera.envs.registry import get_env
from sera.testing.sabotage import SabotagedPolicy
from sera.testing.tiny import tiny_tokenizer
from sera.policy.tokenizing_policy import TokenizingPolicy
from sera.rubric import parse_rubric
from sera.rubric.scripted import RubricOracle
from sera.runtime.config import RuntimeConfig
from sera.train.collect import Collector
from sera.agents.protocol import TEXT
from sera.envs.registry import EnvTraining
from sera.train.method import get_method
from sera.train.stage_data import build_batch
from sera.types import Action, AgentNode, ForkBranch, ForkGroup, ModelCall, RolloutTree, Step

ENV = EnvTraining(protocol=TEXT, label_source="verifier", filter_zero_variance=False, drop_error_steps=False,
                  score_max_tokens_rt=512)


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def step(text: str, prompt: str = "p", children: tuple[str, ...] = (), index: int = 0) -> Step:
    return Step(index=index, prompt_len=2, prompt_token_ids=chars(prompt), completion_text=text,
                completion_token_ids=chars(text), action=Action(kind="text", body=text),
                observation="o", child_ids=list(children))


def node(node_id: str, parent: str | None = None, **fields) -> AgentNode:
    depth = 0 if parent is None else 1
    return AgentNode(id=node_id, parent_id=parent, fork_step=None if parent is None else 0, depth=depth,
                     goal=f"goal of {node_id}", budget=20, **fields)


LAUNCH = 'go<delegate>{"delegations": [{"goal": "a"}, {"goal": "b"}]}</delegate>'


def tree_a() -> RolloutTree:
    """Root succeeded; launched n1 (rubric score .6, verified) and n2 (invalid rubric, failed)."""
    return RolloutTree(task_id="t", env="e", root_id="n0", root_success=True, nodes={
        "n0": node("n0", steps=[step(LAUNCH, children=("n1", "n2"))]),
        "n1": node("n1", "n0", steps=[step("<action>x</action>", "q")], rubric_score=0.6, verified_success=True),
        "n2": node("n2", "n0", steps=[step("<action>y</action>", "r")], verified_success=False,
                   rubric_call=ModelCall(role="rubric", prompt_messages=[], error="invalid rubric: too short")),
    })


def tree_b() -> RolloutTree:
    """Root failed; it tried to delegate with broken JSON (no child)."""
    return RolloutTree(task_id="t", env="e", root_id="n0", root_success=False,
                       nodes={"n0": node("n0", steps=[step('<delegate>{"goal": ')])})


def test_execution_stage_sera_hand_computed():
    batch = build_batch([[tree_a(), tree_b()]], "execution", get_method("sera"), ENV)
    got = {(d.trajectory_id, round(d.advantage, 6), round(d.weight, 6)) for d in batch.datums}
    # baselines: A -> R_B = 0, B -> R_A = 1; depth weights: T0 = 2, T1 = 1, Z = 3 / (2/2 + 1) = 1.5
    assert got == {("t#0/n0", 1.0, 0.75), ("t#0/n1", 0.6, 1.5), ("t#1/n0", -1.0, 0.75)}
    assert batch.counts["dropped: invalid rubric"] == 1
    assert sum(d.weight for d in batch.datums) == pytest.approx(len(batch.datums))
    root = next(d for d in batch.datums if d.trajectory_id == "t#0/n0")
    assert decode([t for t, m in zip(root.tokens, root.mask) if m]) == LAUNCH


def test_execution_stage_rao_uses_labels():
    batch = build_batch([[tree_a(), tree_b()]], "execution", get_method("rao"), ENV)
    got = {d.trajectory_id: d.advantage for d in batch.datums}
    assert got == {"t#0/n0": 1.0, "t#0/n1": 1.0, "t#0/n2": 0.0, "t#1/n0": -1.0}


def test_delegation_stage_hand_computed():
    batch = build_batch([[tree_a(), tree_b()]], "delegation", get_method("sera"), ENV, decode=decode)
    # A: one event covering both leaves, s = 1; B: an invalid attempt, s = 0. m_A = 1, m_B = 0.
    got = {d.trajectory_id: d.advantage for d in batch.datums}
    assert got == {"t#0/n0": 1.0, "t#1/n0": -1.0}
    launch = next(d for d in batch.datums if d.trajectory_id == "t#0/n0")
    assert decode([t for t, m in zip(launch.tokens, launch.mask) if m]) == LAUNCH[2:]
    assert batch.counts["invalid_launch_attempts"] == 1


def group(gid: str, scores, labels, rubric=True, parent_depth=0) -> ForkGroup:
    call = ModelCall(role="rubric", prompt_messages=[], prompt_token_ids=[1, 2], completion_text="{}",
                     completion_token_ids=[3, 4, 5])
    return ForkGroup(id=gid, parent_id="n0", parent_step=0, child_goal="g", parent_depth=parent_depth,
                     rubric={"rubric_items": []} if rubric else None, rubric_call=call if rubric else None,
                     branches=[ForkBranch(index=i, node_id=f"b{i}", label=l, rubric_score=s)
                               for i, (s, l) in enumerate(zip(scores, labels))])


def test_rubric_stage_hand_computed():
    a, b = tree_b(), tree_b()
    a.fork_groups = [group("g0", [0.9, 0.5, 0.3], [True, False, False]), group("g1", [0.5] * 3, [True] * 3)]
    b.fork_groups = [group("g0", [0.5, 0.6], [True, False]), group("g1", [0.1, 0.9], [True, False], rubric=False)]
    batch = build_batch([[a, b]], "rubric_generation", get_method("sera"), ENV)
    # R = [0, -0.3] (hinge max(0, .2 - (.5 - .6)) = .3); LOO -> [0.3, -0.3]
    got = {d.trajectory_id: round(d.advantage, 6) for d in batch.datums}
    assert got == {"t#0/g0": 0.3, "t#1/g0": -0.3}
    assert all(d.mask == (False, False, True, True, True) and d.depth == 1 for d in batch.datums)
    assert batch.counts["groups_homogeneous_or_unlabelled"] == 1 and batch.counts["groups_invalid_rubric"] == 1


# -- recorded TextCraft rollouts with counterfactual groups ---------------------------------------

TEXTCRAFT = get_env("textcraft-synth")


@pytest.fixture(scope="module")
def recorded():
    """Three rubric-stage and three execution-stage rollouts of one task, token ids from a real
    tokenizer, a seeded share of children giving up (mixed groups)."""
    tokenizer = tiny_tokenizer()
    task = next(t for t in TEXTCRAFT.load_split("val") if t.id == "textcraft_synth.val.1")

    async def collect(stage, seed):
        agent = SabotagedPolicy(TEXTCRAFT.oracle([task]), rate=0.35, seed=seed, protocol="codeact")
        policy = TokenizingPolicy(RubricOracle(agent), tokenizer)
        collector = Collector(policy, get_method("sera"), TEXTCRAFT,
                              RuntimeConfig(sampling=TEXTCRAFT.sampling))
        return await collector.collect(task, TEXTCRAFT.root_env(task), stage, seed=seed)

    async def all_trees():
        rt = [await collect("rubric_generation", s) for s in range(3)]
        ex = [await collect("execution", s) for s in range(3)]
        return rt, ex

    rt, ex = asyncio.run(all_trees())
    return tokenizer, rt, ex


def test_recorded_trees_round_trip(recorded):
    _, rt, ex = recorded
    for tree in rt + ex:
        assert RolloutTree.from_json(tree.to_json()) == tree


def test_recorded_rubric_stage(recorded):
    tokenizer, rt, _ = recorded
    batch = build_batch([rt], "rubric_generation", get_method("sera"), TEXTCRAFT.training)
    groups = [g for t in rt for g in t.fork_groups]
    assert len(groups) == 6  # two groups of 8 per rollout (16 copies)
    mixed = [g for g in groups if {b.label for b in g.branches} == {True, False}]
    assert len(batch.datums) == batch.counts["groups_trained"] == len(mixed) >= 2
    assert sum(d.advantage for d in batch.datums) == pytest.approx(0.0, abs=1e-9)  # LOO over groups
    for datum in batch.datums:
        text = tokenizer.decode([t for t, m in zip(datum.tokens, datum.mask) if m], skip_special_tokens=True)
        assert len(parse_rubric(text).criteria) == 4  # exactly the rubric completion is trained


def test_recorded_delegation_and_execution_stages_ignore_uncommitted_branches(recorded):
    tokenizer, rt, ex = recorded
    method, env = get_method("sera"), TEXTCRAFT.training
    for trees in (rt, ex):
        live = [set(t.live_nodes()) for t in trees]
        execution = build_batch([trees], "execution", method, replace(env, filter_zero_variance=False))
        for datum in execution.datums:
            index, node_id = datum.trajectory_id.split("#")[1].split("/")
            assert node_id in live[int(index)]
        assert sum(d.weight for d in execution.datums) == pytest.approx(len(execution.datums))
        delegation = build_batch([trees], "delegation", method, replace(env, filter_zero_variance=False),
                                 decode=tokenizer.decode)
        assert delegation.datums
        for datum in delegation.datums:
            trained = tokenizer.decode([t for t, m in zip(datum.tokens, datum.mask) if m])
            assert "launch_subagent" in trained and datum.mask[-1]  # truncated after the span
        covered = sum(len(leaf_coverage(t)) for t in trees)
        assert delegation.counts["events_trained"] == covered
    for tree in ex:  # SERA execution: every child scored by its parent's rubric
        children = [n for n in tree.nodes.values() if n.parent_id is not None]
        assert all(n.rubric_hash and n.rubric_score is not None and math.isfinite(n.rubric_score) for n in children)


def test_a_task_split_over_two_groups_is_refused():
    with pytest.raises(ValueError, match="share one LOO baseline"):
        build_batch([[tree_a()], [tree_b()]], "execution", get_method("sera"), ENV)
    other = tree_b().model_copy(update={"task_id": "u"})
    with pytest.raises(ValueError, match="mixes tasks"):
        build_batch([[tree_a(), other]], "execution", get_method("sera"), ENV)


def test_rao_bonus_counts_each_agents_own_labelled_children():
    from sera.credit import execution_rewards

    tree = tree_a()
    tree.nodes["n3"] = node("n3", "n1", verified_success=True).model_copy(update={"depth": 2})
    tree.nodes["n4"] = node("n4", "n1", verified_success=None).model_copy(update={"depth": 2})
    rewards = execution_rewards(tree, credit="rao", label_source="verifier", lam=0.5)
    # n1: own 1 + 0.5 * (1 success / 1 labelled child); n2 has no child; the root gets no bonus.
    assert rewards.rewards == {"n0": 1.0, "n1": 1.5, "n2": 0.0, "n3": 1.0}
    assert rewards.dropped == {"n4": "no verifier label"}
