"""Hand-built TextWorld-Sync specs for the world, scorer and subtask tests.

`make_spec` (a fixture returning the builder) writes a small kitchen in a few lines: dishes as
`{dish_id: [(name, cook, cut, source), ...]}` and the mechanisms as keyword arguments.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from sera.envs.textworld.spec import ROOMS, DishSpec, DistractorSpec, DoorSpec, IngredientSpec, SyncTaskSpec, ToolSpec

DEFAULT_DISHES: dict[str, list[tuple[str, str, str, str]]] = {
    "dish_1": [("red apple", "roasted", "sliced", "kitchen.fridge"), ("water", "raw", "uncut", "pantry.shelf")],
    "dish_2": [("carrot", "fried", "uncut", "garden"), ("red hot pepper", "raw", "diced", "supermarket.showcase")],
}
"""Two dishes: one cut+cook, one fetch-only, one cook-only, one cut-only ingredient."""


def build_spec(
    dishes: dict[str, list[tuple[str, str, str, str]]] | None = None,
    *,
    distractors: Iterable[tuple[str, str]] = (("banana", "garden"),),
    rooms: int = 5,
    door: DoorSpec | None = None,
    exclusive: Iterable[str] = (),
    cooldown: int | dict[str, int] = 0,
    agent_cap: int | None = None,
    shared_cap: int | None = None,
    budget: int = 100,
    task_id: str = "cookingworld_multidish_test_fork_join_easy_0000",
) -> SyncTaskSpec:
    """A valid `SyncTaskSpec` from a compact description (defaults: `DEFAULT_DISHES`, 5 rooms)."""
    dishes = DEFAULT_DISHES if dishes is None else dishes
    exclusive = set(exclusive)
    cooldowns = cooldown if isinstance(cooldown, dict) else {t: cooldown for t in ("knife", "stove", "oven", "grill")}
    return SyncTaskSpec(
        task_id=task_id,
        split="test",
        fold="train",
        family="fork_join",
        difficulty="easy",
        seed=0,
        rooms=list(ROOMS[:rooms]),
        dishes=[
            DishSpec(
                dish_id=dish_id,
                ingredients=[
                    IngredientSpec(name=n, dish_id=dish_id, cook=c, cut=u, source=s) for n, c, u, s in ingredients
                ],
            )
            for dish_id, ingredients in dishes.items()
        ],
        distractors=[DistractorSpec(name=n, source=s) for n, s in distractors],
        door=door,
        tools=[
            ToolSpec(name=t, exclusive=t in exclusive, cooldown_steps=cooldowns.get(t, 0))
            for t in ("knife", "stove", "oven", "grill")
        ],
        agent_inventory_capacity=agent_cap,
        shared_inventory_capacity=shared_cap,
        shared_budget=budget,
        description_view="structured",
        descriptions={"structured": "Prepare and eat the dishes."},
    )


@pytest.fixture(scope="session")
def make_spec():
    """The `build_spec` builder (a pure function, so one per session)."""
    return build_spec
