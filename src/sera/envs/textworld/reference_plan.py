"""The reference plan of a TextWorld-Sync task: the world commands that do each dish.

`plan_dish` is the action sequence one agent follows to prepare and eat one dish; `door_actions`
is what must happen before any dish. `plan.plan_task` divides these actions among agents, and
its length (`plan.min_actions`) sizes every generated task's shared budget, so this module is
the single definition of "the shortest way we know" to do a task. Every command is spelled by
the world's vocabulary (`actions.py`).
"""

from __future__ import annotations

from sera.envs.textworld.actions import (
    OPEN_DOOR,
    WAIT,
    cook_command,
    cut_command,
    go_command,
    meal_command,
    parse,
    put_tool_command,
    take_command,
    take_tool_command,
)
from sera.envs.textworld.rules import rules_profile
from sera.envs.textworld.spec import TOOL_FOR_COOKING, DishSpec, IngredientSpec, SyncTaskSpec

TOOL_HANDLING_ACTIONS: tuple[str, ...] = tuple(
    f(tool) for tool in ("knife", "stove") for f in (take_tool_command, put_tool_command)
)
"""Exclusive-tool actions of the plan (conflict family: knife and stove); the generator shifts
the budget band by their count."""


def effective_capacity(spec: SyncTaskSpec) -> int | None:
    """Unready items one agent may hold: the lower of its own and the shared capacity, as the
    task's rules profile reads them (None = no limit)."""
    caps = [c for c in rules_profile(spec.rules).capacities(spec) if c is not None]
    return min(caps) if caps else None


def door_actions(spec: SyncTaskSpec) -> list[str]:
    """`["open door"]` when a needed ingredient lies in a locked room or belongs to a locked dish."""
    door = spec.door
    if door is None:
        return []
    rooms = rules_profile(spec.rules).locked_rooms(spec)
    locked = any(i.room in rooms or d.dish_id in door.locks_dishes for d in spec.dishes for i in d.ingredients)
    return [OPEN_DOOR] if locked else []


def cut_action(ing: IngredientSpec) -> str:
    """`slice red apple`."""
    return cut_command(ing.name, ing.cut)


def cook_action(ing: IngredientSpec) -> str:
    """`cook red apple in oven` (fried: stove, roasted: oven, grilled: grill)."""
    return cook_command(ing.name, ing.cook)


def plan_dish(spec: SyncTaskSpec, dish_id: str) -> list[str]:
    """The reference plan of one dish, for its own agent starting in the kitchen.

    Under `reference` rules (cooking and meals in any room, no unique tools) see `_plan_anywhere`.
    Under `sync` rules, ending in the kitchen:

    1. Conflict family (exclusive knife) and the dish needs a cut: `take knife` first.
    2. Ingredients outside the kitchen, by room in `spec.rooms` order, within a room those that
       need no cooking first (then dish order): `go to <room>` on entering, `take <item>`, then
       its cut at once if it needs one. An item that needs cooking stays held; when the agent
       holds `effective_capacity` such items and more items remain outside, it goes to the
       kitchen, cooks them, and goes back (`go to <room>` of the next item).
    3. `go to kitchen` (if away), cook what it holds (order: see Cooldowns).
    4. Kitchen ingredients, in dish order: take, cut, cook.
    5. `prepare <dish>`, `eat <dish>`.
    Exclusive tools (conflict): `put knife` right after the last cut, or on the next arrival in
    the kitchen if that cut happened elsewhere; `claim stove` right before the first stove
    cooking and `release stove` right after the last one (both in the kitchen).
    Cooldowns: a held batch is cooked alternating tools where possible; a tool use that would
    still fall in the cooldown of this agent's previous use of that tool gets `wait`s before it
    (with cooldowns of at most 1 this only happens for two held items cooked with the same tool).
    """
    dish = next((d for d in spec.dishes if d.dish_id == dish_id), None)
    if dish is None:
        raise KeyError(f"task {spec.task_id} has no dish {dish_id!r}")
    profile = rules_profile(spec.rules)
    if not profile.kitchen_only:
        if profile.unique_tools:
            raise ValueError(f"no reference plan for rules {profile.name!r}: unique tools with cooking anywhere")
        return _plan_anywhere(spec, dish)
    cap = effective_capacity(spec)
    away = sorted((i for i in dish.ingredients if i.room != "kitchen"), key=lambda i: (spec.rooms.index(i.room), i.cook != "raw"))
    plan: list[str] = []
    held: list[IngredientSpec] = []
    here = "kitchen"
    for n, item in enumerate(away):
        if here != item.room:
            plan.append(go_command(item.room))
            here = item.room
        plan.append(take_command(item.name))
        if item.cut != "uncut":
            plan.append(cut_action(item))
        if item.cook != "raw":
            held.append(item)
            if cap is not None and len(held) >= cap and n + 1 < len(away):
                plan += [go_command("kitchen"), *(cook_action(i) for i in _alternate_tools(held))]
                held, here = [], "kitchen"
    if here != "kitchen":
        plan.append(go_command("kitchen"))
    plan += [cook_action(i) for i in _alternate_tools(held)]
    for item in (i for i in dish.ingredients if i.room == "kitchen"):
        plan.append(take_command(item.name))
        plan += [cut_action(item)] if item.cut != "uncut" else []
        plan += [cook_action(item)] if item.cook != "raw" else []
    plan = _with_cooldown_waits(spec, _with_exclusive_tools(spec, plan))
    return [*plan, meal_command("prepare", dish_id), meal_command("eat", dish_id)]


def _plan_anywhere(spec: SyncTaskSpec, dish: DishSpec) -> list[str]:
    """The plan when cooking, `prepare` and `eat` work in any room (`reference` rules).

    Kitchen ingredients first (the agent starts there), then the others by room in `spec.rooms`
    order (dish order within a room): `go to <room>` on entering, `take <item>`, its cut, its
    cooking, so an item is ready before the next is taken (one held item at a time: any team
    capacity suffices). Then `prepare` and `eat` where the agent stands. Cooldown `wait`s as in
    `plan_dish`.
    """
    order = sorted(dish.ingredients, key=lambda i: spec.rooms.index(i.room))  # stable: dish order within a room
    plan: list[str] = []
    here = "kitchen"
    for item in order:
        if here != item.room:
            plan.append(go_command(item.room))
            here = item.room
        plan.append(take_command(item.name))
        plan += [cut_action(item)] if item.cut != "uncut" else []
        plan += [cook_action(item)] if item.cook != "raw" else []
    plan = _with_cooldown_waits(spec, plan)
    return [*plan, meal_command("prepare", dish.dish_id), meal_command("eat", dish.dish_id)]


def _alternate_tools(items: list[IngredientSpec]) -> list[IngredientSpec]:
    """Cooking order of a held batch: never the same tool twice in a row when avoidable
    (cooldowns); at each step the tool with most items left that differs from the last one."""
    queues: dict[str, list[IngredientSpec]] = {}
    for item in items:
        queues.setdefault(TOOL_FOR_COOKING[item.cook], []).append(item)
    order: list[IngredientSpec] = []
    last = ""
    while len(order) < len(items):
        ranked = sorted((t for t in queues if queues[t]), key=lambda t: (t == last, -len(queues[t]), t))
        last = ranked[0]
        order.append(queues[last].pop(0))
    return order


def _tool_of(action: str) -> str | None:
    cmd = parse(action)
    return "knife" if cmd.verb == "cut" else cmd.detail if cmd.verb == "cook" else None


def _with_cooldown_waits(spec: SyncTaskSpec, plan: list[str]) -> list[str]:
    """A `wait` (one idle shared step) before a tool use that would fall in the tool's cooldown
    after this agent's own previous use of it."""
    out: list[str] = []
    last_use: dict[str, int] = {}
    for action in plan:
        tool = _tool_of(action)
        if tool is not None:
            while tool in last_use and len(out) - last_use[tool] <= spec.tool(tool).cooldown_steps:
                out.append(WAIT)
            last_use[tool] = len(out)
        out.append(action)
    return out


def _with_exclusive_tools(spec: SyncTaskSpec, plan: list[str]) -> list[str]:
    out = list(plan)
    exclusive = rules_profile(spec.rules).exclusive_tools(spec)
    if "stove" in exclusive:
        stove = [k for k, a in enumerate(out) if _tool_of(a) == "stove"]
        if stove:
            out.insert(stove[-1] + 1, put_tool_command("stove"))
            out.insert(stove[0], take_tool_command("stove"))
    if "knife" in exclusive:
        cuts = [k for k, a in enumerate(out) if _tool_of(a) == "knife"]
        if cuts:
            here, put_at = "kitchen", None
            for k, action in enumerate(out):
                cmd = parse(action)
                here = cmd.arg if cmd.verb == "go" else here
                if k >= cuts[-1] and here == "kitchen":
                    put_at = k + 1
                    break
            out.insert(put_at if put_at is not None else len(out), put_tool_command("knife"))
            out.insert(0, take_tool_command("knife"))
    return out
