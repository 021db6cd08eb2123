"""The recursive runtime on a tiny scripted environment: budgets, depth, concurrency, containment."""

from __future__ import annotations

import asyncio

import pytest

from sera.runtime import Completion, NodeHandle, Outcome, RuntimeConfig, SamplingParams, Verdict, run_rollout
from sera.types import Action, Message, RolloutTree, Task

TASK = Task(id="t0", goal="root", env="script")


class ScriptEnv:
    """Replies are commands: `finish M`, `spawn g1,g2` (concurrent children), `crash`, anything else echoes."""

    def __init__(self, handle: NodeHandle, log: list[str]) -> None:
        self.handle = handle
        self.log = log

    def initial_messages(self) -> list[Message]:
        return [Message(role="system", content="sys"), Message(role="user", content=self.handle.node.goal)]

    def parse(self, reply: str) -> Action:
        return Action(kind="text", body=reply)

    async def execute(self, action: Action) -> Outcome:
        cmd, _, arg = action.body.partition(" ")
        if cmd == "finish":
            return Outcome(observation="done", finished=True, finish_message=arg)
        if cmd == "crash":
            raise RuntimeError("environment bug")
        if cmd == "spawn":
            launches = [self.handle.launch(goal, lambda h: ScriptEnv(h, self.log)) for goal in arg.split(",")]
            results = await asyncio.gather(*launches, return_exceptions=True)
            return Outcome(observation=" | ".join(str(r if isinstance(r, Exception) else r.finish_message) for r in results))
        self.log.append(f"{self.handle.node.goal}:{action.body}")
        return Outcome(observation=f"echo {action.body}")

    def verify(self, finish_message: str | None) -> Verdict:
        return Verdict(success=finish_message == "ok", info={})

    async def close(self) -> None:
        self.log.append(f"closed {self.handle.node.goal}")


class ScriptPolicy:
    """Replies from a table keyed by goal: a list of replies, one per turn (last one repeats)."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = script
        self.active = 0
        self.peak = 0

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        goal = messages[1].content
        turn = sum(1 for m in messages if m.role == "assistant")
        replies = self.script[goal]
        reply = replies[min(turn, len(replies) - 1)]
        if reply.startswith("slow"):
            self.active += 1
            self.peak = max(self.peak, self.active)
            await asyncio.sleep(0.05)
            self.active -= 1
        if reply == "raise":
            raise ConnectionError("endpoint down")
        if reply == "hang":
            await asyncio.sleep(60)
        return Completion(text=reply)


def run(script: dict[str, list[str]], config: RuntimeConfig | None = None) -> tuple[RolloutTree, list[str], ScriptPolicy]:
    log: list[str] = []
    policy = ScriptPolicy(script)
    tree = asyncio.run(run_rollout(TASK, policy, lambda h: ScriptEnv(h, log), config))
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


def test_policy_timeout_and_rollout_timeout():
    tree, _, _ = run({"root": ["hang"]}, RuntimeConfig(policy_timeout_s=0.05))
    assert "timed out after 0.05 s" in tree.root.error

    script = {"root": ["spawn slowkid", "finish ok"], "slowkid": ["hang"]}
    tree, _, _ = run(script, RuntimeConfig(rollout_timeout_s=0.1))
    assert tree.error == "rollout timed out after 0.1 s"
    kid = next(n for n in tree.nodes.values() if n.goal == "slowkid")
    assert kid.error and "cancelled" in kid.error and tree.root.error


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
