"""Task descriptions of TextWorld-Sync: the structured and the coarse view, and family sentences.

Structured (easy, medium, hard: the root agent reads every required preparation):

    Prepare and eat 2 dishes.
    dish_1: red apple (roasted, sliced); water (raw, uncut); salt (raw, uncut)
    dish_2: carrot (fried, diced); flour (raw, uncut); olive oil (raw, uncut)
    The dishes are independent and can be prepared in parallel.
    Prepare every dish exactly as listed, then eat it. An ingredient prepared any other way fails the task.

Coarse (extreme: names only; the preparations are in the cookbook, which `read cookbook` shows):

    Prepare and eat 2 dishes.
    dish_1: red apple, water, salt
    dish_2: carrot, flour, olive oil
    The dishes are independent and can be prepared in parallel.
    Read the cookbook to learn how each ingredient must be prepared.
    Prepare every dish exactly as the cookbook says, then eat it. An ingredient prepared any other way fails the task.

Both views are stored in every task; `VIEW_BY_DIFFICULTY` says which one the root agent reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from sera.envs.textworld.spec import DishSpec

VIEW_BY_DIFFICULTY: dict[str, str] = {"easy": "structured", "medium": "structured", "hard": "structured", "extreme": "coarse"}
"""Which description the root agent reads, by difficulty."""

STRUCTURED_CLOSING = "Prepare every dish exactly as listed, then eat it. An ingredient prepared any other way fails the task."
COARSE_COOKBOOK = "Read the cookbook to learn how each ingredient must be prepared."
COARSE_CLOSING = (
    "Prepare every dish exactly as the cookbook says, then eat it. An ingredient prepared any other way fails the task."
)


def family_sentence(family: str, dish_ids: Sequence[str], shared_capacity: int | None = None) -> str:
    """The family's extra sentence; `dish_ids` in order, `shared_capacity` for resource_constrained."""
    if family == "fork_join":
        return "The dishes are independent and can be prepared in parallel."
    if family == "critical_path":
        return "The dishes need unequal preparation work; one takes much longer."
    if family == "load_balanced":
        return "Workloads differ between dishes."
    if family == "resource_constrained":
        if shared_capacity is None:
            raise ValueError("the resource_constrained sentence needs the shared inventory capacity")
        noun = "ingredient" if shared_capacity == 1 else "ingredients"
        return f"All agents share an inventory that holds at most {shared_capacity} unprepared {noun} at a time."
    if family == "dependency_gate":
        gated = list(dish_ids[1:])
        if not gated:
            raise ValueError("the dependency_gate sentence needs at least two dishes")
        verb = "is" if len(gated) == 1 else "are"
        names = gated[0] if len(gated) == 1 else ", ".join(gated[:-1]) + " and " + gated[-1]
        return f"The ingredients of {names} {verb} behind the kitchen door: open it first."
    if family == "conflict":
        return (
            "The knife and the stove are unique: an agent must take the knife / claim the stove before "
            "using it and put it back / release it after."
        )
    if family == "hierarchical":
        return "Each dish has ingredient-level sub-goals."
    raise ValueError(f"unknown family {family!r}")


def preparation_text(cook: str, cut: str) -> str:
    """`roasted, sliced`."""
    return f"{cook}, {cut}"


def structured_description(dishes: Sequence[DishSpec], sentence: str) -> str:
    """Every dish with every ingredient's required preparation."""
    lines = [f"Prepare and eat {len(dishes)} dishes."]
    for dish in dishes:
        items = "; ".join(f"{i.name} ({preparation_text(i.cook, i.cut)})" for i in dish.ingredients)
        lines.append(f"{dish.dish_id}: {items}")
    lines += [sentence, STRUCTURED_CLOSING]
    return "\n".join(line for line in lines if line)


def coarse_description(dishes: Sequence[DishSpec], sentence: str) -> str:
    """Every dish with its ingredient names only."""
    lines = [f"Prepare and eat {len(dishes)} dishes."]
    lines += [f"{d.dish_id}: {', '.join(i.name for i in d.ingredients)}" for d in dishes]
    lines += [sentence, COARSE_COOKBOOK, COARSE_CLOSING]
    return "\n".join(line for line in lines if line)


def describe(dishes: Sequence[DishSpec], sentence: str) -> dict[str, str]:
    """Both views: {"structured": ..., "coarse": ...}."""
    return {"structured": structured_description(dishes, sentence), "coarse": coarse_description(dishes, sentence)}
