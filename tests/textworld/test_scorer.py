"""Root scorer: per-ingredient and per-dish verdicts, score fraction, summary line."""

from __future__ import annotations

import json

from sera.envs.textworld.scorer import score
from sera.envs.textworld.world import SyncWorld

DISH_1 = ("take red apple", "slice red apple", "cook red apple in oven", "go to pantry", "take water", "go to kitchen",
          "prepare dish_1", "eat dish_1")
DISH_2 = ("go to garden", "take carrot", "go to supermarket", "take red hot pepper", "dice red hot pepper",
          "go to kitchen", "cook carrot in stove", "prepare dish_2", "eat dish_2")


def play(spec, *plans: tuple[str, ...]) -> SyncWorld:
    world = SyncWorld(spec)
    for index, plan in enumerate(plans):
        world.add_agent(f"n{index}")
        for action in plan:
            assert world.step(f"n{index}", action).accepted, action
    return world


def test_fresh_world_scores_zero_and_is_neither_success_nor_failure(make_spec):
    report = score(play(make_spec()))
    assert (report.success, report.failure, report.score) == (False, False, 0.0)
    first = report.dishes[0]
    assert [i.name for i in first.ingredients] == ["red apple", "water"]
    assert first.ingredients[0].expected == ("roasted", "sliced") and first.ingredients[0].actual == ("raw", "uncut")
    assert not any(i.collected or i.complete for d in report.dishes for i in d.ingredients)


def test_one_of_two_dishes_done_scores_half(make_spec):
    report = score(play(make_spec(), DISH_1))
    assert report.score == 0.5 and not report.success and not report.failure
    assert report.dishes[0].success and not report.dishes[1].success
    assert report.summary() == (
        "cookingworld_multidish_test_fork_join_easy_0000: in progress, 1/2 dishes done (score 0.50), 8 shared steps; "
        "dish_1: done; dish_2: 0/2 ingredients complete, prepared: no, eaten: no"
    )


def test_the_report_dumps_to_json_with_the_dish_verdicts(make_spec):
    dumped = json.loads(json.dumps(score(play(make_spec(), DISH_1)).model_dump(mode="json")))
    assert dumped["score"] == 0.5 and dumped["success"] is False
    assert dumped["dishes"][0]["success"] is True and dumped["dishes"][0]["complete_count"] == 2
    assert dumped["dishes"][1]["invalid"] is False
    assert dumped["dishes"][0]["ingredients"][0]["expected"] == ["roasted", "sliced"]


def test_prepared_but_not_eaten_is_not_a_success(make_spec):
    report = score(play(make_spec(), DISH_1[:-1]))
    dish = report.dishes[0]
    assert dish.prepared and not dish.eaten and dish.complete_count == 2 and not dish.success


def test_every_dish_eaten_is_success_with_score_one(make_spec):
    report = score(play(make_spec(), DISH_1, DISH_2))
    assert report.success and report.score == 1.0 and not report.failure
    assert report.summary().startswith(
        "cookingworld_multidish_test_fork_join_easy_0000: SUCCESS, 2/2 dishes done (score 1.00)"
    )


def test_wrong_preparation_and_burning_make_dishes_invalid(make_spec):
    wrong = score(play(make_spec(), ("take red apple", "chop red apple")))
    apple = wrong.dishes[0].ingredients[0]
    assert apple.wrong_preparation and not apple.complete and apple.actual == ("raw", "chopped")
    assert wrong.failure and wrong.dishes[0].invalid and not wrong.dishes[1].invalid
    assert "dish_1: FAILED (red apple wrongly prepared)" in wrong.summary() and "FAILURE" in wrong.summary()

    burned = score(play(make_spec(), ("take red apple", "cook red apple in oven", "cook red apple in oven")))
    assert burned.dishes[0].ingredients[0].destroyed and burned.failure
    assert "dish_1: FAILED (red apple burned)" in burned.summary()


def test_distractor_preparation_does_not_affect_the_score(make_spec):
    report = score(play(make_spec(), ("go to garden", "take banana", "chop banana")))
    assert not report.failure and report.score == 0.0
