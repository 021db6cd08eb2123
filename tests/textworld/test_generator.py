"""The TextWorld-Sync generator: split layout, bands, family mechanisms, descriptions, reference plans."""

from __future__ import annotations

import collections
import re

import pytest

from sera.envs.textworld import bands, generator
from sera.envs.textworld.bands import DIFFICULTY_BANDS, RUNTIME_BANDS, IntRange, RuntimeBand
from sera.envs.textworld.descriptions import COARSE_COOKBOOK
from sera.envs.textworld.foods import fold_of, load_food_database
from sera.envs.textworld.plan import plan_task
from sera.envs.textworld.actions import WAIT
from sera.envs.textworld.generator import GenerationError, generate_split, generate_task, task_seed
from sera.envs.textworld.plan import min_actions
from sera.envs.textworld.reference_plan import TOOL_HANDLING_ACTIONS, door_actions, plan_dish
from sera.envs.textworld.spec import (
    DIFFICULTIES,
    FAMILIES,
    ROOMS,
    DishSpec,
    DoorSpec,
    IngredientSpec,
    SyncTaskSpec,
    ToolSpec,
)
from sera.envs.textworld.tasks import load_split_specs

ID = re.compile(r"^cookingworld_multidish_(train|dev|test)_([a-z_]+)_(easy|medium|hard|extreme)_(\d{4})$")
ACTION = re.compile(
    r"^(go to (?P<room>[a-z ]+)|take (?P<taken>.+)|(chop|slice|dice|mince) (?P<cut>.+)"
    r"|cook (?P<cooked>.+) (in stove|in oven|on grill)|prepare (?P<prep>dish_\d+)|eat (?P<eat>dish_\d+)"
    r"|take knife|put knife|claim stove|release stove|wait)$"
)


@pytest.fixture(scope="module")
def splits() -> dict[str, list[SyncTaskSpec]]:
    return {split: load_split_specs(split) for split in ("train", "dev", "test")}


@pytest.fixture(scope="module")
def all_specs(splits) -> list[SyncTaskSpec]:
    return [s for specs in splits.values() for s in specs]


def test_split_counts_ids_and_seeds(splits):
    test, train, dev = splits["test"], splits["train"], splits["dev"]
    assert len(test) == 1400 and len(train) == 1500 and len(dev) == 200
    assert collections.Counter((s.family, s.difficulty) for s in test) == {
        (f, d): 50 for f in FAMILIES for d in DIFFICULTIES
    }
    assert collections.Counter(s.difficulty for s in train) == {"medium": 900, "hard": 150, "extreme": 450}
    assert [collections.Counter(s.family for s in train)[f] for f in FAMILIES] == [216, 216, 215, 214, 213, 213, 213]
    assert collections.Counter(s.difficulty for s in dev) == dict.fromkeys(DIFFICULTIES, 50)
    assert [collections.Counter(s.family for s in dev)[f] for f in FAMILIES] == [32, 28, 28, 28, 28, 28, 28]
    for split, specs in splits.items():
        assert len({s.task_id for s in specs}) == len(specs)
        for spec in specs:
            m = ID.match(spec.task_id)
            assert m and m.groups()[:3] == (split, spec.family, spec.difficulty), spec.task_id
            assert spec.split == split and spec.fold == fold_of(split)
            assert spec.seed == task_seed(split, spec.family, spec.difficulty, int(m.group(4)))
    by_id = {s.task_id: s for specs in splits.values() for s in specs}
    assert by_id["cookingworld_multidish_test_conflict_hard_0003"].seed == 820000 + 2 * 1000 + 5 * 100 + 3
    assert by_id["cookingworld_multidish_train_fork_join_medium_0128"].seed == 850000 + 100000 + 128
    assert by_id["cookingworld_multidish_train_hierarchical_extreme_0063"].seed == 850000 + 300000 + 6 * 200 + 63
    assert by_id["cookingworld_multidish_dev_fork_join_extreme_0049"].seed == 860000 + 3000 + 49  # 49 % 7 == 0
    assert by_id["cookingworld_multidish_dev_critical_path_easy_0008"].seed == 860008
    assert [s.task_id for s in dev[:2]] == [
        "cookingworld_multidish_dev_fork_join_easy_0000", "cookingworld_multidish_dev_critical_path_easy_0001"
    ]


def test_generation_is_deterministic(splits):
    assert generate_split("dev") == splits["dev"]
    again = generate_task("test", "dependency_gate", "extreme", 17)
    assert again == next(s for s in splits["test"] if s.task_id.endswith("dependency_gate_extreme_0017"))


def test_every_task_respects_its_band(all_specs):
    db = load_food_database()
    for spec in all_specs:
        band, runtime = DIFFICULTY_BANDS[spec.difficulty], RUNTIME_BANDS[spec.difficulty]
        where = spec.task_id
        assert len(spec.dishes) in band.dish_count, where
        assert len({len(d.ingredients) for d in spec.dishes}) == 1 and len(spec.dishes[0].ingredients) in band.ingredients_per_dish
        assert spec.rooms == list(ROOMS[: len(spec.rooms)]) and len(spec.rooms) in band.num_locations, where
        used = {i.name for d in spec.dishes for i in d.ingredients}
        available = len(db.all_foods) - len(used)
        assert len(spec.distractors) in band.num_distractors or len(spec.distractors) == available, where
        assert all(room in {x.source.split(".")[0] for x in spec.distractors} for room in spec.rooms[4:]), where
        foods = {f.name: f for f in db.foods(spec.fold)}
        for dish in spec.dishes:
            prepared = sum(i.requires_preparation for i in dish.ingredients)
            assert band.min_prepared.lo <= prepared <= band.max_prepared.hi, where
            for ing in dish.ingredients:
                assert (ing.cook, ing.cut) in {(p.cook, p.cut) for p in foods[ing.name].preparations}, where
                assert ing.candidate_sources == list(db.locations[ing.name]) and ing.source in ing.candidate_sources
                assert ing.branch_work == 1 + (ing.cut != "uncut") + (ing.cook != "raw")
        has_door = spec.door is not None
        assert has_door == (True in band.include_doors or spec.family == "dependency_gate"), where
        if has_door:
            assert spec.door.room == "kitchen" and spec.door.locks_rooms == ["supermarket"]
        limited = spec.agent_inventory_capacity is not None
        assert limited == band.limit_inventory[0] and (not limited or spec.agent_inventory_capacity in band.inventory_capacity)
        assert len({t.cooldown_steps for t in spec.tools}) == 1 and spec.tools[0].cooldown_steps in runtime.tool_cooldown
        allowance = spec.parallelism["budget_tool_allowance"]
        plans = [a for d in plan_task(spec).dishes for p in d.parts for a in p]
        assert allowance == sum(a in TOOL_HANDLING_ACTIONS for a in plans), where
        assert runtime.shared_budget.lo + allowance <= spec.shared_budget <= runtime.shared_budget.hi + allowance, where
        assert min_actions(spec) <= spec.shared_budget, where
        assert spec.parallelism["estimated_sequential_actions"] == min_actions(spec)
        assert spec.parallelism["shared_environment_max_steps"] == spec.shared_budget
        assert spec.description_view == ("coarse" if spec.difficulty == "extreme" else "structured")


def test_ingredients_are_disjoint_and_preparations_follow_complexity(all_specs):
    db = load_food_database()
    for spec in all_specs:
        names = [i.name for d in spec.dishes for i in d.ingredients]
        assert len(names) == len(set(names)) and not set(names) & {x.name for x in spec.distractors}
        foods = {f.name: f for f in db.foods(spec.fold)}
        for dish in spec.dishes:
            for ing in dish.ingredients:
                works = [p.work for p in foods[ing.name].preparations]
                if dish.complexity == "high" and ing.requires_preparation:
                    assert ing.branch_work == max(works), (spec.task_id, ing)
                if dish.complexity == "low" and ing.requires_preparation:
                    assert ing.branch_work == min(w for w in works if w > 1), (spec.task_id, ing)


def test_family_mechanisms_are_in_the_spec(all_specs):
    for spec in all_specs:
        ids = [d.dish_id for d in spec.dishes]
        n = len(ids)
        gated = spec.door.locks_dishes if spec.door else []
        exclusive = {t.name for t in spec.tools if t.exclusive}
        complexities = [d.complexity for d in spec.dishes]
        if spec.family == "dependency_gate":
            assert gated == ids[1:] and spec.parallelism["dependencies"] == [
                {"from": "gate_1", "to": d, "type": "door"} for d in ids[1:]
            ]
            assert "open door" in door_actions(spec)
        else:
            assert gated == [] and spec.parallelism["dependencies"] == []
        assert exclusive == ({"knife", "stove"} if spec.family == "conflict" else set())
        if spec.family == "resource_constrained":
            assert spec.shared_inventory_capacity in DIFFICULTY_BANDS[spec.difficulty].inventory_capacity
        else:
            assert spec.shared_inventory_capacity is None
        if spec.family == "hierarchical":
            assert spec.hierarchy == {"root": ids} | {
                d.dish_id: [f"{d.dish_id}::{i.name}" for i in d.ingredients] for d in spec.dishes
            }
        else:
            assert spec.hierarchy == {}
        if spec.family == "critical_path":
            assert complexities == ["low"] * (n - 2) + ["medium", "high"]
        elif spec.family == "load_balanced":
            assert complexities == ["low"] * (n - 1) + ["high"]
        else:
            assert len(set(complexities)) == 1 and complexities[0] in DIFFICULTY_BANDS[spec.difficulty].complexity


def test_descriptions_show_or_hide_preparations(all_specs):
    prep_words = re.compile(r"\b(raw|uncut|fried|roasted|grilled|baked|boiled|chopped|sliced|diced|minced)\b")
    for spec in all_specs[::7]:
        structured, coarse = spec.descriptions["structured"], spec.descriptions["coarse"]
        assert structured.startswith(f"Prepare and eat {len(spec.dishes)} dishes.")
        for dish in spec.dishes:
            line = "; ".join(f"{i.name} ({i.cook}, {i.cut})" for i in dish.ingredients)
            assert f"{dish.dish_id}: {line}" in structured
            assert f"{dish.dish_id}: {', '.join(i.name for i in dish.ingredients)}" in coarse
        assert not prep_words.search(coarse), spec.task_id
        assert COARSE_COOKBOOK in coarse
        assert spec.family_sentence and spec.family_sentence in structured and spec.family_sentence in coarse
    gate = next(s for s in all_specs if s.family == "dependency_gate" and len(s.dishes) == 3)
    assert gate.family_sentence == "The ingredients of dish_2 and dish_3 are behind the kitchen door: open it first."
    rc = next(s for s in all_specs if s.family == "resource_constrained" and s.shared_inventory_capacity == 2)
    assert "holds at most 2 unprepared ingredients at a time" in rc.family_sentence


def test_plans_use_only_the_documented_vocabulary(splits):
    for spec in splits["test"]:
        names = {i.name for d in spec.dishes for i in d.ingredients}
        assert door_actions(spec) in ([], ["open door"])
        for dish in spec.dishes:
            plan = plan_dish(spec, dish.dish_id)
            assert plan[-2:] == [f"prepare {dish.dish_id}", f"eat {dish.dish_id}"]
            for action in plan:
                m = ACTION.match(action)
                assert m, (spec.task_id, action)
                assert m["room"] is None or m["room"] in spec.rooms
                for key in ("cut", "cooked"):
                    assert m[key] is None or m[key] in names
                assert m["taken"] is None or m["taken"] in names | {"knife"}


def test_plans_succeed_in_the_world_in_exactly_min_actions(splits):
    from sera.envs.textworld.world import SyncWorld

    sample = [s for s in splits["test"] if s.task_id.endswith(("_0000", "_0001"))]
    sample += [s for s in splits["train"] if s.task_id.endswith("_0002")]
    assert len(sample) > 70
    for spec in sample:
        world = SyncWorld(spec)
        world.add_agent("root")
        for action in door_actions(spec):
            assert world.step("root", action).accepted
        for dish in spec.dishes:
            world.add_agent(dish.dish_id)
            for action in plan_dish(spec, dish.dish_id):
                result = world.step(dish.dish_id, action)
                assert result.accepted or action == WAIT, (spec.task_id, action, result.error)
        assert world.success and world.steps_used == min_actions(spec), spec.task_id


def _spec(ingredients, *, rooms=5, cap=None, door=None, exclusive=(), cooldown=0, family="fork_join") -> SyncTaskSpec:
    dish = DishSpec(
        dish_id="dish_1",
        ingredients=[IngredientSpec(name=n, dish_id="dish_1", cook=c, cut=u, source=s) for n, c, u, s in ingredients],
    )
    return SyncTaskSpec(
        task_id="t", split="test", fold="test", family=family, difficulty="medium", seed=0, rooms=list(ROOMS[:rooms]),
        dishes=[dish], door=door, agent_inventory_capacity=cap, shared_budget=100, description_view="structured",
        descriptions={"structured": "x"},
        tools=[ToolSpec(name=t, exclusive=t in exclusive, cooldown_steps=cooldown) for t in ("knife", "stove", "oven", "grill")],
    )


def test_plan_visits_rooms_in_order_and_returns_at_capacity():
    spec = _spec(
        [
            ("red apple", "roasted", "sliced", "garden"),
            ("water", "raw", "uncut", "kitchen.fridge"),
            ("carrot", "fried", "uncut", "pantry.shelf"),
            ("salt", "raw", "uncut", "pantry.shelf"),
            ("parsley", "raw", "chopped", "garden"),
        ],
        cap=1,
    )
    assert plan_dish(spec, "dish_1") == [
        "go to pantry", "take salt", "take carrot",
        "go to kitchen", "cook carrot in stove",
        "go to garden", "take parsley", "chop parsley", "take red apple", "slice red apple",
        "go to kitchen", "cook red apple in oven",
        "take water",
        "prepare dish_1", "eat dish_1",
    ]
    assert door_actions(spec) == [] and min_actions(spec) == 15


def test_plan_handles_exclusive_tools_and_the_door():
    door = DoorSpec(room="kitchen", locks_rooms=["supermarket"])
    spec = _spec(
        [
            ("carrot", "fried", "diced", "garden"),
            ("flour", "raw", "uncut", "supermarket.showcase"),
            ("red potato", "fried", "uncut", "kitchen.counter"),
        ],
        door=door, exclusive=("knife", "stove"), cooldown=1, family="conflict",
    )
    assert plan_dish(spec, "dish_1") == [
        "take knife", "go to garden", "take carrot", "dice carrot", "go to supermarket", "take flour",
        "go to kitchen", "put knife", "claim stove", "cook carrot in stove",
        "take red potato", "cook red potato in stove", "release stove",
        "prepare dish_1", "eat dish_1",
    ]
    assert door_actions(spec) == ["open door"] and min_actions(spec) == 16
    no_supermarket = _spec([("carrot", "fried", "diced", "garden")], door=door)
    assert door_actions(no_supermarket) == []
    gated = _spec([("carrot", "fried", "diced", "garden")], door=DoorSpec(room="kitchen", locks_dishes=["dish_1"]))
    assert door_actions(gated) == ["open door"]


def test_plan_sits_out_cooldowns_only_when_tools_cannot_alternate():
    same_tool = _spec([("carrot", "roasted", "uncut", "garden"), ("red apple", "roasted", "uncut", "garden")], cap=2, cooldown=1)
    assert plan_dish(same_tool, "dish_1") == [
        "go to garden", "take carrot", "take red apple", "go to kitchen",
        "cook carrot in oven", WAIT, "cook red apple in oven", "prepare dish_1", "eat dish_1",
    ]
    mixed = _spec(
        [("carrot", "fried", "uncut", "garden"), ("red apple", "fried", "uncut", "garden"), ("banana", "roasted", "uncut", "garden")],
        cap=3, cooldown=1,
    )
    cooks = [a for a in plan_dish(mixed, "dish_1") if a.startswith("cook")]
    assert cooks == ["cook carrot in stove", "cook banana in oven", "cook red apple in stove"]
    assert WAIT not in plan_dish(mixed, "dish_1")


def test_impossible_band_raises_an_error_naming_the_task(monkeypatch):
    monkeypatch.setitem(RUNTIME_BANDS, "easy", RuntimeBand(IntRange(5, 6), (0,)))
    with pytest.raises(GenerationError, match=r"cookingworld_multidish_test_fork_join_easy_0004 \(seed 820004\).*128"):
        generate_task("test", "fork_join", "easy", 4)


def test_slots_reject_bad_coordinates():
    with pytest.raises(ValueError, match="unknown family 'fork-joinn'"):
        task_seed("test", "fork-joinn", "easy", 0)
    with pytest.raises(ValueError, match="out of range"):
        task_seed("test", "fork_join", "easy", 100)
    with pytest.raises(ValueError, match="unknown split 'val'"):
        bands.split_slots("val")
    assert generator.split_slots("test")[0].task_id == "cookingworld_multidish_test_fork_join_easy_0000"
