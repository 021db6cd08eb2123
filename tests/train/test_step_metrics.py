"""Step metrics: hand-built trees with every value computed by hand, then recorded TextCraft
rollouts (scripted oracle, rubric oracle, seeded sabotage) checked against their own records."""

from __future__ import annotations

import asyncio
import math
import statistics
from dataclasses import replace

import pytest

from sera.credit import leaf_coverage
from sera.envs.registry import get_env
from sera.runtime.config import RuntimeConfig
from sera.rubric.scripted import RubricOracle
from sera.testing.sabotage import SabotagedPolicy
from sera.train.collect import Collector
from sera.train.datums import Datum
from sera.train.method import get_method
from sera.train.stage_data import StageData, build_batch
from sera.train.step_metrics import batch_metrics, tree_metrics
from sera.types import Action, AgentNode, ForkBranch, ForkGroup, ModelCall, RolloutTree, Step, Task, Usage

# -- hand-built trees ---------------------------------------------------------------------------


def step(index=0, *, children=(), policy_s=0.0, env_s=0.0, error=None, forced=None, kind="code") -> Step:
    return Step(index=index, prompt_len=2, completion_text="x", action=Action(kind=kind), observation="o",
                error=error, forced=forced, child_ids=list(children), policy_s=policy_s, env_s=env_s)


def node(node_id, parent=None, depth=None, fork_step=0, **fields) -> AgentNode:
    depth = (0 if parent is None else 1) if depth is None else depth
    return AgentNode(id=node_id, parent_id=parent, fork_step=None if parent is None else fork_step, depth=depth,
                     goal=f"goal of {node_id}", budget=10, **fields)


def call(role, prompt, completion, **fields) -> ModelCall:
    return ModelCall(role=role, prompt_messages=[], usage=Usage(prompt_tokens=prompt, completion_tokens=completion), **fields)


def tree_frozen() -> RolloutTree:
    """Task t1, root succeeded; n1 has a valid rubric and score .8, n2 an invalid rubric."""
    return RolloutTree(task_id="t1", env="e", root_id="n0", root_success=True, wall_time_s=2.0, nodes={
        "n0": node("n0", steps=[step(0, children=("n1", "n2"), policy_s=1.0, env_s=5.0),
                                step(1, forced="loop_detector", env_s=0.5)]),
        "n1": node("n1", "n0", verified_success=True, rubric={"rubric_items": []}, rubric_score=0.8,
                   rubric_assessment={"success": True}, rubric_call=call("rubric", 10, 4),
                   score_call=call("score", 20, 3), steps=[step(0, error="boom", policy_s=0.5, env_s=0.25)]),
        "n2": node("n2", "n0", verified_success=False, rubric_call=call("rubric", 10, 2, error="invalid rubric"),
                   steps=[step(0, kind="invalid", error="could not parse", policy_s=0.25)]),
    }, counters={"policy_calls": 3, "prompt_tokens": 100, "completion_tokens": 10, "agents": 3, "rubric_calls": 2})


def tree_forked() -> RolloutTree:
    """Task t1, root failed; group g0 (valid rubric, branches b0 committed, b1, b2; b2 launched c)
    at step 0, group g1 (no rubric, external writer failed; d0 committed, d1) at step 1."""
    branch = {"b0": ("g0", 0), "b1": ("g0", 1), "b2": ("g0", 2), "d0": ("g1", 0), "d1": ("g1", 1)}
    nodes = {"n0": node("n0", steps=[step(0, children=("b0", "b1", "b2"), policy_s=1.0, env_s=3.0),
                                     step(1, children=("d0", "d1"), policy_s=1.0, env_s=2.0)])}
    for node_id, (group, index) in branch.items():
        times = {"b0": (0.5, 0.5), "d0": (0.25, 0.25)}.get(node_id, (0.5, 0.5))
        nodes[node_id] = node(node_id, "n0", fork_step=0 if group == "g0" else 1, fork_group_id=group,
                              branch_index=index, verified_success={"b0": True, "b1": False, "b2": False}.get(node_id),
                              steps=[step(0, policy_s=times[0], env_s=times[1])],
                              error="crashed" if node_id == "b2" else None)
    nodes["c"] = node("c", "b2", depth=2, steps=[step(0, policy_s=0.25, env_s=0.25)], verified_success=True)
    score = call("score", 40, 5)
    g0 = ForkGroup(id="g0", parent_id="n0", parent_step=0, child_goal="g", committed_branch=0,
                   rubric={"rubric_items": []}, rubric_call=call("rubric", 30, 6), branches=[
                       ForkBranch(index=0, node_id="b0", label=True, rubric_score=0.9, score_call=score),
                       ForkBranch(index=1, node_id="b1", label=False, rubric_score=0.95, score_call=score),
                       ForkBranch(index=2, node_id="b2", label=False, rubric_score=0.1, score_call=score)])
    g1 = ForkGroup(id="g1", parent_id="n0", parent_step=1, child_goal="h", committed_branch=0,
                   rubric_call=call("rubric", 70, 0, external=True, error="judge down"), rubric_error="judge down",
                   branches=[ForkBranch(index=i, node_id=f"d{i}", label_error="no rubric") for i in range(2)])
    return RolloutTree(task_id="t1", env="e", root_id="n0", root_success=False, wall_time_s=4.0, nodes=nodes,
                       fork_groups=[g0, g1],
                       counters={"policy_calls": 5, "verifier_calls": 3, "world_clones": 4, "agents": 6, "fork_groups": 2})


def tree_crashed() -> RolloutTree:
    """Task t2, the environment failed: no verdict (a failure), judge calls spent before."""
    return RolloutTree(task_id="t2", env="e", root_id="n0", root_success=None, error="env failed",
                       nodes={"n0": node("n0", error="crashed")},
                       counters={"judge_calls": 2, "judge_prompt_tokens": 50, "judge_completion_tokens": 7})


TASKS = [Task(id="t1", goal="g", env="e", difficulty="easy"), Task(id="t2", goal="g", env="e", difficulty="hard")]


def test_hand_built_trees():
    m = tree_metrics([[tree_frozen(), tree_forked()], [tree_crashed()]], TASKS)
    expected = {
        # success: a crashed rollout is a failure; t1 has both outcomes
        "trees": 3, "tree_errors": 1, "success": 1 / 3, "success/easy": 0.5, "success/hard": 0.0, "tasks/mixed": 0.5,
        # by depth, live nodes only: depth 1 = n1 (T), n2 (F), b0 (T); d0 has no label; b1, b2, c are not live
        "labelled/depth/0": 3, "success/depth/0": 1 / 3, "labelled/depth/1": 3, "success/depth/1": 2 / 3,
        # live agents: 3 (n0 n1 n2), 3 (n0 b0 d0), 1
        "agents/mean": 7 / 3, "agents/max": 3, "agents/live": 7, "agents/error": 1, "agents/depth/0": 3,
        "agents/depth/1": 4, "depth/mean": 2 / 3, "depth/max": 1,
        "steps/total": 8, "steps/forced": 1, "steps/error": 2, "steps/invalid_action": 1,
        # frozen rubrics of live children: n1 valid and scored, n2 invalid
        "rubric/children": 2, "rubric/valid": 0.5, "rubric/scored": 1.0, "rubric/score_mean": 0.8, "rubric/gate_pass": 1.0,
        # fork groups, every branch: g0 ranks (pairs b0>b1 wrong by .05, b0>b2 right by .8), g1 has no rubric
        "fork/groups": 2, "fork/branches": 5, "fork/rubric_valid": 0.5, "fork/labelled": 0.6, "fork/branch_success": 1 / 3,
        "fork/score_valid": 1.0, "fork/branch_score_mean": 0.65, "fork/mixed": 1.0,
        "ranking/groups": 1, "ranking/pairs": 2, "ranking/pair_accuracy": 0.5, "ranking/margin_satisfaction": 0.5,
        "ranking/mean_gap": 0.375,
        # leaf coverage: tree_frozen one event covering both leaves; tree_forked two events of 1/2 each
        "leaf_coverage/events": 3, "leaf_coverage/mean": 2 / 3, "leaf_coverage/trees_delegating": 2 / 3,
        # cost, branches included
        "calls/act": 8, "tokens/act/prompt": 100, "tokens/act/completion": 10, "calls/verifier": 3, "calls/judge": 2,
        "tokens/judge/prompt": 50, "tokens/judge/completion": 7, "world_clones": 4,
        "counters/agents": 9, "counters/fork_groups": 2,
        "calls/rubric": 3, "tokens/rubric/prompt": 50, "tokens/rubric/completion": 12,
        "calls/score": 4, "tokens/score/prompt": 140, "tokens/score/completion": 18,
        "calls/rubric_external": 1, "tokens/rubric_external/prompt": 70, "tokens/rubric_external/completion": 0,
        "calls/score_external": 0, "tokens/score_external/prompt": 0, "tokens/score_external/completion": 0,
        "tokens/policy/prompt": 290, "tokens/policy/completion": 40,
        # hand-built calls carry no timing
        "call_seconds/rubric": 0.0, "call_seconds/score": 0.0, "call_seconds/rubric_external": 0.0,
        "call_seconds/score_external": 0.0,
        "tree_seconds/mean": 2.0, "tree_seconds/max": 4.0,
        # every step of every node: policy 1 + .5 + .25 and 1 + 1 + (.5 + .25 + .5 + .5 + .5) + .25;
        # env .5 + .25 and (.5 + .25 + .5 + .5 + .5) + .25, the launching steps (5, 3, 2) left out
        "agent_seconds/policy": 6.25, "agent_seconds/env": 3.25,
    }
    assert set(m) == set(expected)
    for name, value in expected.items():
        assert m[name] == pytest.approx(value), name
    assert "counters/rubric_calls" not in m  # the call records supersede it


def test_statistics_over_nothing_are_left_out():
    lone = RolloutTree(task_id="t2", env="e", root_id="n0", root_success=True, nodes={"n0": node("n0")})
    m = tree_metrics([[lone]], [TASKS[1]])
    assert m["success"] == 1.0 and m["rubric/children"] == 0 and m["fork/groups"] == 0 and m["ranking/pairs"] == 0
    for absent in ("rubric/valid", "rubric/score_mean", "fork/rubric_valid", "ranking/pair_accuracy", "leaf_coverage/mean"):
        assert absent not in m
    assert m["leaf_coverage/events"] == 0 and m["leaf_coverage/trees_delegating"] == 0.0


def test_groups_must_line_up_with_tasks():
    with pytest.raises(ValueError, match="groups of trees for 2 tasks"):
        tree_metrics([[tree_frozen()]], TASKS)
    with pytest.raises(ValueError, match=r"groups\[0\] holds trees of \['t2'\]"):
        tree_metrics([[tree_crashed()], [tree_frozen()]], TASKS)


def datum(n_tokens, trained, advantage, weight, depth=0) -> Datum:
    mask = (False,) * (n_tokens - trained) + (True,) * trained
    return Datum(tokens=(1,) * n_tokens, mask=mask, sampler_logprobs=(math.nan,) * n_tokens, advantage=advantage,
                 depth=depth, trajectory_id=f"t/{n_tokens}", node_id="n", stage="execution", steps=(0,), weight=weight)


def test_batch_metrics_hand_computed():
    batch = StageData(datums=[datum(4, 2, 1.0, 0.5), datum(3, 1, -0.5, 1.0), datum(2, 1, 0.0, 1.5)])
    m = batch_metrics(batch)
    assert m == pytest.approx({
        "batch/datums": 3, "batch/trainable_datums": 2, "batch/tokens": 9, "batch/trained_tokens": 4,
        "batch/gradient_tokens": 3, "advantage/mean": 1 / 6, "advantage/std": statistics.pstdev([1.0, -0.5, 0.0]),
        "advantage/min": -0.5, "advantage/max": 1.0, "advantage/nonzero": 2 / 3,
        "advantage/token_mean": (1.0 * 0.5 * 2 - 0.5 * 1.0 * 1) / 4, "depth_weight/min": 0.5, "depth_weight/max": 1.5,
    })
    assert batch_metrics(StageData()) == {"batch/datums": 0, "batch/trainable_datums": 0, "batch/tokens": 0,
                                          "batch/trained_tokens": 0, "batch/gradient_tokens": 0}


# -- recorded TextCraft rollouts ------------------------------------------------------------------

TEXTCRAFT = get_env("textcraft-synth")


class WordTokens:
    """Token ids and usage for a scripted policy, one id per whitespace-separated word (a stand-in
    tokenizer: no model library to import)."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, messages, sampling):
        completion = await self.inner(messages, sampling)
        prompt = [len(w) for m in messages for w in m.content.split()]
        ids = [len(w) for w in completion.text.split()] + [0]
        return replace(completion, token_ids=ids, prompt_token_ids=prompt, logprobs=None,
                       usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(ids)))


@pytest.fixture(scope="module")
def recorded():
    """Two easy tasks x 2 trees, for the SERA execution stage (frozen rubrics) and the rubric stage
    (counterfactual groups of 8), depth 2, a seeded share of children giving up."""
    tasks = [t for t in TEXTCRAFT.load_split("val") if t.id in ("textcraft_synth.val.0", "textcraft_synth.val.5")]

    async def collect(task, stage, seed):
        agent = SabotagedPolicy(TEXTCRAFT.oracle([task]), rate=0.35, seed=seed, protocol="codeact")
        collector = Collector(WordTokens(RubricOracle(agent)), get_method("sera"), TEXTCRAFT,
                              RuntimeConfig(sampling=TEXTCRAFT.sampling, max_depth=2))
        return await collector.collect(task, TEXTCRAFT.root_env(task), stage, seed=seed)

    async def run():
        return {stage: [[await collect(t, stage, k) for k in range(2)] for t in tasks]
                for stage in ("execution", "rubric_generation")}

    return tasks, asyncio.run(run())


def test_recorded_success_shape_and_cost(recorded):
    tasks, by_stage = recorded
    for stage, groups in by_stage.items():
        trees = [t for g in groups for t in g]
        m = tree_metrics(groups, tasks)
        assert m["success"] == sum(bool(t.root_success) for t in trees) / 4
        assert m["success/easy"] == m["success"] and m["success/depth/0"] == m["success"]
        live = [t.live_nodes() for t in trees]
        assert m["agents/live"] == sum(map(len, live)) and m["agents/max"] == max(map(len, live))
        children = [n for nodes in live for n in nodes.values() if n.parent_id is not None]
        assert m["labelled/depth/1"] == sum(n.depth == 1 for n in children)  # the verifier labels every child
        counters = {k: sum(t.counters.get(k, 0) for t in trees) for k in
                    ("policy_calls", "rubric_calls", "rubric_completion_tokens", "score_calls", "score_completion_tokens")}
        # the call records agree with the launchers' counters; the records add prompt tokens
        assert m["calls/act"] == counters["policy_calls"]
        assert (m["calls/rubric"], m["tokens/rubric/completion"]) == (counters["rubric_calls"], counters["rubric_completion_tokens"])
        assert (m["calls/score"], m["tokens/score/completion"]) == (counters["score_calls"], counters["score_completion_tokens"])
        assert m["tokens/rubric/prompt"] > 0 and m["calls/rubric_external"] == 0
        assert m["tree_seconds/max"] == max(t.wall_time_s for t in trees) > 0
        coverage = [s for t in trees for s in leaf_coverage(t).values()]
        assert m["leaf_coverage/events"] == len(coverage) and m["leaf_coverage/mean"] == pytest.approx(sum(coverage) / len(coverage))
        assert tree_metrics([[RolloutTree.from_json(t.to_json()) for t in g] for g in groups], tasks) == m


def test_recorded_execution_stage_rubrics(recorded):
    tasks, by_stage = recorded
    groups = by_stage["execution"]
    m = tree_metrics(groups, tasks)
    children = [n for g in groups for t in g for n in t.live_nodes().values() if n.parent_id is not None]
    assert m["rubric/children"] == len(children) == m["calls/rubric"] and m["rubric/valid"] == 1.0
    assert m["rubric/score_mean"] == pytest.approx(sum(n.rubric_score for n in children) / len(children))
    assert m["fork/groups"] == 0 and m["world_clones"] == 0 and m["calls/verifier"] == 0


def test_recorded_rubric_stage_groups_and_pair_accuracy(recorded):
    tasks, by_stage = recorded
    groups = by_stage["rubric_generation"]
    trees = [t for g in groups for t in g]
    m = tree_metrics(groups, tasks)
    forks = [f for t in trees for f in t.fork_groups]
    assert m["fork/groups"] == len(forks) >= 4 and m["fork/branches"] == 8 * len(forks)
    assert m["calls/verifier"] == m["fork/branches"] == m["calls/score"]  # one label and one score per branch
    assert m["world_clones"] == 9 * len(forks)  # 8 copies and a merge base per group
    assert m["agents/live"] < m["counters/agents"]  # uncommitted branches are not live
    # pair accuracy, recomputed pair by pair
    pairs = [(s.rubric_score, f.rubric_score) for g in forks for s in g.branches for f in g.branches
             if s.label is True and f.label is False]
    assert m["ranking/pairs"] == len(pairs) > 0
    assert m["ranking/pair_accuracy"] == sum(a > b for a, b in pairs) / len(pairs)
    assert m["rubric/children"] == 0
    # the rubric stage trains one datum per mixed group: the rubric call's completion
    batch = batch_metrics(build_batch(groups, "rubric_generation", get_method("sera"), TEXTCRAFT.training))
    mixed = [f for f in forks if {b.label for b in f.branches} == {True, False}]
    assert batch["batch/datums"] == len(mixed) == round(m["fork/mixed"] * m["fork/groups"])
    assert batch["batch/trained_tokens"] == sum(f.rubric_call.usage.completion_tokens for f in mixed)
