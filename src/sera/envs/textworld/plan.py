"""The oracle's plan of a TextWorld-Sync task: who takes which of the reference actions.

The actions are the reference plan (`reference_plan.door_actions` and `plan_dish`); the length
of this module's division of them (`min_actions`) sets every generated task's shared budget, so
the oracle uses exactly the budgeted actions. This module only assigns them to agents: the root
opens the door, then one child per dish. A dish whose actions do not fit one agent's budget of
steps is cut into parts at *safe points* (the agent holds no half-prepared ingredient and
stands in the kitchen; under rules that allow work in any room, anywhere, the next agent first
walking there); the dish's child delegates every part but the last to a grandchild, one after
another, then does the last part itself (which prepares and eats the dish). Handing over costs
only the tool and walking actions `_split` counts.

Dishes run concurrently only when nothing can make concurrent agents block one another (no
cooldowns, no exclusive tools, no shared inventory capacity, as the task's rules profile reads
them); otherwise one after another.
"""

from __future__ import annotations

from dataclasses import dataclass

from sera.envs.textworld.actions import go_command, parse, put_tool_command, take_tool_command
from sera.envs.textworld.reference_plan import door_actions, plan_dish
from sera.envs.textworld.rules import rules_profile
from sera.envs.textworld.spec import SyncTaskSpec

AGENT_STEPS = 20
"""Steps (replies) of every agent of the plan: its actions, delegations and the finish reply."""


class PlanError(ValueError):
    """A dish whose actions cannot be divided among agents of `AGENT_STEPS` steps."""


@dataclass(frozen=True)
class DishPlan:
    """How one dish is done."""

    dish_id: str
    """The dish."""
    parts: list[list[str]]
    """Consecutive slices of the dish's reference actions; one agent does each part."""

    @property
    def action_count(self) -> int:
        return sum(len(p) for p in self.parts)


@dataclass(frozen=True)
class TaskPlan:
    """How a whole task is done."""

    root_actions: list[str]
    """World commands the root takes before delegating (opening the door)."""
    dishes: list[DishPlan]
    """One plan per dish, in dish order."""
    concurrent: bool
    """Whether the dishes' agents run at the same time."""

    @property
    def action_count(self) -> int:
        return len(self.root_actions) + sum(d.action_count for d in self.dishes)


def plan_task(spec: SyncTaskSpec) -> TaskPlan:
    """The oracle's plan of `spec`; PlanError if a dish cannot be divided among agents."""
    profile = rules_profile(spec.rules)
    cooldown = max(t.cooldown_steps for t in spec.tools)
    _, team_capacity = profile.capacities(spec)
    concurrent = cooldown == 0 and not profile.exclusive_tools(spec) and team_capacity is None
    dishes = [DishPlan(d.dish_id, _split(spec, d.dish_id, plan_dish(spec, d.dish_id))) for d in spec.dishes]
    return TaskPlan(door_actions(spec), dishes, concurrent)


def min_actions(spec: SyncTaskSpec) -> int:
    """Shared actions of the oracle's plan: the door (if needed) plus every dish's reference plan,
    plus tool handovers where a dish must be divided among agents."""
    return plan_task(spec).action_count


def _split(spec: SyncTaskSpec, dish_id: str, actions: list[str]) -> list[list[str]]:
    """Fewest parts that fit: every part but the last ends at a safe point.

    Preferably where the agent holds no exclusive tool; otherwise (conflict family) at a point
    where it does, handing the tool over: the part ends by returning it and the next part starts
    by taking it again (two extra actions per tool, counted in the plan's length). Where the
    rules let work happen in any room (`reference`), a part may also end away from the kitchen;
    the next agent, which starts in the kitchen, then first goes there (one extra action).
    """
    if len(actions) + 1 <= AGENT_STEPS:
        return [actions]
    points = _safe_points(spec, actions)
    parts: list[list[str]] = []
    start, carried, room = 0, frozenset[str](), "kitchen"
    while True:
        pickup = [take_tool_command(t) for t in sorted(carried)] + ([go_command(room)] if room != "kitchen" else [])
        # The dish's own agent: one delegation per earlier part, its actions, one finish reply.
        if len(parts) + len(pickup) + (len(actions) - start) + 1 <= AGENT_STEPS:
            return parts + [pickup + actions[start:]]
        fitting = [
            (end, held, where)
            for end, held, where in points
            if start < end and len(pickup) + (end - start) + len(held) + 1 <= AGENT_STEPS
        ]
        if not fitting:
            raise PlanError(
                f"task {spec.task_id}, {dish_id}: no way to divide {len(actions)} actions among agents of "
                f"{AGENT_STEPS} steps"
            )
        # The furthest end; among equals, one that needs the fewest handover actions.
        end, held, where = max(fitting, key=lambda p: (p[0], -len(p[1]) - (p[2] != "kitchen")))
        parts.append(pickup + actions[start:end] + [put_tool_command(t) for t in sorted(held)])
        start, carried, room = end, held, where


def _safe_points(spec: SyncTaskSpec, actions: list[str]) -> list[tuple[int, frozenset[str], str]]:
    """(i, tools held, room) such that after `actions[:i]` the agent holds no half-prepared
    ingredient, so another agent can go on from there: in the kitchen, or (rules that allow
    work in any room) anywhere."""
    anywhere = not rules_profile(spec.rules).kitchen_only
    here, tools, waiting = "kitchen", set(), set()
    points = []
    for i, action in enumerate(actions, 1):
        cmd = parse(action)
        if cmd.verb == "go":
            here = cmd.arg
        elif cmd.verb in ("take_tool", "claim"):
            tools.add(cmd.arg)
        elif cmd.verb in ("put_tool", "release"):
            tools.discard(cmd.arg)
        elif cmd.verb == "take" and spec.ingredient(cmd.arg).requires_preparation:
            waiting.add(cmd.arg)
        elif cmd.verb in ("cut", "cook") and cmd.arg in waiting:
            # Ready after its cooking, or after its cut when it needs no cooking.
            if cmd.verb == "cook" or spec.ingredient(cmd.arg).cook == "raw":
                waiting.discard(cmd.arg)
        if (here == "kitchen" or anywhere) and not waiting and i < len(actions):
            points.append((i, frozenset(tools), here))
    return points
