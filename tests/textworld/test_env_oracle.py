"""TextWorld-Sync through the runtime: the agent environment, delegation, and the oracle."""

from __future__ import annotations

import asyncio
import json

import pytest
from _v9_rows import v9_row_from_spec, write_jsonl

from sera.envs.textworld.env import root_env_factory
from sera.envs.textworld.oracle import TextWorldOracle
from sera.envs.textworld.plan import plan_task
from sera.envs.textworld.spec import DIFFICULTIES, FAMILIES, SyncTaskSpec
from sera.envs.textworld.tasks import load_split, load_split_specs, load_tasks
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import Completion, SamplingParams
from sera.runtime.rollout import run_rollout
from sera.types import Message, Task


class ScriptedPolicy:
    """Replies from a script per goal prefix, in order; `<finish>` when a script runs out."""

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.scripts = scripts

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        first = messages[1].content
        turn = sum(m.role == "assistant" for m in messages)
        for prefix, replies in self.scripts.items():
            if first.startswith(f"# Task\n{prefix}"):
                return Completion(text=replies[turn] if turn < len(replies) else "<finish>out of script</finish>")
        raise AssertionError(f"no script for {first[:80]!r}")


def _task(spec: SyncTaskSpec) -> Task:
    return spec.to_task()


def _run(task: Task, policy, **config) -> object:
    return asyncio.run(run_rollout(task, policy, root_env_factory(task), RuntimeConfig(**config)))


def test_oracle_solves_every_family_and_difficulty_within_the_shared_budget():
    tasks = load_split("test")
    sample = [next(t for t in tasks if t.misc["family"] == f and t.difficulty == d) for f in FAMILIES for d in DIFFICULTIES]
    oracle = TextWorldOracle(sample)
    for task in sample:
        tree = asyncio.run(run_rollout(task, oracle, root_env_factory(task)))
        spec = SyncTaskSpec.from_task(task)
        assert tree.root_success, task.id
        assert tree.counters["world_actions"] <= spec.shared_budget, task.id
        assert tree.counters["world_actions"] == plan_task(spec).action_count, task.id
        assert len(tree.root.steps) <= 20 and all(len(n.steps) <= n.budget for n in tree.nodes.values())
        # Every dish was delegated, and each dish's agent passed its programmatic goal check.
        dish_agents = tree.children(tree.root_id)
        assert len(dish_agents) == len(spec.dishes)
        assert all(n.verified_success for n in dish_agents), task.id


def test_invalid_reply_costs_no_shared_step_and_says_why(make_spec):
    task = _task(make_spec())
    tree = _run(task, ScriptedPolicy({"Prepare": ["<action>go to pantry", "<action>x</action><finish>y</finish>"]}))
    step = tree.root.steps[1]
    assert step.action.kind == "invalid" and "2 blocks" in step.observation and "Nothing was done" in step.observation
    # Only the first (accepted) action reached the world.
    assert tree.counters["world_actions"] == 1


def test_parent_sees_child_results_and_child_budget_is_capped(make_spec):
    task = _task(make_spec())
    delegate = {"delegations": [{"goal": "Fetch the water for dish_1", "max_steps": 50},
                                {"goal": "Slice nothing", "max_steps": 2}]}
    policy = ScriptedPolicy({
        "Prepare": [f"<delegate>{json.dumps(delegate)}</delegate>", "<finish>done</finish>"],
        "Fetch the water": ["<action>go to pantry</action>", "<action>take water</action>", "<finish>water is ready</finish>"],
        "Slice nothing": ["<action>look around</action>"] * 3,
    })
    tree = _run(task, policy)
    children = {n.goal: n for n in tree.children(tree.root_id)}
    assert children["Fetch the water for dish_1"].budget == 20
    assert children["Slice nothing"].budget == 2 and children["Slice nothing"].error  # ran out of steps
    report = tree.root.steps[0].observation
    assert "[SubAgent Results]" in report and "result: water is ready" in report
    assert "goal check=true" in report  # the water is ready on the counter: a recognised, verified goal
    assert "steps used 3/20" in report and "[Current Environment Observation]" in report
    assert "50 steps were requested; a subagent has at most 20" in report
    assert children["Fetch the water for dish_1"].verified_success is True
    assert children["Slice nothing"].verified_success is None  # no dish or ingredient named: not covered


def test_child_budget_follows_the_runtime_config(make_spec):
    task = _task(make_spec())
    policy = ScriptedPolicy({
        "Prepare": ['<delegate>{"goal": "Fetch the water for dish_1", "max_steps": 20}</delegate>', "<finish>ok</finish>"],
        "Fetch the water": ["<finish>nothing to do</finish>"],
    })
    tree = _run(task, policy, max_calls_per_agent=7)
    system = tree.root.messages[0].content
    assert "at most 7 steps of its own" in system and "20 steps" not in system
    child = tree.children(tree.root_id)[0]
    assert child.budget == 7
    assert "20 steps were requested; a subagent has at most 7" in tree.root.steps[0].observation


def test_delegation_beyond_the_maximum_depth_is_refused_with_a_message(make_spec):
    task = _task(make_spec())
    policy = ScriptedPolicy({"Prepare": ['<delegate>{"goal": "do it"}</delegate>']})
    tree = _run(task, policy, max_depth=0, max_calls_per_agent=1)
    step = tree.root.steps[0]
    assert len(tree.nodes) == 1
    assert "maximum (0)" in step.observation and step.error


def test_a_finished_world_stops_every_agent(make_spec):
    task = _task(make_spec(budget=2))
    policy = ScriptedPolicy({"Prepare": ["<action>go to pantry</action>", "<action>go to kitchen</action>",
                                         "<action>go to garden</action>"]})
    tree = _run(task, policy)
    assert len(tree.root.steps) == 2
    assert "shared budget of actions is spent" in tree.root.steps[-1].observation
    assert tree.root_success is False


@pytest.mark.parametrize("family", ["fork_join", "resource_constrained", "conflict"])
def test_oracle_runs_dishes_concurrently_only_when_nothing_can_block(family):
    task = next(t for t in load_split("test") if t.misc["family"] == family and t.difficulty == "medium")
    spec = SyncTaskSpec.from_task(task)
    tree = asyncio.run(run_rollout(task, TextWorldOracle([task]), root_env_factory(task)))
    assert tree.root_success
    dish_events = [e for e in tree.delegation_events() if e.parent_id == tree.root_id]
    expected = 1 if plan_task(spec).concurrent else len(spec.dishes)
    assert len(dish_events) == expected
    if family == "fork_join" and spec.tools[0].cooldown_steps == 0:
        assert expected == 1


# -- rules profiles ----------------------------------------------------------------------------


def _v9_tasks(tmp_path, specs: list[SyncTaskSpec]) -> list[Task]:
    """Our generated specs written as an authors' V9 file (budgets drawn the authors' way), read back."""
    path = tmp_path / "v9.jsonl"
    write_jsonl(path, [v9_row_from_spec(s) for s in specs])
    return load_tasks(path)


def _solve(tasks: list[Task]) -> list[tuple[Task, object]]:
    oracle = TextWorldOracle(tasks)
    return [(t, asyncio.run(run_rollout(t, oracle, root_env_factory(t)))) for t in tasks]


def test_oracle_solves_authors_format_rows_under_reference_rules(tmp_path):
    specs = load_split_specs("test")
    sample = [next(s for s in specs if s.family == f and s.difficulty == d) for f in FAMILIES for d in DIFFICULTIES]
    tasks = _v9_tasks(tmp_path, sample)
    assert {t.misc["rules"] for t in tasks} == {"reference"}
    for task, tree in _solve(tasks):
        spec = SyncTaskSpec.from_task(task)
        assert tree.root_success, task.id
        assert tree.counters["world_actions"] == plan_task(spec).action_count <= spec.shared_budget, task.id
        assert tree.root.final_state["rules"] == {"profile": "reference", "child_report": "world_success", "child_start": "root"}
        assert tree.root.verifier_info["rules"]["profile"] == "reference"


@pytest.mark.slow
def test_oracle_solves_every_generated_test_task_under_sync_rules():
    for task, tree in _solve(load_split("test")):
        assert tree.root_success, task.id
        assert tree.root.final_state["rules"]["profile"] == "sync"


@pytest.mark.slow
def test_oracle_solves_every_authors_format_test_row_that_its_budget_allows(tmp_path):
    for task, tree in _solve(_v9_tasks(tmp_path, load_split_specs("test"))):
        spec = SyncTaskSpec.from_task(task)
        # The authors drew budgets without a plan; a row the plan does not fit is infeasible for it.
        assert tree.root_success == (plan_task(spec).action_count <= spec.shared_budget), task.id


def test_reference_rules_report_world_success_and_start_children_at_the_root(make_spec):
    task = make_spec().model_copy(update={"rules": "reference"}).to_task()
    policy = ScriptedPolicy({
        "Prepare": ["<action>go to pantry</action>", '<delegate>{"goal": "Fetch the water for dish_1"}</delegate>'],
        "Fetch the water": ["<action>look around</action>", "<finish>looked</finish>"],
    })
    tree = _run(task, policy)
    system = tree.root.messages[0].content
    assert "free" not in system and "looking around, checking the inventory" in system
    assert "ruins the dish" not in system
    report = tree.root.steps[1].observation
    assert "world success=false" in report and "goal check" not in report
    child = tree.children(tree.root_id)[0]
    assert child.final_state["location"] == "pantry"  # where the root stands (it never moved)
    assert tree.counters["world_actions"] == 2  # the child's look around cost a shared step


def test_child_options_override_the_profile(make_spec):
    task = make_spec().to_task()  # sync rules
    policy = ScriptedPolicy({
        "Prepare": ["<action>go to pantry</action>", '<delegate>{"goal": "Fetch the water for dish_1"}</delegate>'],
        "Fetch the water": ["<finish>nothing</finish>"],
    })
    factory = root_env_factory(task, child_report="world_success", child_start="root")
    tree = asyncio.run(run_rollout(task, policy, factory, RuntimeConfig()))
    assert "world success=false" in tree.root.steps[1].observation
    assert tree.root.final_state["rules"] == {"profile": "sync", "child_report": "world_success", "child_start": "root"}
    sync = _run(task, policy)
    assert "goal check=" in sync.root.steps[1].observation
    assert "free: they cost none" in sync.root.messages[0].content


def test_prompt_layout_follows_the_reference_sections_and_status_lines():
    task = load_split("test")[0]
    tree = asyncio.run(run_rollout(task, TextWorldOracle([task]), root_env_factory(task)))
    first = tree.root.messages[1].content
    heads = ["# Task\n", "# Initial Observation\n", "# Valid Actions\nValid Actions:\n- ", "# Action Space\n1. <action>",
             "# Delegation\n"]
    assert all(h in first for h in heads)
    assert [first.index(h) for h in heads] == sorted(first.index(h) for h in heads)
    initial = first.split("# Initial Observation\n")[1].split("\n\n# Valid Actions")[0]
    assert "Valid Actions" not in initial and "Shared steps:" in initial
    assert "4. <finish>" in first and first.rstrip().endswith("first action or delegation.")
    child = tree.children(tree.root_id)[0]
    step = child.steps[0].observation
    assert step.startswith("[Step 1 Observation]")
    tail = step.split("Valid Actions:")[-1]
    for line in ("Budget used by you: 1/20 steps.", "Budget remaining: 19 steps.", "Score: 0/",
                 "Task Success: no", "Task Failure: no", "Done: no", "[SubAgent Results]"):
        assert line in tail, line
    report = next(s.observation for s in tree.root.steps if "[SubAgent Results]" in s.observation)
    assert "  budget: the subagent used " in report and "steps left for your task" in report
    assert report.rstrip().endswith("Done: yes") and "Task Success: yes" in report  # the world ended
