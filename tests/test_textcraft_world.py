"""TextCraft-Synth tool semantics, clones and the verifier, on the published recipe book."""

import copy

import pytest

from sera.envs.textcraft.recipes import default_recipe_book
from sera.envs.textcraft.verify import verify_crafted
from sera.envs.textcraft.world import CraftingWorld

BOOK = default_recipe_book()


def _item_with_result_count(tier: int, above: int = 1) -> str:
    return next(i for i in BOOK.items_at_tier(tier) if BOOK.recipes_for(i)[0].result_count > above)


ITEM = _item_with_result_count(2)
RECIPE = BOOK.recipes_for(ITEM)[0]


def _stocked(times: int = 3, extra: dict | None = None) -> CraftingWorld:
    inventory = {name: qty * times for name, qty in RECIPE.ingredients.items()}
    inventory.update(extra or {})
    return CraftingWorld(BOOK, inventory)


def test_craft_consumes_exact_amounts_and_adds_the_total():
    world = _stocked(times=3)
    total = 2 * RECIPE.result_count
    ingredients = {name: qty * 2 for name, qty in RECIPE.ingredients.items()}
    assert world.craft(ingredients, (ITEM, total)) == f"Successfully crafted {total} {ITEM}(s)"
    assert world.inventory[ITEM] == total
    for name, qty in RECIPE.ingredients.items():
        assert world.inventory[name] == qty


def test_used_up_ingredients_disappear_from_the_inventory():
    world = _stocked(times=1)
    ingredients = dict(RECIPE.ingredients)
    world.craft(ingredients, (ITEM, RECIPE.result_count))
    assert world.inventory == {ITEM: RECIPE.result_count}


def test_target_count_must_be_divisible_by_the_result_count():
    world = _stocked()
    result = world.craft(dict(RECIPE.ingredients), (ITEM, RECIPE.result_count + 1))
    assert result.startswith(f"Error: All 1 recipe(s) failed for {ITEM}")
    assert "not divisible" in result
    assert ITEM not in world.inventory


@pytest.mark.parametrize("change", ["missing", "wrong", "extra"])
def test_ingredients_must_match_the_recipe_exactly(change):
    world = _stocked()
    before = world.snapshot()
    ingredients = dict(RECIPE.ingredients)
    first = next(iter(ingredients))
    if change == "missing":
        del ingredients[first]
        expected = f"Missing required ingredient {first}"
    elif change == "wrong":
        ingredients[first] += 1
        expected = f"Wrong amount of {first}"
    else:
        ingredients["m0_ore"] = 1
        expected = "Extra ingredients not required: m0_ore"
    result = world.craft(ingredients, (ITEM, RECIPE.result_count))
    assert expected in result
    assert world.inventory == before, "a failed craft must change nothing"


def test_insufficient_inventory_is_reported():
    world = CraftingWorld(BOOK, {})
    result = world.craft(dict(RECIPE.ingredients), (ITEM, RECIPE.result_count))
    assert "Insufficient ingredients in inventory" in result and world.inventory == {}


@pytest.mark.parametrize(
    ("ingredients", "target", "message"),
    [
        ([("a", 1)], ("x", 1), "ingredients must be a dict"),
        ({}, "x", "target must be a tuple (item, count)"),
        ({}, ("x", 0), "positive int count"),
        ({}, ("x", True), "positive int count"),
        ({"a": -1}, (ITEM, 1), "positive ints"),
        ({}, ("no_such_item", 1), "No recipe found for no_such_item"),
    ],
)
def test_malformed_craft_arguments_get_a_precise_error(ingredients, target, message):
    result = CraftingWorld(BOOK, {}).craft(ingredients, target)
    assert result.startswith("Error:") and message in result


def test_get_info_reports_recipes_depth_and_holdings():
    world = _stocked(extra={ITEM: 4})
    base = next(iter(RECIPE.ingredients))
    rows = world.get_info([ITEM, base, "nonsense"])
    assert rows[0] == {
        "item": ITEM, "can_craft": True, "is_base": False, "in_inventory": 4, "crafting_depth": 2,
        "recipes": [{"ingredients": dict(RECIPE.ingredients), "result_count": RECIPE.result_count}],
    }
    assert rows[1]["can_craft"] is False and rows[1]["recipes"] == []
    assert rows[2] == {"item": "nonsense", "error": "unknown item 'nonsense'"}
    assert world.get_info(5).startswith("Error: get_info expects a list")


def test_view_inventory_is_a_copy():
    world = _stocked()
    view = world.view_inventory()
    view["m0_ore"] = 10**6
    assert world.inventory.get("m0_ore") != 10**6


def test_clones_are_independent_and_share_the_recipe_book():
    world = _stocked(times=2)
    twin = world.clone()
    assert twin.recipes is world.recipes and twin.inventory == world.inventory
    twin.craft(dict(RECIPE.ingredients), (ITEM, RECIPE.result_count))
    assert ITEM in twin.inventory and ITEM not in world.inventory
    assert copy.deepcopy(world).inventory == world.inventory
    world.commit(twin)
    assert world.inventory == twin.inventory and world.inventory is not twin.inventory


def test_verifier_counts_only_the_increment_since_the_agent_started():
    start = {"x": 2}
    ok = verify_crafted({"x": 3}, start, {"x": 5}, "done")
    assert ok.success is True and ok.info["missing_items"] == {}
    short = verify_crafted({"x": 3}, start, {"x": 4}, "done")
    assert short.success is False and short.info["missing_items"] == {"x": 1}
    assert verify_crafted({"x": 3}, start, {"x": 9}, "").success is False, "must finish with a message"
    assert verify_crafted({"x": 3}, start, {"x": 9}, None).success is False
