"""The recursive runtime on a tiny scripted environment: budgets, depth, concurrency, containment."""

from __future__ import annotations

import asyncio

import pytest

from sera.runtime import RuntimeConfig, run_rollout
from sera.testing.script import ScriptEnv, ScriptPolicy
from sera.types import RolloutTree, Task

TASK = Task(id="t0", goal="root", env="script")


def run(
    script: dict[str, list[str]], config: RuntimeConfig | None = None, fail_in: dict[str, str] | None = None
) -> tuple[RolloutTree, list[str], ScriptPolicy]:
    log: list[str] = []
    policy = ScriptPolicy(script)
    tree = asyncio.run(run_rollout(TASK, policy, lambda h: ScriptEnv(h, log, fail_in), config))
    return tree, log, policy


def test_finish_records_steps_transcript_and_success():
    tree, _, _ = run({"root": ["hello", "finish ok"]})
    root = tree.root
    assert [s.completion_text for s in root.steps] == ["hello", "finish ok"]
    assert root.finish_message == "ok" and root.verified_success is True and tree.root_success is True
    # transcript = system, user, then assistant/observation pairs; prompts are prefixes of it
    assert [m.role for m in root.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [s.prompt_len for s in root.steps] == [2, 4]
    assert tree.counters["policy_calls"] == 2


def test_budget_exhausted_is_recorded():
    tree, _, _ = run({"root": ["again"]}, RuntimeConfig(max_calls_per_agent=5))
    assert len(tree.root.steps) == 5
    assert "exhausted the budget of 5" in tree.root.error
    assert tree.root_success is False


def test_children_have_their_own_budget_and_run_concurrently():
    script = {"root": ["spawn a,b", "finish ok"], "a": ["slow", "slow", "finish ok"], "b": ["slow", "finish ok"]}
    tree, _, policy = run(script, RuntimeConfig(max_calls_per_agent=3))
    assert policy.peak == 2, "sibling children did not overlap"
    root = tree.root
    assert len(root.steps) == 2 and root.error is None
    kids = tree.children(root.id)
    assert [k.goal for k in kids] == ["a", "b"]
    assert all(k.parent_id == root.id and k.fork_step == 0 and k.depth == 1 for k in kids)
    assert root.steps[0].child_ids == [k.id for k in kids]
    events = tree.delegation_events()
    assert len(events) == 1 and events[0].child_ids == [k.id for k in kids] and events[0].parent_step == 0
    assert {n.id for n in tree.leaves()} == {k.id for k in kids}


def test_depth_limit_refuses_launch_with_a_clear_message():
    script = {"root": ["spawn d1", "finish ok"], "d1": ["spawn d2", "finish ok"], "d2": ["spawn d3", "finish ok"]}
    tree, _, _ = run(script, RuntimeConfig(max_depth=2))
    d2 = next(n for n in tree.nodes.values() if n.goal == "d2")
    assert d2.depth == 2
    assert "maximum delegation depth is 2" in d2.steps[0].observation
    assert tree.depth() == 2 and not any(n.goal == "d3" for n in tree.nodes.values())


def test_failures_stay_inside_the_node_that_raised_them():
    script = {
        "root": ["spawn bad,crash,good", "finish ok"],
        "bad": ["raise"], "crash": ["crash"], "good": ["finish ok"],
    }
    tree, log, _ = run(script)
    by_goal = {n.goal: n for n in tree.nodes.values()}
    assert "policy call failed: ConnectionError: endpoint down" in by_goal["bad"].error
    assert "agent crashed: RuntimeError: environment bug" in by_goal["crash"].error
    assert by_goal["good"].verified_success is True
    assert tree.root_success is True and tree.root.error is None
    assert sum(1 for line in log if line.startswith("closed")) == 4, "every environment is closed"


@pytest.mark.parametrize("method", ["verify", "observable_state", "close"])
def test_a_childs_environment_failing_at_the_end_stays_on_the_child(method):
    script = {"root": ["spawn kid,sib", "finish ok"], "kid": ["finish ok"], "sib": ["finish ok"]}
    tree, log, _ = run(script, fail_in={"kid": method})
    by_goal = {n.goal: n for n in tree.nodes.values()}
    kid = by_goal["kid"]
    assert f"{method}() failed: RuntimeError: {method} bug in kid" in kid.env_error
    assert kid.error.startswith("environment failed:")
    assert tree.root.error is None and tree.root_success is True and tree.error is None
    assert by_goal["sib"].error is None and by_goal["sib"].final_state == {"goal": "sib"}
    assert sum(1 for line in log if line.startswith("closed")) == 3, "every environment is closed"
    if method != "verify":  # what did not fail is still recorded
        assert kid.verified_success is True


def test_a_root_environment_that_cannot_be_built_is_a_rollout_error():
    def broken(handle):
        raise OSError("no sandbox")

    tree = asyncio.run(run_rollout(TASK, ScriptPolicy({"root": ["finish ok"]}), broken))
    assert tree.root.env_error.startswith("building the environment failed: OSError: no sandbox")
    assert tree.error.startswith("the root environment failed: building the environment failed")
    assert tree.root.steps == [] and tree.root_success is None


def test_counters_are_declared_names_only():
    from sera.runtime.rollout import Rollout

    rollout = Rollout(TASK, ScriptPolicy({}))
    rollout.count("tool_calls", 2)
    with pytest.raises(ValueError, match="unknown counter 'tool_cals'"):
        rollout.count("tool_cals")


def test_policy_timeout_and_rollout_timeout():
    tree, _, _ = run({"root": ["hang"]}, RuntimeConfig(policy_timeout_s=0.05))
    assert "timed out after 0.05 s" in tree.root.error

    script = {"root": ["spawn slowkid", "finish ok"], "slowkid": ["hang"]}
    tree, _, _ = run(script, RuntimeConfig(rollout_timeout_s=0.1))
    assert tree.error == "rollout timed out after 0.1 s"
    kid = next(n for n in tree.nodes.values() if n.goal == "slowkid")
    assert kid.error and "cancelled" in kid.error and tree.root.error


def test_a_timed_out_rollout_records_every_descendant_as_ended():
    script = {"root": ["spawn mid", "finish ok"], "mid": ["spawn a,b", "finish ok"], "a": ["hang"], "b": ["hang"]}
    tree, _, _ = run(script, RuntimeConfig(rollout_timeout_s=0.2))
    assert tree.error == "rollout timed out after 0.2 s" and len(tree.nodes) == 4
    for node in tree.nodes.values():
        assert node.error and "cancelled" in node.error and node.ended_at >= node.started_at > 0, node.id


def test_launches_past_the_children_per_step_bound_are_refused_and_reported():
    script = {"root": ["spawn a,b,c", "finish ok"], "a": ["finish ok"], "b": ["finish ok"], "c": ["finish ok"]}
    tree, _, _ = run(script, RuntimeConfig(max_children_per_step=2))
    assert [n.goal for n in tree.children(tree.root_id)] == ["a", "b"]
    assert "no subagent was launched: one step may launch at most 2 subagents" in tree.root.steps[0].observation
    assert tree.root.bounds_hit == ["launch refused: one step may launch at most 2 subagents"]
    assert tree.counters["launches_refused"] == 1 and tree.error is None and tree.root_success is True


def test_a_policy_that_always_delegates_is_stopped_by_the_agent_bound():
    script = {"root": ["spawn k,k,k", "finish ok"], "k": ["spawn k,k,k", "finish ok"]}
    tree, _, _ = run(script, RuntimeConfig(max_agents_per_tree=10))
    assert len(tree.nodes) == 10 and tree.counters["launches_refused"] >= 3
    assert tree.error is None and tree.root_success is True
    assert any("at most 10 agents" in hit for n in tree.nodes.values() for hit in n.bounds_hit)


def test_the_tree_size_bound_ends_agents_with_a_clear_error():
    tree, _, _ = run({"root": ["x" * 30, "x" * 30, "finish ok"]}, RuntimeConfig(max_tree_chars=100))
    assert len(tree.root.steps) == 2
    assert tree.root.error == "stopped: the rollout's transcripts reached their limit of 100 characters"
    assert tree.root.bounds_hit == ["the rollout's transcripts reached their limit of 100 characters"]


def test_json_round_trip_is_lossless():
    script = {"root": ["spawn a,b", "finish ok"], "a": ["spawn c", "finish ok"], "b": ["finish no"], "c": ["x", "finish ok"]}
    tree, _, _ = run(script)
    again = RolloutTree.from_json(tree.to_json())
    assert again == tree
    assert again.to_json() == tree.to_json()
    assert again.depth() == 2
    a = next(n for n in again.nodes.values() if n.goal == "a")
    assert [n.goal for n in again.leaves_under(a.id)] == ["c"]
    assert len(again.leaves_under(again.root_id)) == 2


def test_from_json_names_the_broken_field():
    tree, _, _ = run({"root": ["finish ok"]})
    broken = tree.to_json().replace('"depth":0', '"depth":"deep"')
    with pytest.raises(ValueError, match="depth"):
        RolloutTree.from_json(broken)
