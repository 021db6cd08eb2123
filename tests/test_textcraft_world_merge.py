"""Committing a counterfactual branch merges its changes; concurrent siblings keep theirs."""

from __future__ import annotations

from sera.envs.textcraft.recipes import default_recipe_book
from sera.envs.textcraft.world import CraftingWorld


def test_crafting_merge_adds_branch_changes_and_keeps_concurrent_ones():
    live = CraftingWorld(default_recipe_book(), {"a": 5, "b": 2})
    base, branch = live.clone(), live.clone()
    branch.inventory.update({"a": 3, "planks": 4})  # the branch used 2 a, made 4 planks
    live.inventory.update({"b": 1, "stick": 1})  # meanwhile a sibling used 1 b, made 1 stick
    assert live.merge(branch, base) == 0
    assert live.inventory == {"a": 3, "b": 1, "planks": 4, "stick": 1}


def test_crafting_merge_clamps_a_double_spend_and_counts_it():
    live = CraftingWorld(default_recipe_book(), {"a": 2})
    base, branch = live.clone(), live.clone()
    branch.inventory.pop("a")  # the branch spent both
    live.inventory["a"] = 1  # so did a sibling, partly
    assert live.merge(branch, base) == 1
    assert "a" not in live.inventory


def test_crafting_merge_without_concurrent_change_equals_commit():
    live = CraftingWorld(default_recipe_book(), {"a": 5, "b": 2})
    base, branch = live.clone(), live.clone()
    branch.inventory.update({"a": 1, "c": 7})
    branch.inventory.pop("b")
    twin = live.clone()
    twin.commit(branch)
    live.merge(branch, base)
    assert live.inventory == twin.inventory
