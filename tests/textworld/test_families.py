"""Each task family's mechanism, on generated tasks: it changes what agents can do."""

from __future__ import annotations

import pytest

from sera.envs.textworld.plan import plan_task
from sera.envs.textworld.reference_plan import plan_dish
from sera.envs.textworld.spec import SyncTaskSpec
from sera.envs.textworld.subtask import check_subtask
from sera.envs.textworld.tasks import load_split_specs
from sera.envs.textworld.world import SyncWorld


def _first(family: str, difficulty: str, where=lambda s: True) -> SyncTaskSpec:
    return next(s for s in load_split_specs("test") if s.family == family and s.difficulty == difficulty and where(s))


def _walk_to(world: SyncWorld, agent: str, room: str) -> None:
    if world.location(agent) != room:
        assert world.step(agent, f"go to {room}").accepted


def test_resource_constrained_capacity_is_shared_by_all_agents():
    spec = _first("resource_constrained", "hard")
    cap = spec.shared_inventory_capacity
    assert cap is not None
    world = SyncWorld(spec)
    need_prep = [i for d in spec.dishes for i in d.ingredients if i.requires_preparation and i.cook != "raw"]
    agents = [f"a{k}" for k in range(cap + 1)]
    for agent, item in zip(agents, need_prep):
        world.add_agent(agent)
        if spec.door and item.room in spec.door.locks_rooms:
            world.step(agent, "open door")  # refused harmlessly when a sibling already opened it
        _walk_to(world, agent, item.room)
        result = world.step(agent, f"take {item.name}")
        if agent != agents[-1]:
            assert result.accepted, result.error
    # The last agent holds nothing itself, yet the shared inventory is full.
    assert not result.accepted and "full" in result.error


def test_dependency_gate_hides_dishes_two_to_n_until_the_door_opens():
    def gated_in_kitchen(s: SyncTaskSpec) -> list:
        return [i for d in s.dishes[1:] for i in d.ingredients if i.room == "kitchen"]

    spec = _first("dependency_gate", "medium", gated_in_kitchen)
    gated = gated_in_kitchen(spec)
    assert spec.door and spec.door.locks_dishes == [d.dish_id for d in spec.dishes[1:]]
    world = SyncWorld(spec)
    world.add_agent("a")
    assert f"take {gated[0].name}" not in world.valid_actions("a")
    assert not world.step("a", f"take {gated[0].name}").accepted
    assert world.step("a", "open door").accepted
    assert f"take {gated[0].name}" in world.valid_actions("a")


def test_conflict_tools_are_held_by_one_agent_at_a_time_and_contention_is_visible():
    spec = _first("conflict", "medium")
    assert {t.name for t in spec.tools if t.exclusive} == {"knife", "stove"}
    world = SyncWorld(spec)
    world.add_agent("a")
    world.add_agent("b")
    assert world.step("a", "take knife").accepted
    assert "take knife" not in world.valid_actions("b")
    refused = world.step("b", "take knife")
    assert not refused.accepted and "a" in refused.error
    assert "held by agent a" in world.observe("b")


def test_fork_join_dishes_can_be_done_by_concurrent_agents():
    spec = _first("fork_join", "easy")
    assert plan_task(spec).concurrent
    world = SyncWorld(spec)
    plans = {d.dish_id: plan_dish(spec, d.dish_id) for d in spec.dishes}
    for dish_id in plans:
        world.add_agent(dish_id)
    # Interleave the dishes' agents action by action: nothing blocks, the task succeeds.
    for turn in range(max(len(p) for p in plans.values())):
        for dish_id, plan in plans.items():
            if turn < len(plan):
                assert world.step(dish_id, plan[turn]).accepted, (dish_id, plan[turn])
    assert world.success


@pytest.mark.parametrize("family, tail", [("critical_path", ["medium", "high"]), ("load_balanced", ["high"])])
def test_unequal_branches_give_one_dish_a_longer_plan(family, tail):
    spec = _first(family, "hard")
    complexity = [d.complexity for d in spec.dishes]
    assert complexity == ["low"] * (len(complexity) - len(tail)) + tail
    work = [d.work for d in spec.dishes]
    assert work[-1] == max(work) and work[-1] > min(work)
    lengths = [len(plan_dish(spec, d.dish_id)) for d in spec.dishes]
    assert lengths[-1] > min(lengths)


def test_hierarchical_ingredient_level_goals_are_checked_programmatically():
    spec = _first("hierarchical", "medium")
    dish = spec.dishes[0]
    assert spec.hierarchy["root"] == [d.dish_id for d in spec.dishes]
    assert spec.hierarchy[dish.dish_id] == [f"{dish.dish_id}::{i.name}" for i in dish.ingredients]
    item = dish.ingredients[0]
    world = SyncWorld(spec)
    goal = f"Get the {item.name} ready for {dish.dish_id}: it must be {item.cook} and {item.cut}."
    before = check_subtask(goal, spec, world)
    assert before.covered and before.kind == "ingredients" and before.success is False
