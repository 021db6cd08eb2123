"""Subtask checks on goals written the way a parent model writes them."""

from __future__ import annotations

import pytest

from sera.envs.textworld.subtask import check_subtask
from sera.envs.textworld.world import SyncWorld

DISHES = {
    "dish_1": [("red apple", "roasted", "sliced", "kitchen.fridge"), ("water", "raw", "uncut", "pantry.shelf")],
    "dish_2": [("carrot", "fried", "uncut", "garden"), ("red hot pepper", "raw", "diced", "supermarket.showcase")],
    "dish_3": [("pepper", "grilled", "uncut", "garden")],
}


@pytest.fixture
def spec(make_spec):
    return make_spec(DISHES, distractors=[("apple", "garden"), ("banana", "garden")])


def play(spec, *actions: str, agent_room: str = "kitchen") -> SyncWorld:
    world = SyncWorld(spec)
    world.add_agent("n0", agent_room)
    for action in actions:
        assert world.step("n0", action).accepted, action
    return world


APPLE_READY = ("take red apple", "slice red apple", "cook red apple in oven")
DISH_1_PREPARED = (*APPLE_READY, "go to pantry", "take water", "go to kitchen", "prepare dish_1")


@pytest.mark.parametrize(
    "goal, targets",
    [
        ("Prepare and eat dish_1.", ["dish_1"]),
        ("Your job: dish 2. Get every ingredient ready and prepare it.", ["dish_2"]),
        ("Prepare Dishes 1 and 3", ["dish_1", "dish_3"]),
        ("Complete dish_1, dish_2 & dish_3", ["dish_1", "dish_2", "dish_3"]),
        ("Prepare dish #2 in the kitchen", ["dish_2"]),
    ],
)
def test_dish_goals_name_their_dishes(spec, goal, targets):
    verdict = check_subtask(goal, spec, play(spec))
    assert (verdict.covered, verdict.kind, verdict.targets, verdict.success) == (True, "dish", targets, False)


@pytest.mark.parametrize(
    "goal, kind, targets",
    [
        ("You are responsible for dish_2: collect the carrot and the red hot pepper, prepare them as required "
         "(carrot fried, red hot pepper diced), then prepare dish_2 and eat it.", "dish", ["dish_2"]),
        ("Go to the garden, pick up the carrot, bring it back to the kitchen and fry it on the stove.",
         "ingredients", ["carrot"]),
        ("Handle dishes 1-3 end to end.", "dish", ["dish_1", "dish_2", "dish_3"]),
        ("Collect dish_1's ingredients: the red apple (roast + slice) and the water from the pantry.",
         "ingredients", ["red apple", "water"]),
        ("Fetch water from the pantry shelf. Do not cook anything.", "ingredients", ["water"]),
        ("Subtask 2 of 3: grill the pepper for dish 3, then make dish 3.", "dish", ["dish_3"]),
    ],
)
def test_realistic_delegated_goals(spec, goal, kind, targets):
    verdict = check_subtask(goal, spec, play(spec))
    assert (verdict.covered, verdict.kind, verdict.targets) == (True, kind, targets)


def test_a_dish_goal_succeeds_when_prepared_and_eaten_only_if_asked(spec):
    world = play(spec, *DISH_1_PREPARED)
    assert check_subtask("Prepare dish_1 (red apple roasted and sliced, water).", spec, world).success is True
    eat = check_subtask("Prepare and eat dish_1.", spec, world)
    assert eat.success is False and eat.detail == "dish_1: prepared but not eaten"
    assert world.step("n0", "eat dish_1").accepted
    assert check_subtask("Prepare and eat dish_1.", spec, world).success is True


def test_ingredient_goals_check_readiness(spec):
    goal = "Go to the kitchen, take the red apple from the fridge, slice it and roast it in the oven."
    before = check_subtask(goal, spec, play(spec, "take red apple", "slice red apple"))
    assert (before.kind, before.targets, before.success) == ("ingredients", ["red apple"], False)
    assert "red apple: not ready (inventory, raw, sliced; needs roasted, sliced)" == before.detail
    after = check_subtask(goal, spec, play(spec, *APPLE_READY))
    assert after.success is True and after.detail == "red apple: ready"


def test_longest_names_first_and_distractors_do_not_leak(spec):
    # "red hot pepper" must not also count as "pepper"; the distractor "apple" is not "red apple".
    verdict = check_subtask("Fetch the red hot pepper from the supermarket and dice it.", spec, play(spec))
    assert verdict.targets == ["red hot pepper"]
    assert check_subtask("Pick up the apple in the garden", spec, play(spec)).covered is False
    both = check_subtask("Grill the pepper and dice the red hot pepper", spec, play(spec))
    assert both.targets == ["red hot pepper", "pepper"]


def test_plurals_and_case_are_understood(spec):
    verdict = check_subtask("Bring both Carrots to the kitchen and fry them", spec, play(spec))
    assert verdict.targets == ["carrot"] and verdict.kind == "ingredients"


def test_a_dish_named_only_as_context_checks_the_named_ingredients(spec):
    world = play(spec, *APPLE_READY)
    verdict = check_subtask("Slice and roast the red apple for dish_1.", spec, world)
    assert (verdict.kind, verdict.targets, verdict.success) == ("ingredients", ["red apple"], True)
    governed = check_subtask("Roast the red apple, then prepare dish_1.", spec, world)
    assert (governed.kind, governed.targets, governed.success) == ("dish", ["dish_1"], False)


def test_mixed_goals_check_dishes_and_other_dishes_ingredients(spec):
    goal = "Prepare dish_1 and also fetch the carrot and fry it."
    world = play(spec, *DISH_1_PREPARED)
    verdict = check_subtask(goal, spec, world)
    assert (verdict.kind, verdict.targets, verdict.success) == ("dish", ["dish_1", "carrot"], False)
    for action in ("go to garden", "take carrot", "go to kitchen", "cook carrot in stove"):
        assert world.step("n0", action).accepted
    assert check_subtask(goal, spec, world).success is True


def test_spoiled_ingredients_fail_their_dish_and_themselves(spec):
    world = play(spec, "take red apple", "dice red apple")
    assert check_subtask("Prepare dish_1", spec, world).detail == "dish_1: spoiled ingredient(s) red apple"
    assert "wrongly prepared" in check_subtask("Slice the red apple", spec, world).detail


def test_unknown_dish_numbers_are_covered_and_fail(spec):
    verdict = check_subtask("Prepare dish_7", spec, play(spec))
    assert verdict.covered and verdict.success is False and "dish_7 is not a dish of this task" in verdict.detail


@pytest.mark.parametrize(
    "goal",
    ["Explore the house and report what you find.", "Take the knife.", "Open the door to the supermarket.",
     "Find the banana", "Prepare all dishes."],
)
def test_goals_without_dishes_or_ingredients_are_not_covered(spec, goal):
    verdict = check_subtask(goal, spec, play(spec))
    assert (verdict.covered, verdict.kind, verdict.targets, verdict.success) == (False, None, [], None)
