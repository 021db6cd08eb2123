"""Property tests: random action sequences from several agents (valid actions plus garbage) keep
the world's invariants, the valid list equals the accepted set, and clones stay independent;
each kitchen is played under both rules profiles (`sync` and `reference`)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sera.envs.textworld.actions import Rules, command_universe
from sera.envs.textworld.spec import DoorSpec
from sera.envs.textworld.world import SyncWorld

AGENTS = ("n0", "n1", "n2")
GARBAGE = ["fly", "take", "cook red apple", "take the red apple", "slice knife", "go to moon", "eat", "put banana",
           "claim fridge", "", "   ", "prepare dish_9", "move up", "cook red apple in microwave"]
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_invariants(world: SyncWorld) -> None:
    snap = world.snapshot()
    agents = set(world.agents)
    held_by: dict[str, int] = {}
    for name, item in snap["items"].items():
        state = world.item(name)
        # exactly one place, with the fields that go with it
        if state.place == "room":
            assert state.room in world.spec.rooms and state.holder is None
        elif state.place == "inventory":
            assert state.holder in agents and state.room == "" and state.collected
            held_by[state.holder] = held_by.get(state.holder, 0) + 1
            assert not state.prepared_as_expected  # a ready ingredient never stays in the inventory
        else:
            assert state.holder is None and state.room == "" and state.collected
        assert (state.place == "destroyed") == state.destroyed
        if state.place == "counter":
            assert state.prepared_as_expected
    ready = {n for n, i in snap["items"].items() if world.item(n).place == "counter"}
    assert set(snap["counter"]) == ready and len(snap["counter"]) == len(ready)
    assert sum(held_by.values()) == len(snap["inventory"])
    caps = snap["capacity"]  # as the rules profile reads the spec
    if caps["shared"] is not None:
        assert len(snap["inventory"]) <= caps["shared"]
    if caps["agent"] is not None:
        assert all(count <= caps["agent"] for count in held_by.values())
    if world.spec.rules == "reference":
        # only required preparations are possible, and no tool is ever held (cooldowns only)
        assert not any(world.item(n).wrong or world.item(n).destroyed for n in snap["items"])
        assert world.failure is None and not holders_of(snap)
        assert caps["agent"] is None
        shared, own = world.spec.shared_inventory_capacity, world.spec.agent_inventory_capacity
        assert caps["shared"] == (shared if shared is not None else own)
    assert 0 <= world.steps_used <= world.spec.shared_budget
    assert [e.steps_after for e in world.events] == list(range(1, len(world.events) + 1))
    assert set(holders_of(snap)) <= agents


def holders_of(snap: dict) -> list[str]:
    return [t["holder"] for t in snap["tools"].values() if t["holder"] is not None]


def random_walk(data, world: SyncWorld, universe: list[str], length: int) -> None:
    for _ in range(length):
        agent = data.draw(st.sampled_from(AGENTS))
        valid = world.valid_actions(agent)
        pool = st.sampled_from(valid) if valid else st.sampled_from(GARBAGE)
        action = data.draw(st.one_of(pool, pool, pool, st.sampled_from(universe), st.sampled_from(GARBAGE)))
        before, was_done = world.steps_used, world.done
        result = world.step(agent, action)
        lookup = action.strip().lower() in ("look around", "inventory", "read cookbook")
        free = result.accepted and lookup and world.spec.rules == "sync"  # reference: lookups cost a step
        assert world.steps_used == before + (0 if was_done or free else 1)
        assert result.accepted == (not was_done and (action in valid or action.strip().lower() in ("look", "i")))
        check_invariants(world)


@pytest.fixture(scope="module")
def kitchens(make_spec):
    """Two kitchens: (door, exclusive knife and stove, cooldown 1, both capacities) and (6 rooms,
    oven cooldown 2, agent capacity 1), each under `sync` (0, 1) and `reference` rules (2, 3);
    each with its command universe."""
    specs = [
        make_spec(
            door=DoorSpec(room="kitchen", locks_rooms=["supermarket"], locks_dishes=["dish_2"]),
            exclusive=["knife", "stove"], cooldown=1, agent_cap=2, shared_cap=3, budget=45,
            distractors=[("banana", "garden"), ("egg", "kitchen.fridge"), ("milk", "hallway")],
        ),
        make_spec(cooldown={"oven": 2}, agent_cap=1, budget=30, rooms=6),
    ]
    specs += [spec.model_copy(update={"rules": "reference"}) for spec in specs]
    return [(spec, command_universe(Rules.from_spec(spec))) for spec in specs]


def new_world(kitchens, index: int) -> tuple[SyncWorld, list[str]]:
    spec, universe = kitchens[index]
    world = SyncWorld(spec)
    for agent in AGENTS:
        world.add_agent(agent)
    return world, universe


@FAST
@given(data=st.data(), index=st.sampled_from([0, 1, 2, 3]))
def test_random_multi_agent_walks_keep_the_invariants(kitchens, data, index):
    world, universe = new_world(kitchens, index)
    random_walk(data, world, universe, data.draw(st.integers(10, 60)))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), index=st.sampled_from([0, 1, 2, 3]))
def test_the_valid_list_is_exactly_what_is_accepted(kitchens, data, index):
    world, universe = new_world(kitchens, index)
    random_walk(data, world, universe, data.draw(st.integers(0, 25)))
    for agent in AGENTS:
        valid = set(world.valid_actions(agent))
        for command in universe:
            accepted = world.clone().step(agent, command).accepted
            is_lookup = command in ("look around", "inventory", "read cookbook")
            assert accepted == (command in valid or (is_lookup and not world.done)), (agent, command)


@FAST
@given(data=st.data(), index=st.sampled_from([0, 1, 2, 3]))
def test_clones_stay_independent(kitchens, data, index):
    world, universe = new_world(kitchens, index)
    random_walk(data, world, universe, data.draw(st.integers(0, 20)))
    twin = world.clone()
    frozen_original, frozen_twin = world.snapshot(), twin.snapshot()
    assert frozen_original == frozen_twin
    random_walk(data, twin, universe, 15)
    assert world.snapshot() == frozen_original
    random_walk(data, world, universe, 15)
    twin_after = twin.snapshot()
    world.commit(twin)
    assert world.snapshot() == twin_after
