"""Programmatic checks of delegated TextWorld-Sync goals (the paper cannot verify free-form
subtasks; we verify the ones we can read).

`check_subtask(goal, spec, world)` recognises these goals (case-insensitive), and only these:

1. **Dish goals** name one or more dishes: `dish_2`, `dish 2`, `Dish #2`, `dishes 1 and 3`,
   `dish_1, dish_2 & dish_4`, `dishes 2-4` / `dish 1 to 3` (ranges). Succeeds iff every named
   dish is prepared and none of its ingredients is wrong or destroyed; if the goal says
   eat/eaten/eating/consume, every named dish must also be eaten. A dish number the task lacks makes the goal covered but failed.
2. **Ingredient goals** name no dish but one or more ingredients of the task (names are matched
   longest first on word boundaries, plurals `-s`/`-es` allowed, and distractor names are
   matched too, so "red hot pepper" or a distractor "red apple" never count as "pepper" or
   "apple"). Succeeds iff every named ingredient is ready (on the counter or in a prepared meal)
   and neither wrong nor destroyed.
3. **Mixed goals** name dishes and ingredients: a named dish is a *target* when none of its own
   ingredients is named, when a meal verb governs it ("prepare dish_1", "make and serve dishes 1
   and 2", "until dish_1 is prepared"), or when the goal asks to eat. Otherwise the dish is only
   context ("fetch the water for dish_1"), and the goal is checked as an ingredient goal for the
   ingredients it names. Ingredients of non-target dishes are checked as ingredients, alongside
   the target dishes (kind `dish`). This refines the rule "any named dish is checked as a dish":
   a child told "slice the red apple for dish_1" succeeded when the apple is ready, not only when
   dish_1 is prepared.
Anything else (no dish, no ingredient of the task: "explore the house", "find the knife", only
distractors) is not covered: `covered=False`, `success=None`. Negations ("do not eat dish_1") are
not understood: the words count as if they were positive.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict

from sera.envs.textworld.spec import SyncTaskSpec
from sera.envs.textworld.world import SyncWorld
from sera.types import Record

_DISH_REF = re.compile(
    r"\bdish(?:es)?[\s_#-]*(\d+(?:\s*(?:,|&|\band\b|\bor\b|-|\bto\b|\bthrough\b)\s*(?:dish(?:es)?[\s_#-]*)?\d+\b)*)",
    re.IGNORECASE,
)
_RANGE = re.compile(r"(\d+)\s*(?:-|\bto\b|\bthrough\b)\s*(?:dish(?:es)?[\s_#-]*)?(\d+)", re.IGNORECASE)
_EAT = re.compile(r"\b(?:eat|eats|eaten|eating|consume|consumes|consumed|consuming)\b", re.IGNORECASE)
_MEAL_VERB_BEFORE = re.compile(
    r"\b(?:prepare|prepares|preparing|make|making|complete|completing|finish|finishing|serve|serving|"
    r"cook|cooking|assemble|assembling|eat|eating|consume)"
    r"(?:\s+(?:and|&)\s+\w+)?\s+(?:the\s+|both\s+|all\s+)?(?:meals?\s+(?:of|for)\s+)?$",
    re.IGNORECASE,
)
_MEAL_STATE_AFTER = re.compile(
    r"^\s*(?:is|are|gets?|has\s+been|have\s+been)?\s*(?:fully\s+)?"
    r"(?:prepared|made|completed|finished|served|eaten|assembled|done)\b",
    re.IGNORECASE,
)


class SubtaskVerdict(Record):
    """Whether a delegated goal is one we can check, and if so whether the world satisfies it."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)

    covered: bool
    """True when the goal has a recognised form (see the module docstring)."""
    kind: Literal["dish", "ingredients"] | None
    """`dish` when at least one dish is a target, `ingredients` for ingredient-only goals."""
    targets: list[str]
    """Target dish ids, then target ingredient names, in task order."""
    success: bool | None
    """Whether every target is satisfied; None when not covered."""
    detail: str
    """Per target: what was found (readable)."""


def _name_pattern(name: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(w) for w in name.lower().split())
    return re.compile(rf"(?<![a-z0-9]){words}(?:e?s)?(?![a-z0-9])")


def _named_foods(goal: str, spec: SyncTaskSpec) -> set[str]:
    """Task foods (ingredients and distractors) named in `goal`, longest names first."""
    foods = [i.name for d in spec.dishes for i in d.ingredients] + [x.name for x in spec.distractors]
    text = goal.lower()
    found: set[str] = set()
    for name in sorted(foods, key=len, reverse=True):
        pattern = _name_pattern(name)
        if pattern.search(text):
            found.add(name)
            # Mask the match so a shorter name inside it ("pepper" in "red hot pepper") cannot match.
            text = pattern.sub(lambda m: "#" * len(m.group(0)), text)
    return found


def _named_dishes(goal: str) -> list[tuple[str, bool]]:
    """(dish id, governed by a meal verb) for each dish reference, in order of appearance."""
    out: list[tuple[str, bool]] = []
    for match in _DISH_REF.finditer(goal):
        governed = bool(_MEAL_VERB_BEFORE.search(goal[: match.start()])) or bool(
            _MEAL_STATE_AFTER.match(goal[match.end():])
        )
        numbers = [int(n) for n in re.findall(r"\d+", match.group(1))]
        for low, high in _RANGE.findall(match.group(1)):  # "dishes 2-4", "dish 1 to 3"
            numbers += range(int(low), int(high) + 1) if int(high) - int(low) < 20 else []
        seen = dict.fromkeys(numbers)
        out += [(f"dish_{n}", governed) for n in seen]
    return out


def check_subtask(goal: str, spec: SyncTaskSpec, world: SyncWorld) -> SubtaskVerdict:
    """Check a delegated goal against the world (see the module docstring for the forms)."""
    dish_of = {i.name: d.dish_id for d in spec.dishes for i in d.ingredients}
    task_dishes = [d.dish_id for d in spec.dishes]
    named_ingredients = _named_foods(goal, spec) & dish_of.keys()
    wants_eat = bool(_EAT.search(goal))
    refs = _named_dishes(goal)
    if not refs and not named_ingredients:
        return SubtaskVerdict(
            covered=False, kind=None, targets=[], success=None, detail="names no dish and no ingredient of this task"
        )
    unknown = sorted({d for d, _ in refs if d not in task_dishes})
    governed = {d for d, g in refs if g}
    target_dishes = [
        d for d in task_dishes
        if d in {r for r, _ in refs}
        and (d in governed or wants_eat or not any(dish_of[n] == d for n in named_ingredients))
    ]
    target_ingredients = [n for n in dish_of if n in named_ingredients and dish_of[n] not in target_dishes]
    if unknown:
        detail = f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a dish of this task " \
                 f"(dishes: {', '.join(task_dishes)})"
        targets = unknown + target_dishes + target_ingredients
        return SubtaskVerdict(covered=True, kind="dish", targets=targets, success=False, detail=detail)
    notes: list[str] = []
    ok = True
    for dish_id in target_dishes:
        dish_ok, note = _dish_verdict(world, spec, dish_id, wants_eat)
        ok &= dish_ok
        notes.append(note)
    for name in target_ingredients:
        item = world.item(name)
        if item.is_ready:
            notes.append(f"{name}: ready")
        else:
            ok = False
            state = "burned" if item.destroyed else "wrongly prepared" if item.wrong else "not ready"
            notes.append(
                f"{name}: {state} ({item.where}, {item.cook}, {item.cut}; "
                f"needs {item.expected_cook}, {item.expected_cut})"
            )
    kind: Literal["dish", "ingredients"] = "dish" if target_dishes else "ingredients"
    return SubtaskVerdict(
        covered=True, kind=kind, targets=target_dishes + target_ingredients, success=ok, detail="; ".join(notes)
    )


def _dish_verdict(world: SyncWorld, spec: SyncTaskSpec, dish_id: str, wants_eat: bool) -> tuple[bool, str]:
    names = [i.name for d in spec.dishes if d.dish_id == dish_id for i in d.ingredients]
    spoiled = [n for n in names if world.item(n).wrong or world.item(n).destroyed]
    prepared, eaten = world.is_prepared(dish_id), world.is_eaten(dish_id)
    if spoiled:
        return False, f"{dish_id}: spoiled ingredient(s) {', '.join(spoiled)}"
    if not prepared:
        ready = sum(1 for n in names if world.item(n).is_ready)
        return False, f"{dish_id}: not prepared ({ready}/{len(names)} ingredients ready)"
    if wants_eat and not eaten:
        return False, f"{dish_id}: prepared but not eaten"
    return True, f"{dish_id}: prepared{' and eaten' if eaten else ''}"
