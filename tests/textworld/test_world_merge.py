"""Committing a counterfactual branch into a live kitchen: a three-way merge, not an overwrite."""

from __future__ import annotations

import pytest

from sera.envs.textworld.world import SyncWorld


@pytest.fixture
def live(make_spec) -> SyncWorld:
    world = SyncWorld(make_spec())
    world.add_agent("n0")
    return world


def test_sync_merge_keeps_a_sibling_action_taken_while_the_branch_ran(live):
    live.add_agent("n1")  # a sibling acting on the live world
    base, branch = live.clone(), live.clone()
    branch.add_agent("n2")
    assert branch.step("n2", "take red apple").accepted
    assert live.step("n1", "go to pantry").accepted and live.step("n1", "take water").accepted
    assert live.merge(branch, base) == 0
    assert live.item("red apple").holder == "n2"
    assert live.item("water").place == "counter"  # raw, uncut: ready as soon as n1 took it
    assert live.location("n2") == "kitchen" and live.location("n1") == "pantry"
    assert live.steps_used == 3
    assert [e.seq for e in live.events] == [0, 1, 2]
    assert [e.agent for e in live.events] == ["n1", "n1", "n2"]


def test_sync_merge_counts_a_conflict_and_the_branch_wins(live):
    live.add_agent("n1")
    base, branch = live.clone(), live.clone()
    branch.add_agent("n2")
    assert branch.step("n2", "take red apple").accepted
    assert live.step("n1", "take red apple").accepted  # the same item, taken twice in two worlds
    assert live.merge(branch, base) == 1
    assert live.item("red apple").holder == "n2"


def test_sync_merge_settles_the_world_after_the_branch_finished_it(live):
    base, branch = live.clone(), live.clone()
    branch._state.eaten = frozenset({"dish_1", "dish_2"})  # the branch completed the task
    live.merge(branch, base)
    assert live.done and live.success


def test_sync_merge_refuses_a_world_of_another_task(live, make_spec):
    other = SyncWorld(make_spec(task_id="cookingworld_multidish_test_fork_join_easy_0001"))
    with pytest.raises(ValueError, match="cannot merge a world of task"):
        live.merge(other, live.clone())
