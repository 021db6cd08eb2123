"""Prompts for writing a rubric (the parent, before the child runs) and scoring a child with it.

Intent as in sera-spec §4.2 and §4.4, in our own wording. The writer sees what the parent saw
when it delegated, never the delegation's result. The scorer sees the frozen rubric, the
delegated task, the child's trajectory and the final observable state, and nothing that gives
away an outcome: no verifier flag, no world-success flag, no reward (fix of sera-spec §11.1
item 8, where the TextWorld scorer input carried the world's reward).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sera.judge.prompts import clip_middle
from sera.rubric.schema import STRICT, Rubric, RubricLimits
from sera.types import AgentNode, Message

RUBRIC_WRITER_MARKER = "Role: rubric writer."
"""Fixed first line of the rubric writer's system prompt (scripted policies dispatch on it)."""
RUBRIC_SCORER_MARKER = "Role: rubric scorer."
"""Fixed first line of the rubric scorer's system prompt (scripted policies dispatch on it)."""

CONTEXT_CHAR_LIMIT = 12_000
"""Longest parent-context block shown to the writer; a longer one loses its middle."""
CONTEXT_HEAD_CHARS = 3_000
"""Characters kept from the start of an over-long context block (the rest come from its end)."""
TRUNCATION_MARKER = "[... middle of parent trajectory truncated ...]"
"""The line that replaces the dropped middle of an over-long context block."""

OUTCOME_KEYS = frozenset(
    {
        "reward", "score", "success", "failure", "done", "won", "lost",
        "verified_success", "verifier_info", "judged_success", "judge_reason",
        "rubric_score", "rubric_assessment",
    }
)  # fmt: skip
"""Keys that would show the scorer an outcome; `build_scoring_messages` refuses them."""


@dataclass(frozen=True)
class RubricContext:
    """Everything the parent could see at the moment it delegated."""

    parent_goal: str
    """The parent agent's own task."""
    parent_messages: tuple[Message, ...]
    """Exactly the prompt messages the parent saw for its delegating call."""
    delegating_reply: str
    """The parent's raw completion that launched the child."""
    state: Mapping[str, Any]
    """Observable world state before the child runs (JSON-able), e.g. `{"inventory": {...}}`."""
    child_goal: str
    """The subtask the parent wrote for the child."""
    child_tools: str
    """What the child can do, in words (each environment's `CHILD_TOOLS`)."""
    child_budget: int
    """The child's step budget (policy calls)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Bookkeeping the writer may see: parent id, parent/child depth, fork step, and in rubric
    training the fork group id and branch index (JSON-able)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "parent_messages", tuple(self.parent_messages))
        for i, msg in enumerate(self.parent_messages):
            if not isinstance(msg, Message):
                raise TypeError(f"RubricContext.parent_messages[{i}] must be a Message, got {type(msg).__name__}")
        if not self.child_goal.strip():
            raise ValueError("RubricContext.child_goal is empty")
        if isinstance(self.child_budget, bool) or not isinstance(self.child_budget, int) or self.child_budget < 1:
            raise ValueError(f"RubricContext.child_budget must be a positive int, got {self.child_budget!r}")


# -- rubric writing ----------------------------------------------------------------------------

_WRITER_SYSTEM = f"""\
{RUBRIC_WRITER_MARKER}
You are the parent agent of a recursive multi-agent system. You have just delegated a subtask \
to a sub-agent, and before the sub-agent starts you write the rubric that will grade its work. \
The rubric is frozen once written: when the sub-agent returns, its complete trajectory and the \
final environment state are scored against it with a number between 0 and 1.

Write the rubric from your intent as the parent. A good sub-agent:
- completes the delegated task;
- hands back information you can use;
- reports nothing it did not achieve or that the environment contradicts;
- avoids unnecessary or harmful actions.

You cannot see how the delegation turns out and no hidden answer is available to you. Write \
criteria that can be checked against any completed trajectory, not guesses about one run.

Reply with exactly one JSON object, with no markdown and no text around it."""

_RUBRIC_SCHEMA = """\
{"rubric_items": [{"name": "<short unique name>", "weight": <number>, \
"description": "<what this criterion checks>", "score_0": "<what earns 0>", \
"score_full": "<what earns full credit>"}], "success_gate": "<condition the sub-agent must meet \
to score above 0>", "failure_conditions": ["<a concrete way to fail>"], \
"scoring_procedure": "<how to apply the gate and combine the criteria>"}"""


def truncate_context(block: str) -> str:
    """The block unchanged if it fits `CONTEXT_CHAR_LIMIT`; else its head and tail around a marker."""
    if len(block) <= CONTEXT_CHAR_LIMIT:
        return block
    tail = CONTEXT_CHAR_LIMIT - CONTEXT_HEAD_CHARS
    return f"{block[:CONTEXT_HEAD_CHARS]}\n{TRUNCATION_MARKER}\n{block[-tail:]}"


def _json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable: {exc}") from exc


def render_parent_context(ctx: RubricContext) -> str:
    """The parent-context block (sera-spec §4.2 sections), before truncation."""
    history = "\n\n".join(
        f"[Parent Message {i}: {msg.role}]\n{msg.content}" for i, msg in enumerate(ctx.parent_messages, 1)
    )
    sections = [
        ("Parent Task", ctx.parent_goal.strip()),
        ("Parent Metadata Visible To Rubric Generator", _json(dict(ctx.metadata), "RubricContext.metadata")),
        ("Parent Trajectory Before Delegation", history or "(no messages)"),
        (
            "Parent Step: Delegation Decision",
            "(What this step returns is hidden from you. The parent's reply that launched the "
            f"sub-agent follows.)\n{ctx.delegating_reply}",
        ),
        ("Observable Pre-call Environment", _json(dict(ctx.state), "RubricContext.state")),
        ("Delegated SubAgent Task", ctx.child_goal.strip()),
        ("Child Tools", ctx.child_tools),
        ("Child Execution Budget", f"{ctx.child_budget} steps"),
    ]
    return "\n\n".join(f"[{title}]\n{text}" for title, text in sections)


def _count_text(limits: RubricLimits) -> str:
    if limits.max_criteria is None:
        # The reference prompt asked for "max(4, min) to 8" although its parser had no maximum.
        return f"{max(4, limits.min_criteria)} to 8"
    return f"{limits.min_criteria} to {limits.max_criteria}"


def build_rubric_messages(ctx: RubricContext, limits: RubricLimits = STRICT) -> list[Message]:
    """System and user messages asking the parent to write a rubric for its delegated task."""
    weights = (
        "Every weight is a non-negative number and the weights sum to 1."
        if not limits.renormalise
        else "Every weight is a non-negative number; the weights should sum to approximately 1."
    )
    constraints = [
        f"Include {_count_text(limits)} rubric_items, each with a distinct name.",
        weights,
        "success_gate is strict: if the sub-agent does not complete the delegated task, the score "
        "is exactly 0, whatever the other criteria say.",
        "failure_conditions lists at least one concrete way the sub-agent can fail.",
        "score_0 and score_full say what earns 0 and what earns full credit on each criterion.",
        "Make the rubric specific to this delegated task and this parent context, not a generic template.",
    ]
    user = "\n\n".join(
        [
            "Generate a scoring rubric for the delegated SubAgent task. The result of the delegation "
            "is hidden: the sub-agent has not run yet.",
            truncate_context(render_parent_context(ctx)),
            f"[Required JSON Schema]\n{_RUBRIC_SCHEMA}",
            "[Constraints]\n" + "\n".join(f"- {c}" for c in constraints),
            "Reply with the JSON object only.",
        ]
    )
    return [Message(role="system", content=_WRITER_SYSTEM), Message(role="user", content=user)]


# -- scoring -----------------------------------------------------------------------------------

_SCORER_SYSTEM = f"""\
{RUBRIC_SCORER_MARKER}
You grade one completed sub-agent trajectory with a rubric that its parent wrote before the \
sub-agent started. The rubric is frozen: apply it as written, without adding or dropping criteria.

Use only the evidence in the trajectory (actions, observations, errors, the finish message) \
and in the final environment state. A claim by the sub-agent that this evidence does not \
support earns nothing.

Apply the success gate and the failure conditions first. If the sub-agent did not complete the \
delegated task, success is false and final_score is exactly 0.0. Otherwise score every \
criterion between 0 and 1 by its description and anchors.

Reply with exactly one JSON object, with no markdown and no text around it."""

_SCORE_SCHEMA = """\
{"success": true or false, "criterion_scores": [{"name": "<exact criterion name>", \
"score": <number between 0 and 1>, "reason": "<the evidence>"}], "final_score": <number \
between 0 and 1>, "reason": "<one or two sentences>"}"""

_SCORE_RULES = """\
- success is true only if the sub-agent met the success gate and no failure condition holds.
- Score every rubric criterion exactly once, by its exact name, with a number in [0, 1].
- If success is false, final_score is exactly 0.0; if success is true, 0 < final_score <= 1."""


def render_child_trajectory(node: AgentNode, max_chars_per_field: int = 2000) -> dict[str, Any]:
    """The scorer's view of a child: goal, each step's thought/action/observation/error, ending.

    Steps are numbered from 1. Deliberately left out: `verified_success`, `verifier_info`,
    `judged_success`, the rubric and its score, and every other training field.
    """
    if max_chars_per_field < 2:
        raise ValueError(f"max_chars_per_field must be >= 2, got {max_chars_per_field}")

    def clip(text: str | None) -> str | None:
        return None if text is None else clip_middle(text, max_chars_per_field)

    steps = [
        {
            "step": step.index + 1,
            "thought": clip(step.action.thought),
            "action": clip(step.action.body if step.action.kind != "invalid" else step.completion_text),
            "observation": clip(step.observation),
            "error": clip(step.error),
        }
        for step in node.steps
    ]
    return {
        "task_goal": node.goal,
        "steps": steps,
        "finish_message": clip(node.finish_message),
        "error_message": clip(node.error),
    }


def _refuse_outcome_keys(trajectory: Mapping[str, Any], final_state: Mapping[str, Any]) -> None:
    places: list[tuple[str, Mapping[str, Any]]] = [("trajectory", trajectory), ("final_state", final_state)]
    steps = trajectory.get("steps")
    if isinstance(steps, list):
        places += [(f"trajectory['steps'][{i}]", s) for i, s in enumerate(steps) if isinstance(s, Mapping)]
    for where, obj in places:
        leaked = sorted(OUTCOME_KEYS & set(obj))
        if leaked:
            raise ValueError(
                f"{where} has outcome key(s) {leaked}: the scorer must not see verifier, judge, "
                "world-success or reward fields (sera-spec §11.1 item 8); remove them"
            )


def build_scoring_messages(
    rubric: Rubric, child_goal: str, trajectory: Mapping[str, Any], final_state: Mapping[str, Any]
) -> list[Message]:
    """System and user messages asking the policy to score a child with its frozen rubric.

    Raises ValueError if `trajectory` (top level or a step) or `final_state` (top level) carries
    an outcome key (`OUTCOME_KEYS`), e.g. TextWorld's `success`/`done` snapshot fields.
    """
    if not child_goal.strip():
        raise ValueError("the delegated task (child_goal) is empty")
    _refuse_outcome_keys(trajectory, final_state)
    payload = {
        "frozen_rubric": rubric.to_dict(),
        "delegated_task": child_goal,
        "trajectory": dict(trajectory),
        "final_environment_state": dict(final_state),
    }
    user = "\n\n".join(
        [
            "Score the sub-agent's work with the frozen rubric. All the evidence is in this JSON payload:",
            _json(payload, "the scoring payload"),
            f"Reply schema:\n{_SCORE_SCHEMA}",
            f"Rules:\n{_SCORE_RULES}",
            "Reply with the JSON object only.",
        ]
    )
    return [Message(role="system", content=_SCORER_SYSTEM), Message(role="user", content=user)]
