"""TextWorld-Sync world: every action family, its precise rejection reasons, the shared clock,
the door, capacities, exclusive tools, cooldowns, spoiling, the end of the world."""

from __future__ import annotations

import asyncio
import json

import pytest

from sera.envs.textworld.spec import DoorSpec
from sera.envs.textworld.world import SyncWorld


def world_of(spec, *agents: str) -> SyncWorld:
    world = SyncWorld(spec)
    for agent in agents or ("n0",):
        world.add_agent(agent)
    return world


def run(world: SyncWorld, agent: str, *actions: str) -> None:
    """Run actions that must all be accepted."""
    for action in actions:
        result = world.step(agent, action)
        assert result.accepted, (action, result.error)


def refused(world: SyncWorld, agent: str, action: str) -> str:
    """Run an action that must be refused (and was not listed); return the reason."""
    listed = world.valid_actions(agent)
    result = world.step(agent, action)
    assert not result.accepted, action
    assert result.error is not None and result.error in result.observation
    assert action not in listed
    return result.error


# -- agents and lookups ------------------------------------------------------------------------


def test_agents_start_in_the_kitchen_and_are_registered_once(make_spec):
    world = world_of(make_spec(), "n0")
    world.add_agent("n3", "garden")
    assert world.location("n0") == "kitchen" and world.location("n3") == "garden"
    with pytest.raises(ValueError, match="n0"):
        world.add_agent("n0")
    with pytest.raises(ValueError, match="moon"):
        world.add_agent("n4", "moon")
    for call in (world.location, world.observe, world.valid_actions):
        with pytest.raises(KeyError, match="ghost"):
            call("ghost")
    with pytest.raises(KeyError, match="ghost"):
        world.step("ghost", "look around")


def test_free_lookups_cost_nothing_and_change_nothing(make_spec):
    world = world_of(make_spec())
    before = world.snapshot()
    aliases = ("look", "check inventory", "view inventory", "i", " LOOK  Around ")
    for action in ("look around", "inventory", "read cookbook", *aliases):
        result = world.step("n0", action)
        assert result.accepted and result.error is None and result.steps_used == 0
        assert "Valid Actions:" in result.observation
    assert world.snapshot() == before and world.events == ()


def test_the_cookbook_lists_every_required_preparation(make_spec):
    text = world_of(make_spec()).step("n0", "read cookbook").observation
    assert "red apple: roasted, sliced" in text
    assert "water: raw, uncut (just fetch it)" in text
    assert "carrot: fried, uncut ('cook carrot in stove')" in text
    assert "red hot pepper: raw, diced ('dice red hot pepper')" in text


def test_invalid_actions_cost_a_step_and_change_nothing_else(make_spec):
    world = world_of(make_spec())
    before = world.snapshot()
    error = refused(world, "n0", "fly to the moon")
    assert error == "unknown command 'fly to the moon'; see Valid Actions"
    assert world.steps_used == 1 and world.remaining_steps == 99
    after = world.snapshot()
    assert {k: v for k, v in after.items() if k not in ("steps_used", "remaining_steps", "events")} == {
        k: v for k, v in before.items() if k not in ("steps_used", "remaining_steps", "events")
    }
    (event,) = world.events
    assert (event.agent, event.action, event.accepted) == ("n0", "fly to the moon", False)
    assert (event.error, event.steps_after) == (error, 1)
    assert (event.location_before, event.location_after) == ("kitchen", "kitchen")


def test_baked_or_boiled_specs_are_rejected_with_the_ingredient_named(make_spec):
    spec = make_spec({"dish_1": [("egg", "boiled", "uncut", "kitchen.fridge")]})
    with pytest.raises(ValueError, match="'egg' of dish_1 must be boiled"):
        SyncWorld(spec)


# -- movement and the door -----------------------------------------------------------------------


def test_go_to_and_move_change_only_the_agents_room(make_spec):
    world = world_of(make_spec(), "n0", "n1")
    assert world.valid_actions("n0")[3:9] == [
        "go to pantry", "go to garden", "go to supermarket", "go to hallway", "move north", "move east"
    ]
    run(world, "n0", "move north")
    assert world.location("n0") == "pantry" and world.location("n1") == "kitchen"
    assert refused(world, "n0", "go to pantry") == "you are already in the pantry"
    assert refused(world, "n0", "move south") == (
        "there is no room to the south (the dining room "
        "is not part of this kitchen)"
    )
    assert refused(world, "n0", "go to attic").startswith("there is no room called 'attic'")
    run(world, "n0", "go to garden", "move west")
    assert world.location("n0") == "supermarket"


def test_door_blocks_rooms_and_gated_dishes_until_opened_in_its_room(make_spec):
    door = DoorSpec(room="kitchen", locks_rooms=["supermarket"], locks_dishes=["dish_2"])
    world = world_of(make_spec(door=door), "n0", "n1")
    world.add_agent("n2", "garden")
    obs = world.observe("n2")
    assert "The door in the kitchen is closed; behind it: the supermarket; the ingredients of dish_2." in obs
    assert "carrot" not in obs.split("Valid Actions:")[0].split("\n")[1]  # the gated carrot is not seen
    assert "banana" in obs  # the distractor next to it is
    assert "take carrot" not in world.valid_actions("n2")
    assert refused(world, "n2", "take carrot") == (
        "the door is closed; "
        "the ingredients of dish_2 are behind it (open it in the kitchen)"
    )
    assert "go to supermarket" not in world.valid_actions("n0") and "move west" not in world.valid_actions("n0")
    assert refused(world, "n0", "go to supermarket") == (
        "the door is closed; "
        "the supermarket is behind it (open it in the kitchen)"
    )
    assert refused(world, "n2", "open door") == "the door is in the kitchen; you are in the garden"
    run(world, "n0", "open door")
    assert "The door in the kitchen is open." in world.observe("n2")
    assert refused(world, "n1", "open door") == "the door is already open"
    run(world, "n2", "take carrot")
    run(world, "n1", "go to supermarket")


def test_open_door_without_a_door_is_refused(make_spec):
    assert refused(world_of(make_spec()), "n0", "open door") == "there is no door to open in this task"


# -- take, drop, capacities --------------------------------------------------------------------


def test_take_and_drop(make_spec):
    world = world_of(make_spec(), "n0", "n1")
    assert refused(world, "n0", "take xyz") == "no item called 'xyz' here"
    assert refused(world, "n0", "take carrot") == "no item called 'carrot' here (you are in the kitchen)"
    run(world, "n0", "take red apple")
    apple = world.item("red apple")
    assert (apple.place, apple.holder, apple.collected) == ("inventory", "n0", True)
    assert "red apple (raw, uncut; taken by agent" not in world.inventory_text("n1")
    assert "- red apple (raw, uncut; taken by n0)" in world.inventory_text("n1")
    assert refused(world, "n1", "drop red apple") == "red apple is held by agent n0, not by you"
    assert refused(world, "n1", "take red apple") == "red apple cannot be taken: held by agent n0"
    run(world, "n0", "go to pantry", "drop red apple")
    apple = world.item("red apple")
    assert (apple.place, apple.room, apple.holder) == ("room", "pantry", None)
    assert "take red apple" in world.valid_actions("n0") and "take red apple" not in world.valid_actions("n1")


def test_fetch_only_ingredients_are_ready_when_taken(make_spec):
    world = world_of(make_spec())
    run(world, "n0", "go to pantry", "take water")
    water = world.item("water")
    assert water.place == "counter" and water.is_ready and water.holder is None
    assert "Ready on the counter: water." in world.observe("n0")
    assert "dish_1: 1/2 ingredients ready; prepared: no; eaten: no" in world.observe("n0")
    assert refused(world, "n0", "take water") == "water cannot be taken: it is already ready on the counter"


def test_agent_capacity_limits_each_agent(make_spec):
    world = world_of(make_spec(agent_cap=1), "n0", "n1")
    run(world, "n0", "take red apple")
    assert "take banana" not in world.valid_actions("n0")
    run(world, "n0", "go to garden")
    assert refused(world, "n0", "take banana") == (
        "you already hold 1/1 items (your capacity); "
        "drop one or get one ready first"
    )
    world.add_agent("n2", "garden")
    run(world, "n2", "take banana")  # another agent's hands are free
    run(world, "n0", "drop red apple", "take carrot")


def test_shared_capacity_limits_all_agents_together(make_spec):
    world = world_of(make_spec(shared_cap=2), "n0", "n1")
    world.add_agent("n2", "garden")
    run(world, "n0", "take red apple")
    run(world, "n2", "take banana")
    assert refused(world, "n2", "take carrot") == (
        "the inventory is full (2/2 shared); "
        "drop an item or get one ready first"
    )
    assert "Shared inventory (2 items; shared capacity 2)" in world.step("n1", "inventory").observation
    run(world, "n0", "slice red apple", "cook red apple in oven")  # ready: goes to the counter, frees room
    run(world, "n2", "take carrot")


# -- preparation -------------------------------------------------------------------------------


def test_all_cuts_and_cookings_are_listed_and_the_right_ones_make_it_ready(make_spec):
    world = world_of(make_spec())
    run(world, "n0", "take red apple")
    valid = world.valid_actions("n0")
    for action in ("chop red apple", "slice red apple", "dice red apple", "mince red apple",
                   "cook red apple in stove", "cook red apple in oven", "cook red apple on grill"):
        assert action in valid
    run(world, "n0", "go to pantry", "slice red apple")  # the knife works anywhere
    assert world.item("red apple").cut == "sliced" and world.item("red apple").place == "inventory"
    assert refused(world, "n0", "dice red apple") == "red apple is already sliced"
    assert refused(world, "n0", "cook red apple in oven") == "you are in the pantry; cooking needs the kitchen"
    assert not any(a.startswith("cook ") for a in world.valid_actions("n0"))
    run(world, "n0", "go to kitchen")
    result = world.step("n0", "cook red apple in oven")
    assert "The red apple is ready and goes to the counter." in result.observation
    assert world.item("red apple").place == "counter" and not world.done
    assert refused(world, "n0", "cook red apple in oven").startswith("red apple is not in the inventory")
    assert refused(world, "n0", "cook red apple on stove") == (
        "cooking is written 'cook <item> in stove', 'cook <item> in oven' or 'cook <item> on grill'"
    )
    assert refused(world, "n0", "cook red apple").startswith("cooking is written")
    assert refused(world, "n0", "cook") == "unknown command 'cook'; see Valid Actions"


def test_wrong_cut_fails_the_task_and_freezes_the_world(make_spec):
    world = world_of(make_spec(), "n0", "n1")
    run(world, "n0", "take red apple")
    result = world.step("n0", "dice red apple")
    assert result.accepted and result.done and not result.success
    assert result.failure == (
        "red apple is raw, diced but dish_1 needs it roasted, sliced; "
        "dish_1 can no longer be completed"
    )
    assert world.item("red apple").wrong
    steps = world.steps_used
    for agent, action in (("n1", "look around"), ("n1", "go to pantry"), ("n0", "fly")):
        late = world.step(agent, action)
        assert not late.accepted and late.error.startswith("the episode is over: the task failed")
    assert world.steps_used == steps and len(world.events) == 2
    assert world.valid_actions("n1") == [] and "Valid Actions: none." in world.observe("n1")


def test_wrong_cooking_fails_the_task(make_spec):
    world = world_of(make_spec())
    run(world, "n0", "take red apple", "cook red apple in stove")
    assert world.done and world.failure.startswith("red apple is fried, uncut but dish_1 needs it roasted, sliced")


def test_cooking_twice_burns_the_item_and_fails_the_task(make_spec):
    world = world_of(make_spec())
    run(world, "n0", "take red apple", "cook red apple in oven")
    assert world.item("red apple").cook == "roasted" and not world.done  # still needs slicing
    run(world, "n0", "cook red apple in oven")
    apple = world.item("red apple")
    assert apple.destroyed and apple.place == "destroyed" and apple.holder is None
    assert world.failure == "red apple was cooked twice and burned; dish_1 can no longer be completed"


def test_distractors_are_placed_takeable_and_useless(make_spec):
    world = world_of(make_spec())
    world.add_agent("n1", "garden")
    assert "You see: carrot, banana." in world.observe("n1")
    run(world, "n1", "take banana", "chop banana", "go to kitchen", "cook banana in oven", "cook banana in oven")
    assert world.item("banana").destroyed and not world.done and world.failure is None
    assert "banana" not in world.snapshot()["counter"]


# -- exclusive tools and cooldowns -----------------------------------------------------------


def test_exclusive_knife_blocks_other_agents_and_says_who_holds_it(make_spec):
    world = world_of(make_spec(exclusive=["knife"]), "n0", "n1")
    run(world, "n1", "take red apple")
    assert not any(a.startswith("slice ") for a in world.valid_actions("n1"))
    assert refused(world, "n1", "slice red apple") == "the knife is unique: 'take knife' in the kitchen first"
    run(world, "n0", "take knife")
    assert "the knife is unique, held by agent n0" in world.observe("n1")
    assert "the knife is unique, held by you" in world.observe("n0")
    assert refused(world, "n1", "slice red apple") == "the knife is held by agent n0"
    assert refused(world, "n1", "take knife") == "the knife is held by agent n0"
    assert refused(world, "n1", "put knife") == "you do not hold the knife (agent n0 does)"
    run(world, "n0", "slice red apple", "go to pantry")  # the holder cuts any inventory item
    assert refused(world, "n0", "put knife") == "you are in the pantry; the knife is returned in the kitchen"
    run(world, "n0", "go to kitchen", "put knife")
    run(world, "n1", "take knife")


def test_exclusive_stove_must_be_claimed(make_spec):
    world = world_of(make_spec(exclusive=["stove"]), "n0", "n1")
    world.add_agent("n2", "garden")
    run(world, "n2", "take carrot", "go to kitchen")
    assert refused(world, "n2", "cook carrot in stove") == "the stove is unique: 'claim stove' in the kitchen first"
    run(world, "n0", "claim stove")
    assert refused(world, "n2", "cook carrot in stove") == "the stove is held by agent n0"
    assert refused(world, "n1", "claim oven") == "the oven is shared by everyone and needs no claiming"
    run(world, "n0", "release stove")
    run(world, "n2", "claim stove", "cook carrot in stove", "release stove")
    assert world.item("carrot").place == "counter"


def test_tool_handling_is_only_listed_for_exclusive_tools(make_spec):
    world = world_of(make_spec())
    valid = world.valid_actions("n0")
    assert not any(a.split()[0] in ("claim", "release", "put") or a == "take knife" for a in valid)
    assert refused(world, "n0", "take knife") == "the knife is shared by everyone and needs no taking"


def test_cooldown_blocks_the_tool_for_the_next_shared_step(make_spec):
    world = world_of(make_spec(cooldown={"knife": 1}), "n0", "n1")
    world.add_agent("n2", "supermarket")
    run(world, "n0", "take red apple")
    run(world, "n2", "take red hot pepper")
    run(world, "n0", "slice red apple")
    assert "the knife is cooling down (1 more shared step)" in world.observe("n2")
    assert "dice red hot pepper" not in world.valid_actions("n2")
    assert refused(world, "n2", "dice red hot pepper") == "the knife is cooling down (1 more shared step)"
    run(world, "n2", "dice red hot pepper")  # the refused try itself used the blocked step
    assert world.item("red hot pepper").place == "counter"


def test_wait_spends_one_shared_step_and_lets_a_cooldown_run_out(make_spec):
    world = world_of(make_spec(cooldown={"knife": 1}))
    run(world, "n0", "go to garden", "take banana", "go to kitchen", "take red apple", "slice red apple")
    assert world.valid_actions("n0")[-1] == "wait"
    assert "chop banana" not in world.valid_actions("n0")  # the knife is cooling down
    before = world.snapshot()
    result = world.step("n0", "wait")
    assert result.accepted and result.steps_used == before["steps_used"] + 1
    assert world.snapshot()["items"] == before["items"] and world.location("n0") == "kitchen"
    assert world.events[-1].action == "wait" and world.events[-1].accepted
    assert "chop banana" in world.valid_actions("n0")


def test_longer_cooldowns_count_on_the_shared_clock(make_spec):
    world = world_of(make_spec(cooldown={"oven": 2}), "n0", "n1")
    run(world, "n0", "take red apple", "cook red apple in oven")
    assert "the oven is cooling down (2 more shared steps)" in world.observe("n1")
    run(world, "n1", "go to pantry")
    run(world, "n1", "take water")
    assert "the oven is usable" in world.observe("n0")


# -- meals, success, budget --------------------------------------------------------------------


def _solve_dish_1(world: SyncWorld, agent: str = "n0") -> None:
    run(world, agent, "take red apple", "slice red apple", "cook red apple in oven")
    run(world, agent, "go to pantry", "take water", "go to kitchen")


def test_prepare_and_eat_then_success_after_every_dish(make_spec):
    world = world_of(make_spec(), "n0", "n1")
    assert refused(world, "n0", "prepare dish_1") == (
        "dish_1 is not ready: 0/2 ingredients on the counter; "
        "missing: red apple, water"
    )
    assert refused(world, "n0", "eat dish_1") == "dish_1 is not prepared yet ('prepare dish_1' first)"
    assert refused(world, "n0", "prepare dish_9") == "there is no dish called 'dish_9' (dishes: dish_1, dish_2)"
    _solve_dish_1(world)
    run(world, "n1", "go to garden")
    assert refused(world, "n1", "prepare dish_1") == "you are in the garden; meals are prepared in the kitchen"
    run(world, "n0", "prepare dish_1")
    assert world.item("water").place == "meal" and "Ready on the counter: nothing." in world.observe("n0")
    assert refused(world, "n0", "prepare dish_1") == "dish_1 is already prepared"
    run(world, "n0", "eat dish_1")
    assert refused(world, "n0", "eat dish_1") == "dish_1 was already eaten"
    assert not world.done
    run(world, "n1", "take carrot", "go to kitchen", "cook carrot in stove", "go to supermarket", "take red hot pepper",
        "dice red hot pepper", "go to kitchen", "prepare dish_2")
    result = world.step("n1", "eat dish_2")
    assert result.done and result.success and result.failure is None
    assert result.observation.count("The episode is over: every dish has been eaten, the task is complete.") == 1


def test_budget_exhaustion_ends_the_world_for_every_agent(make_spec):
    world = world_of(make_spec(budget=3), "n0", "n1")
    run(world, "n0", "go to pantry")
    refused(world, "n1", "fly")
    result = world.step("n0", "go to kitchen")
    assert result.accepted and result.done and not result.success and result.steps_used == 3
    assert world.remaining_steps == 0
    for agent in ("n0", "n1"):
        late = world.step(agent, "inventory")
        assert not late.accepted and "shared budget of 3 steps is used up" in late.error
    assert world.steps_used == 3


# -- clone, commit, snapshot, concurrency -------------------------------------------------------


def test_clones_are_independent_both_ways_and_have_their_own_lock(make_spec):
    world = world_of(make_spec(exclusive=["knife"]), "n0")
    run(world, "n0", "take red apple")
    twin = world.clone()
    assert twin.lock is not world.lock and twin.snapshot() == world.snapshot()
    run(twin, "n0", "take knife", "slice red apple")
    twin.add_agent("n9")
    assert world.item("red apple").cut == "uncut" and world.snapshot()["tools"]["knife"]["holder"] is None
    assert "n9" not in world.agents and world.steps_used == 1 and len(world.events) == 1
    run(world, "n0", "go to pantry")
    assert twin.location("n0") == "kitchen" and twin.steps_used == 3


def test_commit_adopts_a_branch_and_refuses_other_tasks(make_spec):
    world = world_of(make_spec(), "n0")
    lock = world.lock
    branch = world.clone()
    _solve_dish_1(branch)
    world.commit(branch)
    assert world.snapshot() == branch.snapshot() and world.lock is lock
    run(branch, "n0", "prepare dish_1")  # the committed state does not follow the branch afterwards
    assert not world.is_prepared("dish_1")
    other = world_of(make_spec(task_id="another_task"), "n0")
    with pytest.raises(ValueError, match="another_task"):
        world.commit(other)


def test_snapshot_is_json_and_names_everything_observable(make_spec):
    door = DoorSpec(room="kitchen", locks_rooms=["supermarket"], locks_dishes=["dish_2"])
    world = world_of(make_spec(door=door, exclusive=["knife"], agent_cap=2), "n0")
    run(world, "n0", "take red apple", "take knife")
    snap = json.loads(json.dumps(world.snapshot()))
    assert snap["items"]["red apple"]["place"] == "inventory"
    assert snap["items"]["water"]["place"] == ["room", "pantry.shelf"]
    assert snap["tools"]["knife"] == {"exclusive": True, "holder": "n0", "cooldown_remaining": 0}
    assert snap["door_open"] is False and snap["agents"] == {"n0": "kitchen"}
    assert snap["dishes"]["dish_1"] == {"ready": 0, "total": 2, "prepared": False, "eaten": False}


async def test_concurrent_asteps_from_many_agents_keep_the_invariants(make_spec):
    world = world_of(make_spec(budget=30, shared_cap=3), *(f"n{i}" for i in range(6)))
    plan = ["go to garden", "take banana", "take carrot", "look", "go to kitchen", "drop banana", "xyz"]

    async def agent(agent_id: str) -> list:
        out = []
        for action in plan:
            out.append((action, await world.astep(agent_id, action)))
            await asyncio.sleep(0)  # let the siblings act in between
        return out

    results = [r for rs in await asyncio.gather(*(agent(f"n{i}") for i in range(6))) for r in rs]
    charged = [r for a, r in results if a != "look" and not (r.error or "").startswith("the episode is over")]
    assert world.steps_used == len(charged) == len(world.events) == 30 and world.done
    assert [e.seq for e in world.events] == list(range(30))
    assert [e.steps_after for e in world.events] == list(range(1, 31))
    assert len({e.agent for e in world.events[:6]}) == 6  # the agents really interleaved
    assert sum(1 for a, r in results if a == "take carrot" and r.accepted) == 1
    assert sum(1 for a, r in results if a == "take banana" and r.accepted) >= 1
    assert len(world.snapshot()["inventory"]) <= 3
