"""A scripted rubric writer and scorer: runs the rubric pipeline without a model.

`RubricOracle` answers the two rubric prompts (recognised by their role markers) and passes
every other conversation to the agent policy it wraps, so an environment oracle plus this
gives a complete, deterministic SERA rollout: `sera sft` demonstrates rubric writing and scoring
with it, and tests and benchmarks run SERA without a model.

It writes one rubric per delegated goal (the goal named in the first criterion) and scores a
trajectory from evidence only, as the prompt asks a model to: success needs an explicit finish,
no error at the end, and at least one real action before finishing (a child that claims success
on its first call did nothing). Criteria: goal completion, grounded report, valid actions
(share of steps without error) and efficiency (fewer steps is better).
"""

from __future__ import annotations

import json
import re

from sera.rubric.prompts import RUBRIC_SCORER_MARKER, RUBRIC_WRITER_MARKER
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.types import Message, Usage

_TASK = re.compile(r"\[Delegated SubAgent Task\]\n(.*?)\n\n\[", re.DOTALL)
_WEIGHTS = {"goal completed": 0.5, "grounded report": 0.2, "valid actions": 0.2, "efficiency": 0.1}


def _reply(text: str) -> Completion:
    return Completion(text=text, finish_reason="stop", usage=Usage(completion_tokens=len(text.split())))


def write_rubric(user_text: str) -> str:
    """A valid rubric (JSON text) for the delegated goal named in a rubric-writing prompt."""
    match = _TASK.search(user_text)
    goal = match.group(1).strip() if match else "the delegated task"
    items = [
        {"name": "goal completed", "weight": _WEIGHTS["goal completed"],
         "description": f"The sub-agent achieved: {goal}", "score_0": "not achieved",
         "score_full": "achieved, as the observations show"},
        {"name": "grounded report", "weight": _WEIGHTS["grounded report"],
         "description": "The finish message reports only what the observations support.",
         "score_0": "no report or a contradicted one", "score_full": "an accurate report"},
        {"name": "valid actions", "weight": _WEIGHTS["valid actions"],
         "description": "Actions run without errors.", "score_0": "every action failed",
         "score_full": "no action failed"},
        {"name": "efficiency", "weight": _WEIGHTS["efficiency"],
         "description": "Few steps were used.", "score_0": "the whole budget", "score_full": "one or two steps"},
    ]
    return json.dumps({
        "rubric_items": items,
        "success_gate": f"The sub-agent must actually achieve: {goal}",
        "failure_conditions": ["it finishes without doing the work", "it stops on an error"],
        "scoring_procedure": "Gate first; then score each item in [0, 1] and take the weighted sum.",
    })


def score_trajectory(user_text: str) -> str:
    """An assessment (JSON text) of the trajectory in a scoring prompt's payload."""
    start = user_text.find("{")
    payload, _ = json.JSONDecoder().raw_decode(user_text[start:])
    trajectory = payload["trajectory"]
    steps = trajectory.get("steps", [])
    errors = sum(1 for s in steps if s.get("error"))
    finished = bool(trajectory.get("finish_message"))
    worked = len(steps) > 1
    success = finished and worked and not (steps and steps[-1].get("error"))
    scores = {
        "goal completed": 1.0 if success else 0.0,
        "grounded report": 1.0 if success else 0.0,
        "valid actions": round(1.0 - errors / len(steps), 4) if steps else 0.0,
        "efficiency": round(1.0 / (1.0 + max(0, len(steps) - 2) / 4), 4),
    }
    final = sum(_WEIGHTS[name] * value for name, value in scores.items()) if success else 0.0
    return json.dumps({
        "success": success,
        "criterion_scores": [{"name": n, "score": s, "reason": "from the trajectory"} for n, s in scores.items()],
        "final_score": round(final, 6),
        "reason": "finished after real work" if success else "did not complete the task",
    })


class RubricOracle:
    """Answers rubric prompts itself; passes every other conversation to `agent`."""

    def __init__(self, agent: Policy) -> None:
        self.agent = agent

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        system = messages[0].content if messages and messages[0].role == "system" else ""
        if RUBRIC_WRITER_MARKER in system:
            return _reply(write_rubric(messages[-1].content))
        if RUBRIC_SCORER_MARKER in system:
            return _reply(score_trajectory(messages[-1].content))
        return await self.agent(messages, sampling)
