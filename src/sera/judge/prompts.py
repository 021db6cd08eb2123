"""The judge's prompt: did a child agent complete the goal its parent assigned?

Intent as in the paper's TextWorld judge (sera-spec §5.3), in our own wording, with two fixes
to the reference (§11.1 items 7 and 8): the child's goal is labelled as the child's assigned
goal (the reference filled a "Root Task" field with it), the parent's goal, when given, is
labelled as the parent's; and the judge never sees a verifier or world success flag, only what
the agent did, what the environment answered and the final state.
"""

from __future__ import annotations

from sera.types import AgentNode, Message

JUDGE_SYSTEM_PROMPT = """\
You evaluate one agent of a recursive multi-agent system. A parent agent delegated a subtask \
to this agent (the sub-agent), and the sub-agent worked in a shared text environment.

Decide one thing: did the sub-agent accomplish the goal it was assigned, leaving a real, usable \
result for its parent? Do not judge whether the parent's goal or any larger task was completed; \
the parent's goal, when shown, is context only.

Rules:
- Base your decision on the actions taken, the environment's observations and the final state. \
A claim in the sub-agent's messages that the observations do not support counts for nothing.
- Partial progress is not success. If the evidence is insufficient, the answer is unsuccessful.

Reply with exactly one JSON object and nothing else:
{"success": true or false, "reason": "one or two sentences citing the evidence"}"""

DEFAULT_MAX_OBSERVATION_CHARS = 2000
"""Per-observation cap in a rendered trajectory; longer observations keep head and tail."""


def clip_middle(text: str, limit: int | None) -> str:
    """`text` if it fits `limit` characters, else its head and tail around an omission note."""
    if limit is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def render_trajectory(node: AgentNode, max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS) -> str:
    """The judge's view of a recorded agent: each step's action, observation and error, then
    how the agent ended.

    Deliberately left out: `verified_success`, `verifier_info`, rubric and scores, and any
    training bookkeeping; the judge must reach its verdict from the trajectory alone.
    """
    lines: list[str] = []
    for step in node.steps:
        action = step.action.body if step.action.kind != "invalid" else step.completion_text
        lines.append(f"### Step {step.index + 1}")
        if step.action.thought:
            lines.append(f"Thought: {clip_middle(step.action.thought, max_observation_chars)}")
        lines.append(f"Action: {action}")
        if step.action.kind == "invalid":
            lines.append(f"(The reply could not be parsed as an action: {step.action.parse_error})")
        lines.append(f"Observation: {clip_middle(step.observation, max_observation_chars)}")
        if step.error:
            lines.append(f"Error: {clip_middle(step.error, max_observation_chars)}")
        lines.append("")
    if not node.steps:
        lines.append("(The sub-agent took no step.)")
        lines.append("")
    lines.append(render_ending(node))
    return "\n".join(lines).strip()


def render_ending(node: AgentNode) -> str:
    """How the agent stopped: its finish message, or that it stopped without finishing."""
    if node.finish_message is not None:
        return f"The sub-agent finished with the message: {node.finish_message}"
    if node.error:
        return f"The sub-agent stopped without finishing: {node.error}"
    return "The sub-agent stopped without calling finish."


def build_judge_messages(
    goal: str, trajectory_text: str, final_state: str, parent_goal: str | None = None
) -> list[Message]:
    """System and user messages asking whether the sub-agent met its assigned goal."""
    if not goal.strip():
        raise ValueError("the sub-agent's assigned goal is empty")
    sections = [("Assigned goal of the sub-agent (this is what you judge)", goal.strip())]
    if parent_goal is not None and parent_goal.strip():
        sections.append(("Goal of the parent agent that delegated it (context only)", parent_goal.strip()))
    sections.append(("Sub-agent trajectory", trajectory_text.strip() or "(empty)"))
    sections.append(("Final state of the environment", final_state.strip() or "(not available)"))
    body = "\n\n".join(f"## {title}\n{text}" for title, text in sections)
    body += '\n\nDid the sub-agent accomplish its assigned goal? Answer with the JSON object only.'
    return [Message(role="system", content=JUDGE_SYSTEM_PROMPT), Message(role="user", content=body)]
