"""Generate TextWorld-Sync tasks (paper §3.2.6).

Splits, seeds and ids: `bands.split_slots` (test 1,400, train 1,500, dev 200). Recipes come from
the food database fold train / valid / test (dev reads valid).

One task, from `rng = Random(sampling_seed)` (first `sampling_seed = seed`; an invalid draw
retries with `seed + attempt * 1000003`, 128 attempts at most), in this draw order:
1. the difficulty profile (`bands.sample_profile`), then the tool cooldown;
2. per dish (family-specific complexity), a recipe from the fold's foods not used by earlier
   dishes: `min_prepared` foods that have a non-trivial preparation, served with one; the rest
   ("fill") from the remaining foods. When `max_prepared < ingredients`, fill foods are served
   raw and uncut and are drawn from foods allowing that, raw-only foods first; otherwise any food,
   any preparation. The list is shuffled, then preparations are picked: low = least work,
   high = most (ties by name order), medium = uniform;
3. then, still per dish, each ingredient's source: uniform among the food's candidate sources
   (all in kitchen, pantry, garden or supermarket);
4. distractors (`num_distractors` of the profile): foods of the fold not in a recipe, then other
   foods of the database when the fold runs out (fewer when the whole database runs out: at
   most 18 with 20 ingredients). Distractor i < number of extra rooms (rooms 5+) lies in extra
   room i, so no extra room is empty; the others lie at a uniform choice among their candidate
   sources and the extra rooms;
5. the shared budget: uniform in `[max(lo, min_actions), hi]` of the runtime band; a task whose
   `min_actions` (`plan.py`) exceeds `hi` is an invalid draw. The band is shifted up by the reference plan's
   exclusive-tool actions (`take/put knife`, `claim/release stove`: conflict family only, 0
   elsewhere). The paper's conflict tools were metadata only; ours cost real actions, and
   without the shift extreme conflict tasks (median min_actions 89 > 80) are almost never
   valid. `parallelism.budget_band` records the band used.

The reference plan the scripted oracle follows is `reference_plan.plan_dish`; `plan.min_actions`
counts its shared actions once divided among agents.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sera.envs.textworld.bands import (
    DIFFICULTY_BANDS,
    FAMILY_SETTINGS,
    RUNTIME_BANDS,
    SPLITS,
    Profile,
    TaskSlot,
    sample_profile,
    split_slots,
    task_seed,
)
from sera.envs.textworld.descriptions import VIEW_BY_DIFFICULTY, describe, family_sentence
from sera.envs.textworld.foods import FoodDatabase, Preparation, RecipeFood, fold_of, load_food_database
from sera.envs.textworld.plan import PlanError, plan_task
from sera.envs.textworld.reference_plan import TOOL_HANDLING_ACTIONS
from sera.envs.textworld.spec import (
    ROOMS,
    DishSpec,
    DistractorSpec,
    DoorSpec,
    IngredientSpec,
    SyncTaskSpec,
    ToolSpec,
)

__all__ = [
    "SPLITS", "GenerationError", "Generated", "TaskSlot", "generate_slot", "generate_split", "generate_task",
    "parallelism", "split_slots", "task_seed",
]

MAX_ATTEMPTS = 128
ATTEMPT_STRIDE = 1000003
BASE_ROOMS = 4
"""Rooms every task has (kitchen, pantry, garden, supermarket): all ingredient sources lie there."""


class GenerationError(RuntimeError):
    """No valid draw for a task within `MAX_ATTEMPTS`."""


class _InvalidDraw(Exception):
    """This draw cannot make a valid task; the generator retries with the next sampling seed."""


@dataclass(frozen=True)
class Generated:
    """A generated task and how many draws it took."""

    spec: SyncTaskSpec
    """The task."""
    attempts: int
    """Draws made (1 = the first draw was valid)."""


def generate_task(split: str, family: str, difficulty: str, offset: int) -> SyncTaskSpec:
    """One task; `GenerationError` names the task when no draw is valid."""
    return generate_slot(TaskSlot(split, family, difficulty, offset)).spec


def generate_split(split: str) -> list[SyncTaskSpec]:
    """Every task of a split, in file order (deterministic)."""
    db = load_food_database()
    return [generate_slot(slot, db).spec for slot in split_slots(split)]


def generate_slot(slot: TaskSlot, db: FoodDatabase | None = None) -> Generated:
    """Generate one slot, retrying invalid draws."""
    db = db or load_food_database()
    seed = slot.seed  # validates the slot
    reasons: list[str] = []
    for attempt in range(MAX_ATTEMPTS):
        try:
            return Generated(_draw(slot, db, random.Random(seed + attempt * ATTEMPT_STRIDE)), attempt + 1)
        except _InvalidDraw as why:
            reasons.append(str(why))
    common = max(set(reasons), key=reasons.count)
    raise GenerationError(
        f"task {slot.task_id} (seed {seed}): no valid draw in {MAX_ATTEMPTS} attempts; "
        f"most frequent reason ({reasons.count(common)}x): {common}"
    )


def _draw(slot: TaskSlot, db: FoodDatabase, rng: random.Random) -> SyncTaskSpec:
    family = FAMILY_SETTINGS[slot.family]
    profile = sample_profile(DIFFICULTY_BANDS[slot.difficulty], rng)
    runtime = RUNTIME_BANDS[slot.difficulty]
    cooldown = rng.choice(runtime.tool_cooldown)
    if profile.max_prepared < profile.min_prepared:
        raise _InvalidDraw(f"max_prepared {profile.max_prepared} < min_prepared {profile.min_prepared}")
    rooms = list(ROOMS[: max(BASE_ROOMS, min(len(ROOMS), profile.num_locations))])
    available = list(db.foods(slot.split))
    dishes: list[DishSpec] = []
    for k, complexity in enumerate(family.dish_complexities(profile.dish_count, profile.complexity), start=1):
        recipe = _sample_recipe(rng, available, profile, complexity)
        taken = {food.name for food, _ in recipe}
        available = [f for f in available if f.name not in taken]
        ingredients = [
            IngredientSpec(
                name=food.name, dish_id=f"dish_{k}", cook=prep.cook, cut=prep.cut, source=rng.choice(food.locations),
                candidate_sources=list(food.locations), branch_work=prep.work,
            )
            for food, prep in recipe
        ]
        dishes.append(DishSpec(dish_id=f"dish_{k}", ingredients=ingredients, complexity=complexity))
    distractors = _distractors(rng, db, slot.split, dishes, rooms, profile.num_distractors)
    dish_ids = [d.dish_id for d in dishes]
    door = None
    if profile.include_doors or family.forces_doors:
        door = DoorSpec(
            room="kitchen", locks_rooms=["supermarket"], locks_dishes=dish_ids[1:] if family.gates_later_dishes else []
        )
    shared_cap = profile.inventory_capacity if family.shared_inventory else None
    sentence = family_sentence(slot.family, dish_ids, shared_cap)
    hierarchy: dict[str, list[str]] = {}
    if family.hierarchical:
        hierarchy["root"] = dish_ids
        hierarchy.update({d.dish_id: [f"{d.dish_id}::{i.name}" for i in d.ingredients] for d in dishes})
    spec = SyncTaskSpec(
        task_id=slot.task_id, split=slot.split, fold=fold_of(slot.split), family=slot.family,
        difficulty=slot.difficulty, seed=slot.seed, rooms=rooms, dishes=dishes, distractors=distractors, door=door,
        tools=[
            ToolSpec(name=t, exclusive=t in family.exclusive_tools, cooldown_steps=cooldown)
            for t in ("knife", "stove", "oven", "grill")
        ],
        agent_inventory_capacity=profile.inventory_capacity if profile.limit_inventory else None,
        shared_inventory_capacity=shared_cap, shared_budget=runtime.shared_budget.hi,
        description_view=VIEW_BY_DIFFICULTY[slot.difficulty], descriptions=describe(dishes, sentence),
        family_sentence=sentence, hierarchy=hierarchy,
    )
    try:
        plan = plan_task(spec)
    except PlanError as exc:
        raise _InvalidDraw(str(exc)) from None
    needed = plan.action_count
    allowance = sum(a in TOOL_HANDLING_ACTIONS for d in plan.dishes for p in d.parts for a in p)
    lo, hi = runtime.shared_budget.lo + allowance, runtime.shared_budget.hi + allowance
    if needed > hi:
        raise _InvalidDraw(f"min_actions {needed} exceeds the {slot.difficulty} budget band {lo}-{hi}")
    budget = rng.randint(max(lo, needed), hi)
    meta = parallelism(spec, budget, needed) | {"budget_band": [lo, hi], "budget_tool_allowance": allowance}
    return spec.model_copy(update={"shared_budget": budget, "parallelism": meta})


def _choose(options: list[Preparation], rng: random.Random, complexity: str) -> Preparation:
    if complexity == "medium":
        return rng.choice(options)
    ranked = sorted(options, key=lambda p: (p.work, p.cook, p.cut))
    return ranked[0] if complexity == "low" else ranked[-1]


def _sample_recipe(
    rng: random.Random, available: list[RecipeFood], profile: Profile, complexity: str
) -> list[tuple[RecipeFood, Preparation]]:
    count, min_prep = profile.ingredients_per_dish, profile.min_prepared
    if len(available) < count:
        raise _InvalidDraw(f"only {len(available)} unused foods left for a {count}-ingredient dish")
    preparable = [f for f in available if f.can_be_prepared]
    if len(preparable) < min_prep:
        raise _InvalidDraw(f"only {len(preparable)} unused foods with a non-trivial preparation, need {min_prep}")
    required = rng.sample(preparable, min_prep)
    required_names = {f.name for f in required}
    rest = [f for f in available if f.name not in required_names]
    fill_count = count - min_prep
    bounded = profile.max_prepared < count
    if bounded:  # fill foods are served raw: raw-only foods first, then foods that allow raw
        raw_only = [f for f in rest if f.raw_only]
        fill = rng.sample(raw_only, min(len(raw_only), fill_count))
        raw_capable = [f for f in rest if f.can_be_raw and not f.raw_only]
        if len(fill) + len(raw_capable) < fill_count:
            raise _InvalidDraw(f"not enough unused foods that can be served raw ({len(fill) + len(raw_capable)})")
        fill += rng.sample(raw_capable, fill_count - len(fill))
    else:
        fill = rng.sample(rest, fill_count)
    chosen = required + fill
    rng.shuffle(chosen)
    recipe = []
    for food in chosen:
        if food.name in required_names:
            options = [p for p in food.preparations if not p.trivial]
        elif bounded:
            options = [p for p in food.preparations if p.trivial]
        else:
            options = list(food.preparations)
        recipe.append((food, _choose(options, rng, complexity)))
    return recipe


def _distractors(
    rng: random.Random, db: FoodDatabase, split: str, dishes: list[DishSpec], rooms: list[str], count: int
) -> list[DistractorSpec]:
    used = {i.name for d in dishes for i in d.ingredients}
    own, other = ([n for n in pool if n not in used] for pool in db.distractor_pools(split))
    names = rng.sample(own, min(count, len(own)))
    names += rng.sample(other, min(count - len(names), len(other)))
    extra_rooms = rooms[BASE_ROOMS:]
    out = []
    for k, name in enumerate(names):
        source = extra_rooms[k] if k < len(extra_rooms) else rng.choice([*db.locations[name], *extra_rooms])
        out.append(DistractorSpec(name=name, source=source))
    return out


def parallelism(spec: SyncTaskSpec, budget: int, sequential: int) -> dict[str, object]:
    """The `parallelism` metadata of a task (descriptive only; the world does not read it).

    Keys as in the reference rows; `critical_path_estimate` = max dish work + 2 per dish,
    `ideal_parallel_speedup` = total work / that estimate (the reference's definitions), and
    `estimated_sequential_actions` = `min_actions` (the reference used work + 2 per dish + door).
    """
    family = FAMILY_SETTINGS[spec.family]
    work = [d.work for d in spec.dishes]
    critical = max(work) + 2 * len(work)
    bottlenecks = ["kitchen", "meal_preparation", "meal_eating"]
    bottlenecks += [*family.exclusive_tools] + (["shared_inventory"] if family.shared_inventory else [])
    bottlenecks += ["door"] if spec.door else []
    gate = spec.door.locks_dishes if spec.door else []
    capacity: dict[str, int] | None = None
    if family.exclusive_tools:
        capacity = dict.fromkeys(family.exclusive_tools, 1)
    elif spec.shared_inventory_capacity is not None:
        capacity = {"inventory": spec.shared_inventory_capacity}
    return {
        "pattern": family.pattern,
        "branches": len(spec.dishes),
        "ingredient_disjoint": True,
        "total_branch_work": sum(work),
        "critical_path_estimate": critical,
        "estimated_sequential_actions": sequential,
        "ideal_parallel_speedup": round(sum(work) / critical, 4),
        "shared_bottlenecks": bottlenecks,
        "resource_conflict": bool(family.exclusive_tools),
        "resource_capacity": capacity,
        "mechanisms": {
            "tool_cooldown_steps": spec.tool("knife").cooldown_steps,
            "door": spec.door is not None,
            "exclusive_tools": list(family.exclusive_tools),
            "agent_inventory_capacity": spec.agent_inventory_capacity,
            "shared_inventory_capacity": spec.shared_inventory_capacity,
        },
        "dependencies": [{"from": "gate_1", "to": dish_id, "type": "door"} for dish_id in gate],
        "hierarchy_depth": 2 if family.hierarchical else 1,
        "shared_environment_max_steps": budget,
    }
