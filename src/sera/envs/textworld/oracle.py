"""A scripted multi-agent expert for TextWorld-Sync: it follows the reference plan (`plan.py`).

It reads and writes text only, like a model: it recognises its task from the root goal, looks
up the task's plan (an oracle may know the task; it is told which tasks it will see), and writes
every sub-goal with the plan part spelled out after a `Plan:` line, so each child can act from
its goal alone. The root opens the door if needed, then delegates one child per dish (all at
once when the plan allows it, else one after another) and finishes. A dish's child delegates
all parts but the last to grandchildren, one after another, then does the last part itself.
When the next planned command is not valid yet (a sibling holds a tool, a cooldown runs), it
looks around (free) and tries again.
"""

from __future__ import annotations

import json
import re

from sera.envs.textworld.actions import WAIT, parse
from sera.envs.textworld.plan import TaskPlan, plan_task
from sera.envs.textworld.spec import SyncTaskSpec
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message, Task

_PLAN_LINE = re.compile(r"^Plan( part \d+)?: (.*)$", re.MULTILINE)
_VALID = re.compile(r"Valid Actions:\n((?:- .*\n?)*)")


class TextWorldOracle:
    """The scripted expert policy (for the tasks it is given)."""

    def __init__(self, tasks: list[Task]) -> None:
        self._plans: dict[str, tuple[SyncTaskSpec, TaskPlan]] = {}
        for task in tasks:
            spec = SyncTaskSpec.from_task(task)
            self._plans[task.goal.strip()] = (spec, plan_task(spec))

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        goal = _goal_of(messages)
        if goal in self._plans:
            text = self._root_reply(*self._plans[goal], messages)
        else:
            text = _child_reply(goal, messages)
        return Completion(text=text)  # scripted: no tokens to count

    # -- root ----------------------------------------------------------------------------------

    def _root_reply(self, spec: SyncTaskSpec, plan: TaskPlan, messages: list[Message]) -> str:
        replies = _own_replies(messages)
        script = [f"<action>{a}</action>" for a in plan.root_actions]
        goals = [_dish_goal(spec, d.dish_id, d.parts) for d in plan.dishes]
        if plan.concurrent:
            script.append(_delegate(goals))
        else:
            script += [_delegate([g]) for g in goals]
        if len(replies) < len(script):
            return script[len(replies)]
        return "<finish>All dishes were delegated and reported back.</finish>"


def _goal_of(messages: list[Message]) -> str:
    first = messages[1].content if len(messages) > 1 else ""
    match = re.search(r"# Task\n(.*?)\n\nBudget: ", first, re.DOTALL)
    return match.group(1).strip() if match else ""


def _own_replies(messages: list[Message]) -> list[str]:
    return [m.content for m in messages if m.role == "assistant"]


def _delegate(goals: list[str]) -> str:
    if len(goals) == 1:
        return f"<delegate>{json.dumps({'goal': goals[0]})}</delegate>"
    return f"<delegate>{json.dumps({'delegations': [{'goal': g} for g in goals]})}</delegate>"


def _ingredient_list(spec: SyncTaskSpec, names: list[str]) -> str:
    return "; ".join(f"{n} ({spec.ingredient(n).cook}, {spec.ingredient(n).cut})" for n in names)


def _dish_goal(spec: SyncTaskSpec, dish_id: str, parts: list[list[str]]) -> str:
    dish = next(d for d in spec.dishes if d.dish_id == dish_id)
    lines = [f"Prepare and eat {dish_id}: {_ingredient_list(spec, [i.name for i in dish.ingredients])}."]
    for i, part in enumerate(parts, 1):
        lines.append(f"Plan part {i}: {'; '.join(part)}")
    return "\n".join(lines)


# -- children ----------------------------------------------------------------------------------


def _child_reply(goal: str, messages: list[Message]) -> str:
    parts = [m.group(2).split("; ") for m in _PLAN_LINE.finditer(goal)]
    if not parts:
        return "<finish>I can only follow goals that spell out a plan.</finish>"
    replies = _own_replies(messages)
    delegated = [r for r in replies if r.startswith("<delegate>")]
    # Parts before the last are done by grandchildren, one at a time.
    if len(delegated) < len(parts) - 1:
        part = parts[len(delegated)]
        dish = re.search(r"dish_\d+", goal)
        taken = [cmd.arg for cmd in map(parse, part) if cmd.verb == "take"]  # foods, not the knife
        sub_goal = (
            f"Make these ingredients of {dish.group(0) if dish else 'the dish'} ready on the counter: "
            f"{', '.join(taken)}.\nPlan: {'; '.join(part)}"
        )
        return _delegate([sub_goal])
    return _next_action(parts[-1], messages)


def _next_action(actions: list[str], messages: list[Message]) -> str:
    done = _commands_done(messages)
    if done >= len(actions):
        return "<finish>Done: every command of my plan was carried out.</finish>"
    command = actions[done]
    valid = _valid_actions(messages[-1].content)
    if command != WAIT and valid is not None and command not in valid:
        return "<action>look around</action>"  # free: wait for a sibling's tool or slot
    return f"<action>{command}</action>"


def _commands_done(messages: list[Message]) -> int:
    """Plan commands that were accepted (looking around while waiting does not count)."""
    done = 0
    for i, message in enumerate(messages):
        if message.role != "assistant" or not message.content.startswith("<action>"):
            continue
        command = message.content[len("<action>") : -len("</action>")]
        answer = messages[i + 1].content if i + 1 < len(messages) else ""
        if command != "look around" and "Error:" not in answer.split("\n", 2)[1 if "\n" in answer else 0]:
            done += 1
    return done


def _valid_actions(observation: str) -> set[str] | None:
    match = _VALID.search(observation)
    if not match:
        return None
    return {line[2:].strip() for line in match.group(1).splitlines() if line.startswith("- ")}
