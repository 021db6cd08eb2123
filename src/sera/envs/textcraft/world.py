"""The TextCraft-Synth world: one inventory, the recipe book, and the exact tool semantics.

The recipe book is immutable and shared by every world, so a world's only state is its
inventory (a flat `{item: count}` dict). Cloning copies that dict and nothing else: clones are
fully independent and cost microseconds. Children of an agent share the *same* world object,
so their crafts are immediately visible to the parent and to siblings.

Tool results follow the reference environment (`reference/sera-spec.md` §3.1.3), with its
wording for crafting outcomes (models trained on it read the same strings): errors are returned
as strings starting with "Error:", never raised, so a model sees what went wrong. One addition:
`get_info` marks unknown items with an `error` entry instead of reporting them as base-like.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sera.envs.textcraft.recipes import RecipeBook


class CraftingWorld:
    """A live inventory over a shared, immutable recipe book."""

    __slots__ = ("recipes", "inventory")

    def __init__(self, recipes: RecipeBook, inventory: Mapping[str, int]) -> None:
        self.recipes = recipes
        self.inventory: dict[str, int] = dict(inventory)

    def clone(self) -> CraftingWorld:
        """An independent copy: the recipe book is shared (immutable), the inventory copied."""
        twin = CraftingWorld.__new__(CraftingWorld)
        twin.recipes = self.recipes
        twin.inventory = self.inventory.copy()
        return twin

    def snapshot(self) -> dict[str, int]:
        """A copy of the inventory."""
        return self.inventory.copy()

    def commit(self, other: CraftingWorld) -> None:
        """Adopt another world's inventory (e.g. a chosen counterfactual branch), in place."""
        self.inventory.clear()
        self.inventory.update(other.inventory)

    def merge(self, branch: CraftingWorld, base: CraftingWorld) -> int:
        """Add what `branch` changed since `base` to this inventory, in place; returns conflicts.

        Unlike `commit`, changes made here meanwhile (a sibling delegation running concurrently
        on this world) are kept: counts are additive, so a branch that crafted 2 planks and a
        sibling that crafted 1 stick both survive. A count that would go negative (the branch
        consumed items a sibling also consumed) is clamped at 0 and counted as a conflict.
        """
        conflicts = 0
        for item in branch.inventory.keys() | base.inventory.keys():
            delta = branch.inventory.get(item, 0) - base.inventory.get(item, 0)
            if delta == 0:
                continue
            count = self.inventory.get(item, 0) + delta
            if count < 0:
                conflicts += 1
                count = 0
            if count:
                self.inventory[item] = count
            else:
                self.inventory.pop(item, None)
        return conflicts

    # -- tools ---------------------------------------------------------------------------------

    def view_inventory(self) -> dict[str, int]:
        """A copy of the inventory."""
        return self.inventory.copy()

    def get_info(self, items: Any) -> list[dict[str, Any]] | str:
        """Per item: whether it can be crafted, its depth, holdings and recipes."""
        if isinstance(items, str):
            items = [items]
        if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
            return f"Error: get_info expects a list of item names, got {_show(items)}"
        rows: list[dict[str, Any]] = []
        for item in items:
            if not self.recipes.knows(item):
                rows.append({"item": item, "error": f"unknown item {item!r}"})
                continue
            recipes = self.recipes.recipes_for(item)
            rows.append(
                {
                    "item": item,
                    "can_craft": bool(recipes),
                    "is_base": self.recipes.is_base(item),
                    "in_inventory": self.inventory.get(item, 0),
                    "crafting_depth": self.recipes.crafting_depth(item),
                    "recipes": [
                        {"ingredients": dict(r.ingredients), "result_count": r.result_count}
                        for r in recipes
                    ],
                }
            )
        return rows

    def craft(self, ingredients: Any, target: Any) -> str:
        """Craft `target=(item, total_count)` from exactly the recipe's ingredient amounts."""
        problem = _check_craft_args(ingredients, target)
        if problem:
            return f"Error: {problem}"
        item, total = target
        recipes = self.recipes.recipes_for(item)
        if not recipes:
            return f"Error: No recipe found for {item}"
        errors = []
        for recipe in recipes:
            if total % recipe.result_count != 0:
                errors.append(
                    f"Target count {total} is not divisible by recipe result count {recipe.result_count}"
                )
                continue
            crafts = total // recipe.result_count
            needed = {name: qty * crafts for name, qty in recipe.ingredients.items()}
            mismatch = _ingredient_mismatch(needed, ingredients)
            if mismatch:
                errors.append(mismatch)
                continue
            short = [
                f"{name}: need {qty}, have {self.inventory.get(name, 0)}"
                for name, qty in needed.items()
                if self.inventory.get(name, 0) < qty
            ]
            if short:
                errors.append("Insufficient ingredients in inventory: " + ", ".join(short))
                continue
            for name, qty in needed.items():
                left = self.inventory[name] - qty
                if left:
                    self.inventory[name] = left
                else:
                    del self.inventory[name]
            self.inventory[item] = self.inventory.get(item, 0) + total
            return f"Successfully crafted {total} {item}(s)"
        details = "\n".join(f"Recipe {i + 1}: {e}" for i, e in enumerate(errors))
        return f"Error: All {len(recipes)} recipe(s) failed for {item}. Errors:\n{details}"


def _check_craft_args(ingredients: Any, target: Any) -> str | None:
    if not isinstance(ingredients, dict):
        return f"ingredients must be a dict {{item: count}}, got {_show(ingredients)}"
    if not (isinstance(target, (tuple, list)) and len(target) == 2):
        return f"target must be a tuple (item, count), got {_show(target)}"
    item, count = target
    if not isinstance(item, str) or not is_positive_int(count):
        return f"target must be (item name, positive int count), got {_show(target)}"
    for name, qty in ingredients.items():
        if not isinstance(name, str) or not is_positive_int(qty):
            return f"ingredient amounts must be positive ints keyed by item name, got {name!r}: {qty!r}"
    return None


def _ingredient_mismatch(needed: dict[str, int], provided: dict[str, int]) -> str | None:
    for name, qty in needed.items():
        if name not in provided:
            return f"Missing required ingredient {name} (need {qty})"
        if provided[name] != qty:
            return f"Wrong amount of {name}. Need {qty}, provided {provided[name]}"
    extra = [name for name in provided if name not in needed]
    if extra:
        return "Extra ingredients not required: " + ", ".join(extra)
    return None


def is_positive_int(value: Any) -> bool:
    """A count: an int (not a bool) above zero."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _show(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
