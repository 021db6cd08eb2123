"""Root scorer of TextWorld-Sync: per-dish and per-ingredient verdicts read from a world.

An ingredient is *complete* when it was collected, is neither destroyed nor wrongly prepared, and
its actual (cook, cut) equals the expected one (it is then on the counter or in the meal). A dish
*succeeds* when all its ingredients are complete and its meal was prepared and eaten; it is
*invalid* when any ingredient is wrongly prepared or destroyed. The task succeeds iff it has at
least one dish and every dish succeeds; it fails iff any dish is invalid.

`score` is the fraction of dishes that succeeded (in [0, 1]; 1.0 iff `success`). It gives partial
credit for whole dishes only: ingredients of an unfinished dish count for nothing.
"""

from __future__ import annotations

from pydantic import ConfigDict, computed_field

from sera.envs.textworld.world import SyncWorld
from sera.types import Record

_FROZEN = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class IngredientReport(Record):
    """One ingredient's verdict."""

    model_config = _FROZEN

    name: str
    """Food name."""
    expected: tuple[str, str]
    """Required (cook, cut)."""
    actual: tuple[str, str]
    """(cook, cut) applied so far."""
    collected: bool
    """Taken by some agent at least once."""
    complete: bool
    """Collected, not destroyed, not wrong, and actual == expected."""
    wrong_preparation: bool
    """A cut or cooking other than the expected one was applied."""
    destroyed: bool
    """Burned (cooked twice)."""


class DishReport(Record):
    """One dish's verdict (`model_dump` includes the computed verdicts)."""

    model_config = _FROZEN

    dish_id: str
    """Dish id."""
    ingredients: tuple[IngredientReport, ...]
    """Its ingredients, in task order."""
    prepared: bool
    """Its meal was prepared."""
    eaten: bool
    """Its meal was eaten."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def complete_count(self) -> int:
        """How many ingredients are complete."""
        return sum(1 for i in self.ingredients if i.complete)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def invalid(self) -> bool:
        """True when an ingredient is wrongly prepared or destroyed (the dish can no longer succeed)."""
        return any(i.wrong_preparation or i.destroyed for i in self.ingredients)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def success(self) -> bool:
        """All ingredients complete, meal prepared and eaten."""
        return all(i.complete for i in self.ingredients) and self.prepared and self.eaten and not self.invalid

    def summary(self) -> str:
        """`dish_1: done` / `dish_2: 3/4 ingredients complete, prepared: no, eaten: no` / `dish_3: FAILED (...)`."""
        if self.success:
            return f"{self.dish_id}: done"
        if self.invalid:
            bad = [f"{i.name} {'burned' if i.destroyed else 'wrongly prepared'}" for i in self.ingredients
                   if i.destroyed or i.wrong_preparation]
            return f"{self.dish_id}: FAILED ({', '.join(bad)})"
        return (
            f"{self.dish_id}: {self.complete_count}/{len(self.ingredients)} ingredients complete, "
            f"prepared: {'yes' if self.prepared else 'no'}, eaten: {'yes' if self.eaten else 'no'}"
        )


class ScoreReport(Record):
    """The root task's verdict (JSON via `model_dump(mode="json")`)."""

    model_config = _FROZEN

    task_id: str
    """Task id."""
    dishes: tuple[DishReport, ...]
    """Per-dish verdicts, in task order."""
    success: bool
    """At least one dish, and every dish succeeded."""
    failure: bool
    """Some dish is invalid (wrong preparation or destroyed ingredient)."""
    score: float
    """Fraction of dishes that succeeded, in [0, 1]."""
    steps_used: int
    """Shared steps used when scored."""

    def summary(self) -> str:
        """One readable line."""
        verdict = "SUCCESS" if self.success else "FAILURE" if self.failure else "in progress"
        done = sum(1 for d in self.dishes if d.success)
        parts = "; ".join(d.summary() for d in self.dishes)
        return (
            f"{self.task_id}: {verdict}, {done}/{len(self.dishes)} dishes done (score {self.score:.2f}), "
            f"{self.steps_used} shared steps; {parts}"
        )


def score(world: SyncWorld) -> ScoreReport:
    """Score a world's current state."""
    dishes = []
    for dish in world.spec.dishes:
        reports = []
        for ing in dish.ingredients:
            item = world.item(ing.name)
            reports.append(
                IngredientReport(
                    name=ing.name,
                    expected=(ing.cook, ing.cut),
                    actual=(item.cook, item.cut),
                    collected=item.collected,
                    complete=item.collected and item.is_ready,
                    wrong_preparation=item.wrong,
                    destroyed=item.destroyed,
                )
            )
        dishes.append(
            DishReport(
                dish_id=dish.dish_id,
                ingredients=tuple(reports),
                prepared=world.is_prepared(dish.dish_id),
                eaten=world.is_eaten(dish.dish_id),
            )
        )
    succeeded = sum(1 for d in dishes if d.success)
    return ScoreReport(
        task_id=world.spec.task_id,
        dishes=tuple(dishes),
        success=bool(dishes) and succeeded == len(dishes),
        failure=any(d.invalid for d in dishes),
        score=succeeded / len(dishes) if dishes else 0.0,
        steps_used=world.steps_used,
    )
