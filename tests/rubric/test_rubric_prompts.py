"""Rubric writer and scorer prompts: sections, truncation, and no outcome leaks to the scorer."""

from __future__ import annotations

import json

import pytest

from sera.envs.textcraft.env import CHILD_TOOLS as TEXTCRAFT_CHILD_TOOLS
from sera.envs.textcraft.global_rubric import GLOBAL_TEXTCRAFT_RUBRIC
from sera.rubric import (
    REFERENCE,
    RUBRIC_SCORER_MARKER,
    RUBRIC_WRITER_MARKER,
    RubricContext,
    RubricLimits,
    build_rubric_messages,
    build_scoring_messages,
    render_child_trajectory,
)
from sera.rubric.prompts import CONTEXT_CHAR_LIMIT, TRUNCATION_MARKER, render_parent_context, truncate_context
from sera.types import Action, AgentNode, Message, Step


def context(parent_text="Craft 2 iron pickaxe.", **changes):
    fields = {
        "parent_goal": "Craft 1 mining kit.",
        "parent_messages": (
            Message(role="system", content="You are a crafting agent."),
            Message(role="user", content=parent_text),
        ),
        "delegating_reply": "launch_subagent('Craft 2 iron ingot', max_steps=20)",
        "state": {"inventory": {"iron ore": 4}},
        "child_goal": "Craft 2 iron ingot",
        "child_tools": TEXTCRAFT_CHILD_TOOLS,
        "child_budget": 20,
        "metadata": {"parent_id": "root", "parent_depth": 0, "child_depth": 1, "fork_step": 3},
    }
    fields.update(changes)
    return RubricContext(**fields)


# -- writer ------------------------------------------------------------------------------------


def test_writer_messages_have_all_sections_in_order():
    system, user = build_rubric_messages(context())
    assert (system.role, user.role) == ("system", "user")
    assert system.content.startswith(RUBRIC_WRITER_MARKER)
    assert RUBRIC_SCORER_MARKER not in system.content + user.content
    titles = [
        "[Parent Task]\nCraft 1 mining kit.",
        "[Parent Metadata Visible To Rubric Generator]",
        "[Parent Trajectory Before Delegation]\n[Parent Message 1: system]\nYou are a crafting agent.",
        "[Parent Message 2: user]\nCraft 2 iron pickaxe.",
        "[Parent Step: Delegation Decision]",
        "launch_subagent('Craft 2 iron ingot', max_steps=20)",
        '[Observable Pre-call Environment]\n{"inventory": {"iron ore": 4}}',
        "[Delegated SubAgent Task]\nCraft 2 iron ingot",
        f"[Child Tools]\n{TEXTCRAFT_CHILD_TOOLS}",
        "[Child Execution Budget]\n20",
        "[Required JSON Schema]",
        "[Constraints]",
    ]
    positions = [user.content.index(t) for t in titles]
    assert positions == sorted(positions)
    assert '"fork_step": 3' in user.content and '"parent_id": "root"' in user.content


def test_writer_prompt_says_result_is_hidden_and_asks_for_json_schema():
    _, user = build_rubric_messages(context())
    assert "hidden" in user.content.split("[Parent Task]")[0]
    for key in ("rubric_items", "weight", "score_0", "score_full", "success_gate", "failure_conditions",
                "scoring_procedure"):
        assert f'"{key}"' in user.content
    assert "Include 4 to 8 rubric_items" in user.content
    assert "sum to 1." in user.content


def test_writer_count_text_follows_limits():
    assert "Include 4 to 8 rubric_items" in build_rubric_messages(context(), REFERENCE)[1].content
    assert "approximately" in build_rubric_messages(context(), REFERENCE)[1].content
    custom = RubricLimits(min_criteria=5, max_criteria=6)
    assert "Include 5 to 6 rubric_items" in build_rubric_messages(context(), custom)[1].content


def test_context_block_under_limit_is_not_truncated():
    ctx = context()
    block = render_parent_context(ctx)
    assert len(block) < CONTEXT_CHAR_LIMIT
    assert truncate_context(block) == block
    user = build_rubric_messages(ctx)[1].content
    assert block in user and TRUNCATION_MARKER not in user


def test_context_block_over_limit_keeps_head_and_tail():
    long_history = "".join(f"line {i:05d} of the parent trajectory\n" for i in range(1000))
    ctx = context(parent_text=long_history)
    block = render_parent_context(ctx)
    assert len(block) > CONTEXT_CHAR_LIMIT
    expected = block[:3000] + "\n" + TRUNCATION_MARKER + "\n" + block[-9000:]
    assert truncate_context(block) == expected
    user = build_rubric_messages(ctx)[1].content
    assert expected in user
    assert "line 00000" in user and "line 00999" in user and "line 00500" not in user
    assert "[Delegated SubAgent Task]\nCraft 2 iron ingot" in user  # the tail keeps the child's task


def test_context_rejects_bad_inputs():
    with pytest.raises(ValueError, match="child_goal"):
        context(child_goal="  ")
    with pytest.raises(ValueError, match="child_budget"):
        context(child_budget=0)
    with pytest.raises(TypeError, match=r"parent_messages\[0\]"):
        context(parent_messages=({"role": "user", "content": "hi"},))
    with pytest.raises(ValueError, match="RubricContext.state"):
        build_rubric_messages(context(state={"inventory": {1, 2}}))


def test_context_accepts_a_list_of_messages_as_a_tuple():
    ctx = context(parent_messages=[Message(role="user", content="hi")])
    assert isinstance(ctx.parent_messages, tuple)


# -- scorer ------------------------------------------------------------------------------------


def child_node() -> AgentNode:
    def step(i, action, observation, completion="", error=None):
        return Step(index=i, prompt_len=2 + 2 * i, completion_text=completion or action.body,
                    action=action, observation=observation, error=error)

    return AgentNode(
        id="root.0", parent_id="root", fork_step=3, depth=1, goal="Craft 2 iron ingot", budget=20,
        steps=[
            step(0, Action(kind="code", thought="check the recipe", body="get_info(['iron ingot'])"),
                 "iron ingot: 1 iron ore"),
            step(1, Action(kind="invalid", parse_error="no code block"), "Your reply had no code block.",
                 completion="I will now craft!!", error="no code block"),
            step(2, Action(kind="code", body="craft('iron ingot', 2)\nfinish('made 2 iron ingot')"),
                 "Crafted 2 iron ingot." + "x" * 5000),
        ],
        finish_message="made 2 iron ingot",
        verified_success=True,
        verifier_info={"reward": 1.0, "missing": {}},
        judged_success=True,
        judge_reason="it worked",
        rubric=GLOBAL_TEXTCRAFT_RUBRIC.to_dict(),
        rubric_hash=GLOBAL_TEXTCRAFT_RUBRIC.hash(),
        rubric_score=0.9,
        rubric_assessment={"success": True},
    )


def test_render_child_trajectory_fields():
    view = render_child_trajectory(child_node(), max_chars_per_field=1000)
    assert set(view) == {"task_goal", "steps", "finish_message", "error_message"}
    assert view["task_goal"] == "Craft 2 iron ingot" and view["finish_message"] == "made 2 iron ingot"
    assert view["error_message"] is None
    first, invalid, last = view["steps"]
    assert set(first) == {"step", "thought", "action", "observation", "error"}
    assert first == {"step": 1, "thought": "check the recipe", "action": "get_info(['iron ingot'])",
                     "observation": "iron ingot: 1 iron ore", "error": None}
    assert invalid["action"] == "I will now craft!!" and invalid["error"] == "no code block"
    assert len(last["observation"]) < 1100 and "characters omitted" in last["observation"]
    assert last["observation"].startswith("Crafted 2 iron ingot.")


def test_scoring_prompt_has_rubric_and_goal_and_no_outcome_fields():
    node = child_node()
    system, user = build_scoring_messages(
        GLOBAL_TEXTCRAFT_RUBRIC, node.goal, render_child_trajectory(node), {"inventory": {"iron ingot": 2}}
    )
    assert system.content.startswith(RUBRIC_SCORER_MARKER)
    assert RUBRIC_WRITER_MARKER not in system.content + user.content
    payload = json.loads(user.content.split("\n\n")[1])
    assert list(payload) == sorted(payload) == [
        "delegated_task", "final_environment_state", "frozen_rubric", "trajectory"]
    assert payload["frozen_rubric"] == GLOBAL_TEXTCRAFT_RUBRIC.to_dict()
    assert payload["delegated_task"] == "Craft 2 iron ingot"
    assert payload["final_environment_state"] == {"inventory": {"iron ingot": 2}}
    assert "Goal Fulfillment" in user.content
    for text in (system.content, user.content):
        for banned in ("verified_success", "reward", "judged", "it worked", "rubric_score"):
            assert banned not in text
    for key in ("success", "criterion_scores", "final_score", "reason"):
        assert f'"{key}"' in user.content
    assert "exactly 0.0" in user.content and "exact name" in user.content


@pytest.mark.parametrize(
    ("trajectory", "final_state", "where"),
    [
        ({"task_goal": "g", "steps": [], "reward": 1.0}, {}, "trajectory"),
        ({"task_goal": "g", "steps": [{"step": 1, "verified_success": True}]}, {}, r"trajectory\['steps'\]\[0\]"),
        ({"task_goal": "g", "steps": []}, {"success": True, "inventory": []}, "final_state"),
    ],
)
def test_scoring_refuses_outcome_keys(trajectory, final_state, where):
    with pytest.raises(ValueError, match=where):
        build_scoring_messages(GLOBAL_TEXTCRAFT_RUBRIC, "g", trajectory, final_state)
