"""Crafting plans: which crafts, in which order, turn an inventory into the target items.

Two planners, both returning `CraftStep`s:

- `plan_by_tiers` is the planner behind the published `gold_trajectory` fields (the reference's
  `solve_crafting_task_synth`): first add up, along every recipe path from the targets down,
  how many of each item are needed; then craft the missing ones in increasing tier order.
  It reproduces the published trajectories step for step.
- `plan_by_deficit` crafts only what the inventory lacks, one step per item. It suits
  inventories in the middle of an episode (a child's snapshot, with intermediates already
  made), where the tier planner, which re-derives every intermediate from base materials, can
  fail needlessly.

Both use each item's first recipe (generated books have exactly one) and rely on the book being
acyclic (every ingredient has a lower tier than its product).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sera.envs.textcraft.recipes import RecipeBook


@dataclass(frozen=True)
class CraftStep:
    """One call of the `craft` tool, as a gold-trajectory step."""

    item: str
    """The crafted item."""
    crafts: int
    """How many times the recipe runs."""
    ingredients: dict[str, int]
    """Total amounts consumed (recipe amount * crafts): exactly what `craft` must be given."""
    produced: int
    """Items made (recipe result count * crafts): the `target` count `craft` must be given."""

    def to_json(self) -> dict[str, Any]:
        """The published step: `target` is `[item, crafts]`, `result_count` the total produced.

        Note: `target[1]` counts recipe runs, whereas the `craft` tool's target is the total
        (`produced`); the published data uses this form, so we keep it.
        """
        return {
            "action": "craft",
            "target": [self.item, self.crafts],
            "ingredients": dict(self.ingredients),
            "result_count": self.produced,
        }

    @classmethod
    def from_json(cls, step: Mapping[str, Any]) -> CraftStep:
        """Read a published step (shape assumed valid; `tasks` validates files)."""
        item, crafts = step["target"]
        return cls(item, crafts, dict(step["ingredients"]), step["result_count"])


def plan_by_tiers(
    book: RecipeBook, targets: Mapping[str, int], inventory: Mapping[str, int]
) -> list[CraftStep] | None:
    """The published gold planner; None when the inventory cannot cover the plan.

    Requirements are summed per recipe path, each path rounding its own crafts up, so shared
    intermediates may be over-produced: that is what the published trajectories contain.
    """
    needed: dict[str, int] = {}
    for item, count in targets.items():
        path_needs = _path_requirements(book, item, count)
        if path_needs is None:
            return None
        for name, amount in path_needs:
            needed[name] = needed.get(name, 0) + amount

    stock = dict(inventory)
    steps: list[CraftStep] = []
    # Stable sort: equal tiers keep first-visit order, as in the reference.
    to_make = sorted((i for i in needed if not book.is_base(i)), key=book.crafting_depth)
    for item in to_make:
        missing = needed[item] - stock.get(item, 0)
        if missing <= 0:
            continue
        step = _craft_once(book, item, missing, stock)
        if step is None:
            return None
        steps.append(step)
    return steps


def plan_by_deficit(
    book: RecipeBook, targets: Mapping[str, int], inventory: Mapping[str, int]
) -> list[CraftStep] | None:
    """Craft `count` more of each target, making only what the inventory lacks; None if impossible.

    Demand is pushed down the recipes from the highest tier to the lowest, so every item's
    total demand is known before it is crafted: one step per item, at most. (Ensuring each
    ingredient path by path instead, as a plain depth-first search does, repeats small crafts
    of shared intermediates and grows exponentially with depth: thousands of steps at tier 12.)
    Units held at the start count towards ingredient demand but not towards a target, because
    success is judged on the increment over the starting inventory.
    """
    demand = {item: inventory.get(item, 0) + count for item, count in targets.items()}
    crafts: dict[str, int] = {}
    pending = list(demand)
    while pending:
        # Consumers sit on higher tiers than their ingredients: settle the highest tier first.
        top = max(book.crafting_depth(item) for item in pending)
        level = [item for item in pending if book.crafting_depth(item) == top]
        pending = [item for item in pending if book.crafting_depth(item) != top]
        for item in level:
            missing = demand[item] - inventory.get(item, 0)
            if missing <= 0:
                continue
            recipes = book.recipes_for(item)
            if not recipes:
                return None  # a base item (or an unknown one) the inventory lacks
            runs = -(-missing // recipes[0].result_count)
            crafts[item] = runs
            for name, amount in recipes[0].ingredients.items():
                if name not in demand:
                    pending.append(name)
                demand[name] = demand.get(name, 0) + amount * runs

    stock = dict(inventory)
    steps: list[CraftStep] = []
    for item in sorted(crafts, key=book.crafting_depth):  # ingredients before their products
        step = _craft_once(book, item, crafts[item] * book.recipes[item][0].result_count, stock)
        if step is None:
            return None
        steps.append(step)
    return steps


def _craft_once(book: RecipeBook, item: str, missing: int, stock: dict[str, int]) -> CraftStep | None:
    """Run the item's first recipe enough times to make `missing` more, updating `stock`."""
    recipe = book.recipes[item][0]
    crafts = -(-missing // recipe.result_count)
    used = {name: amount * crafts for name, amount in recipe.ingredients.items()}
    for name, amount in used.items():
        if stock.get(name, 0) < amount:
            return None
    for name, amount in used.items():
        left = stock[name] - amount
        if left > 0:
            stock[name] = left
        else:
            del stock[name]
    produced = crafts * recipe.result_count
    stock[item] = stock.get(item, 0) + produced
    return CraftStep(item, crafts, used, produced)


@functools.lru_cache(maxsize=1 << 16)
def _path_requirements(book: RecipeBook, item: str, count: int) -> tuple[tuple[str, int], ...] | None:
    """Per-path requirement totals below (and including) `count` of `item`, first-visit order.

    Memoised on (book, item, count): the reference walks every path afresh, which is the
    same sum but exponentially slower for tier-12 targets.
    """
    totals = {item: count}
    if book.is_base(item):
        return tuple(totals.items())
    recipes = book.recipes_for(item)
    if not recipes:
        return None
    recipe = recipes[0]
    crafts = -(-count // recipe.result_count)
    for name, amount in recipe.ingredients.items():
        below = _path_requirements(book, name, amount * crafts)
        if below is None:
            return None
        for sub, sub_amount in below:
            totals[sub] = totals.get(sub, 0) + sub_amount
    return tuple(totals.items())
