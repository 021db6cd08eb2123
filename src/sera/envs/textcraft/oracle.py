"""A scripted TextCraft-Synth expert that plays through the same text interface as a model.

The oracle is a `Policy`: it reads the conversation (goal, depth, cell outputs) and writes the
next `<thought>…</thought><python>…</python>` reply. Three moves per agent:

1. explore: below the maximum depth, a cell prints the recipes of the targets and of their
   direct ingredients; the oracle picks the deepest direct ingredients to delegate. A second
   cell walks `get_info` down the rest of the tree (skipping delegated items) and prints it.
2. craft: one cell launches the children (in parallel with `asyncio.gather` where their recipe
   trees share no item, see `launch_groups`), then crafts the rest bottom-up;
3. finish (or re-plan from the printed inventory if a craft failed).

Race freedom on the shared inventory: every agent crafts its whole share from base materials, so
it never needs intermediates someone else made, and agents that run at the same time work on
disjoint sets of intermediate items, so none can shrink another's crafted increment. The
published inventories budget base materials as if every craft yielded one item, which bounds
this plan's consumption, so every published task is solvable this way.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from dataclasses import dataclass

from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message

_GOAL = re.compile(r"Craft the following items: ([^\n]*)")
_TARGET = re.compile(r"(\d+)x\s+([a-z0-9_]+)")
_DEPTH = re.compile(r"delegation depth (\d+) \(maximum (\d+)\)")
RECIPE_LINE = "R "
START_TAG = "START "
INVENTORY_TAG = "INVENTORY "
OVERLAP_LINE = "OVERLAP "
LEVEL_DONE = "LEVEL DONE"
TREE_DONE = "TREE DONE"

Recipes = dict[str, tuple[int, int, dict[str, int]]]
"""item -> (crafting depth, result count, ingredients) of craftable items, as printed by the
explore cells; an item missing from it is a base material."""


@dataclass(frozen=True)
class OracleConfig:
    """How the oracle splits work."""

    min_delegate_depth: int = 2
    """Only ingredients at least this deep are delegated."""
    max_children: int = 3
    """At most this many children per delegation (the deepest ingredients)."""
    max_replans: int = 2
    """Re-planning attempts after a failed craft."""


class TextCraftOracle:
    """The scripted expert policy."""

    def __init__(self, config: OracleConfig | None = None) -> None:
        self.config = config or OracleConfig()

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        return Completion(text=self.reply(messages), finish_reason="stop")

    def reply(self, messages: list[Message]) -> str:
        """The next reply for this conversation."""
        task = messages[1].content
        targets = parse_targets(task)
        can_delegate = _DEPTH.search(task) is not None
        outputs = [m.content for m in messages[2:] if m.role == "user"]
        seen = "\n".join(outputs)
        recipes = parse_recipe_lines(seen)
        if can_delegate and LEVEL_DONE not in seen:
            return _explore(targets, skip=[], levels=2)
        delegated = self.choose_delegations(targets, recipes) if can_delegate else []
        if TREE_DONE not in seen:
            return _explore(targets, skip=delegated, levels=None)
        crafting_outputs = [o for o in outputs if INVENTORY_TAG in o]
        if not crafting_outputs:
            return self._craft(targets, recipes, launch_groups(delegated, parse_overlaps(seen)))
        last = crafting_outputs[-1]
        if "Error" in last and len(crafting_outputs) <= self.config.max_replans:
            start = _last_tagged_json(outputs, START_TAG) or {}
            inventory = _last_tagged_json(outputs, INVENTORY_TAG) or {}
            missing = {
                item: start.get(item, 0) + n - inventory.get(item, 0)
                for item, n in targets.items()
                if inventory.get(item, 0) < start.get(item, 0) + n
            }
            if missing and all(item in recipes for item in missing):
                return self._craft(missing, recipes, groups=[])
        summary = _goal(targets)
        return _reply("The crafts are done; I report back.", f"finish({json.dumps('Crafted ' + summary + '.')})")

    def _craft(self, targets: dict[str, int], recipes: Recipes, groups: list[list[str]]) -> str:
        children, crafts = plan(targets, recipes, {item for group in groups for item in group})
        lines = ["import asyncio, json"]
        if children:
            context = json.dumps(f"Ingredient for {_goal(targets)}.")
            lines.append("reports = []")
            for group in groups:
                launches = ",\n    ".join(
                    f"launch_subagent({json.dumps({item: children[item]})}, context={context})" for item in group
                )
                lines.append(f"reports += await asyncio.gather(\n    {launches},\n)")
            lines += ["for report in reports:", "    print(report)"]
        if crafts:
            rows = ",\n    ".join(json.dumps([item, ings, total]) for item, ings, total in crafts)
            lines += [f"plan = [\n    {rows},\n]", "for item, ingredients, total in plan:", "    print(craft(ingredients, (item, total)))"]
        lines.append(f"print({INVENTORY_TAG!r} + json.dumps(view_inventory()))")
        if children:
            batches = "; then ".join(" and ".join(group) + (" in parallel" if len(group) > 1 else "") for group in groups)
            thought = f"Delegate {batches} (parallel only where the subtrees share no item), then craft the rest bottom-up."
        else:
            thought = "Craft everything bottom-up from base materials."
        return _reply(thought, "\n".join(lines))

    def choose_delegations(self, targets: dict[str, int], recipes: Recipes) -> list[str]:
        """The deepest direct ingredients worth a child, deepest first."""
        direct = {ing for item in targets if item in recipes for ing in recipes[item][2]}
        deep = [i for i in direct if i in recipes and recipes[i][0] >= self.config.min_delegate_depth]
        deep.sort(key=lambda i: (-recipes[i][0], i))
        return deep[: self.config.max_children]


def launch_groups(candidates: list[str], overlaps: set[frozenset[str]]) -> list[list[str]]:
    """Split delegations into batches run one after another; a batch's subtrees share no item.

    Concurrent agents on one shared inventory must not touch the same intermediates: an agent's
    success is the growth of its targets since it started, and a sibling consuming units it made
    earlier would shrink that growth. Launches within a batch run in parallel.
    """
    groups: list[list[str]] = []
    for item in candidates:
        for group in groups:
            if not any(frozenset((item, other)) in overlaps for other in group):
                group.append(item)
                break
        else:
            groups.append([item])
    return groups


def parse_overlaps(text: str) -> set[frozenset[str]]:
    """Pairs printed by the explore cell as `OVERLAP a b`: their recipe trees share an item."""
    return {
        frozenset(line.split()[1:3]) for line in text.splitlines() if line.startswith(OVERLAP_LINE) and len(line.split()) == 3
    }


def plan(
    targets: dict[str, int], recipes: Recipes, delegated: set[str]
) -> tuple[dict[str, int], list[tuple[str, dict[str, int], int]]]:
    """Children's shares and this agent's own crafts (ingredients first), from base materials.

    Needs are aggregated top-down in decreasing crafting depth (ingredients are always shallower
    than what they make), so each item is crafted once with its total need rounded up to whole
    crafts.
    """
    need: dict[str, int] = dict(targets)
    heap = [(-_depth(recipes, item), item) for item in need]
    heapq.heapify(heap)
    seen = set(need)
    children: dict[str, int] = {}
    crafts: list[tuple[str, dict[str, int], int]] = []
    while heap:
        _, item = heapq.heappop(heap)
        if item not in recipes:  # base material: taken from the inventory
            continue
        _, result_count, ingredients = recipes[item]
        if item in delegated:
            children[item] = need[item]
            continue
        times = math.ceil(need[item] / result_count)
        crafts.append((item, {i: q * times for i, q in ingredients.items()}, times * result_count))
        for ingredient, qty in ingredients.items():
            need[ingredient] = need.get(ingredient, 0) + qty * times
            if ingredient not in seen:
                seen.add(ingredient)
                heapq.heappush(heap, (-_depth(recipes, ingredient), ingredient))
    crafts.reverse()
    return children, crafts


def parse_targets(task_text: str) -> dict[str, int]:
    """`{item: count}` from the goal line of the first user message."""
    match = _GOAL.search(task_text)
    if not match:
        raise ValueError("the oracle found no 'Craft the following items:' goal in the task")
    return {item: int(n) for n, item in _TARGET.findall(match.group(1))}


def parse_recipe_lines(text: str) -> Recipes:
    """Recipes printed by explore cells: `R item depth result_count ingredient*qty ...` lines."""
    recipes: Recipes = {}
    for line in text.splitlines():
        if line.startswith(RECIPE_LINE):
            name, depth, result, *ingredients = line[len(RECIPE_LINE):].split()
            recipes[name] = (int(depth), int(result), {i: int(q) for i, q in (x.split("*") for x in ingredients)})
    return recipes


def _explore(targets: dict[str, int], *, skip: list[str], levels: int | None) -> str:
    """A cell printing the recipes of the targets' tree (only `levels` deep if given); items in
    `skip` are not expanded, but the cell checks which of their trees share an item."""
    code = f"""import json
print({START_TAG!r} + json.dumps(view_inventory()))
skip = {json.dumps(skip)}
seen = set()
frontier = {json.dumps(sorted(targets))}
level = 0
while frontier and level != {levels if levels is not None else -1}:
    level += 1
    next_frontier = set()
    for info in get_info(frontier):
        seen.add(info["item"])
        if info["recipes"]:
            recipe = info["recipes"][0]
            parts = [f"{{name}}*{{qty}}" for name, qty in recipe["ingredients"].items()]
            print("R", info["item"], info["crafting_depth"], recipe["result_count"], *parts)
            if info["item"] not in skip:
                next_frontier.update(recipe["ingredients"])
    frontier = sorted(next_frontier - seen)"""
    if len(skip) > 1:
        code += f"""
trees = {{}}
for item in skip:
    found, frontier = set(), [item]
    while frontier:
        craftable = [info for info in get_info(frontier) if info["recipes"]]
        found.update(info["item"] for info in craftable)
        frontier = sorted({{x for info in craftable for x in info["recipes"][0]["ingredients"]}} - found)
    trees[item] = found
for a in skip:
    for b in skip:
        if a < b and trees[a] & trees[b]:
            print({OVERLAP_LINE!r}, a, b)"""
    code += f"\nprint({(LEVEL_DONE if levels else TREE_DONE)!r})"
    what = "my targets and their direct ingredients" if levels else "the recipe tree I have to craft myself"
    return _reply(f"I need my inventory and the recipes of {what}.", code)


def _depth(recipes: Recipes, item: str) -> int:
    return recipes[item][0] if item in recipes else 0


def _last_tagged_json(outputs: list[str], tag: str) -> dict | None:
    for text in reversed(outputs):
        for line in text.splitlines():
            if line.startswith(tag):
                return json.loads(line[len(tag):])
    return None


def _goal(targets: dict[str, int]) -> str:
    return ", ".join(f"{n}x {item}" for item, n in targets.items())


def _reply(thought: str, code: str) -> str:
    return f"<thought>{thought}</thought>\n<python>\n{code}\n</python>"
