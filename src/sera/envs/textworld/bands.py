"""Generation settings of TextWorld-Sync (paper §3.2.6): difficulty and runtime bands, family
settings, and the split layout (which task slots a split has, their seeds and ids).

| | dishes | ingr/dish | locations | distractors | doors | limit inv | inv cap | min/max prepared | complexity | budget | cooldown |
|---|---|---|---|---|---|---|---|---|---|---|---|
| easy | 2 | 3 | 5-6 | 3-5 | no | no | 2 | 1 / 1-2 | low, medium | 115-125 | 0 |
| medium | 2-4 | 3-4 | 7-10 | 6-12 | yes | yes | 1-2 | 2-3 / 3 | medium, high | 95-100 | 0 or 1 |
| hard | 4-5 | 4 | 10-11 | 12-18 | yes | yes | 1 | 3 / 3 | high | 75-90 | 1 |
| extreme | 5 | 4 | 10-11 | 16-20 | yes | yes | 1 | 3 / 3 | high | 65-80 | 1 |

A `Profile` is one draw from a difficulty band; `sample_profile` fixes the order of the draws
(changing it changes every generated task).

Splits and seeds (families and difficulties in `FAMILIES` / `DIFFICULTIES` order, `d`/`f` their
indices):
- test 1,400: every family x difficulty x 50; seed `820000 + 1000d + 100f + offset`.
- train 1,500: medium 900, hard 150, extreme 450, each spread evenly over the families (the
  remainder to the first families); seed `850000 + 100000d + 200f + offset`.
- dev 200: 50 per difficulty, families round-robin (offset k -> family k mod 7); seed
  `860000 + 1000d + offset`.
Ids are `cookingworld_multidish_{split}_{family}_{difficulty}_{offset:04d}`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from sera.envs.textworld.spec import DIFFICULTIES, FAMILIES

Complexity = Literal["low", "medium", "high"]


@dataclass(frozen=True)
class IntRange:
    """An inclusive integer range, drawn uniformly."""

    lo: int
    """Smallest value."""
    hi: int
    """Largest value."""

    def sample(self, rng: random.Random) -> int:
        """One uniform draw (always consumes one draw, even when lo == hi)."""
        return rng.randint(self.lo, self.hi)

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.lo <= value <= self.hi


@dataclass(frozen=True)
class DifficultyBand:
    """What a task of one difficulty may look like."""

    dish_count: IntRange
    """Dishes per task."""
    ingredients_per_dish: IntRange
    """Ingredients per dish (the same for every dish of a task)."""
    num_locations: IntRange
    """Rooms (a prefix of `ROOMS`)."""
    num_distractors: IntRange
    """Foods lying around that no dish needs (fewer when the database runs out)."""
    include_doors: tuple[bool, ...]
    """Choices: whether the kitchen door exists (closed, locking the supermarket)."""
    limit_inventory: tuple[bool, ...]
    """Choices: whether each agent's inventory is limited."""
    inventory_capacity: IntRange
    """Unready ingredients an agent may hold when limited (also the resource-constrained
    family's shared capacity)."""
    min_prepared: IntRange
    """At least this many ingredients per dish need a cut or a cook."""
    max_prepared: IntRange
    """At most this many ingredients per dish need a cut or a cook."""
    complexity: tuple[Complexity, ...]
    """Choices: how preparations are picked (low = least work, high = most, medium = random)."""


@dataclass(frozen=True)
class RuntimeBand:
    """Runtime settings of one difficulty."""

    shared_budget: IntRange
    """World actions the whole agent tree may take; drawn only over values >= the task's
    `min_actions` (a draw with min_actions above the band is invalid)."""
    tool_cooldown: tuple[int, ...]
    """Choices: steps a tool stays unusable after each use."""


@dataclass(frozen=True)
class Profile:
    """One draw from a difficulty band."""

    dish_count: int
    """Dishes."""
    ingredients_per_dish: int
    """Ingredients per dish."""
    num_locations: int
    """Rooms."""
    num_distractors: int
    """Requested distractors."""
    include_doors: bool
    """Whether the door exists (forced on by the dependency-gate family)."""
    limit_inventory: bool
    """Whether agents' inventories are limited."""
    inventory_capacity: int
    """The capacity drawn (used when limited, and by the resource-constrained family)."""
    min_prepared: int
    """Minimum prepared ingredients per dish."""
    max_prepared: int
    """Maximum prepared ingredients per dish."""
    complexity: Complexity
    """Preparation complexity of the dishes (families may override per dish)."""


DIFFICULTY_BANDS: dict[str, DifficultyBand] = {
    "easy": DifficultyBand(
        IntRange(2, 2), IntRange(3, 3), IntRange(5, 6), IntRange(3, 5), (False,), (False,),
        IntRange(2, 2), IntRange(1, 1), IntRange(1, 2), ("low", "medium"),
    ),
    "medium": DifficultyBand(
        IntRange(2, 4), IntRange(3, 4), IntRange(7, 10), IntRange(6, 12), (True,), (True,),
        IntRange(1, 2), IntRange(2, 3), IntRange(3, 3), ("medium", "high"),
    ),
    "hard": DifficultyBand(
        IntRange(4, 5), IntRange(4, 4), IntRange(10, 11), IntRange(12, 18), (True,), (True,),
        IntRange(1, 1), IntRange(3, 3), IntRange(3, 3), ("high",),
    ),
    "extreme": DifficultyBand(
        IntRange(5, 5), IntRange(4, 4), IntRange(10, 11), IntRange(16, 20), (True,), (True,),
        IntRange(1, 1), IntRange(3, 3), IntRange(3, 3), ("high",),
    ),
}
"""Difficulty -> band (paper §3.2.6)."""

RUNTIME_BANDS: dict[str, RuntimeBand] = {
    "easy": RuntimeBand(IntRange(115, 125), (0,)),
    "medium": RuntimeBand(IntRange(95, 100), (0, 1)),
    "hard": RuntimeBand(IntRange(75, 90), (1,)),
    "extreme": RuntimeBand(IntRange(65, 80), (1,)),
}
"""Difficulty -> runtime band."""


def sample_profile(band: DifficultyBand, rng: random.Random) -> Profile:
    """Draw a profile, in the band's field order (every range and choice consumes one draw)."""
    return Profile(
        dish_count=band.dish_count.sample(rng),
        ingredients_per_dish=band.ingredients_per_dish.sample(rng),
        num_locations=band.num_locations.sample(rng),
        num_distractors=band.num_distractors.sample(rng),
        include_doors=rng.choice(band.include_doors),
        limit_inventory=rng.choice(band.limit_inventory),
        inventory_capacity=band.inventory_capacity.sample(rng),
        min_prepared=band.min_prepared.sample(rng),
        max_prepared=band.max_prepared.sample(rng),
        complexity=rng.choice(band.complexity),
    )


@dataclass(frozen=True)
class FamilySettings:
    """What one task family changes relative to plain fork-join."""

    pattern: str
    """`parallelism.pattern`."""
    complexity_pattern: Literal["profile", "critical_path", "load_balanced"] = "profile"
    """Per-dish complexity: the profile's for every dish; critical_path = low.., medium, high;
    load_balanced = low.., high."""
    forces_doors: bool = False
    """The door exists whatever the band says (dependency_gate)."""
    gates_later_dishes: bool = False
    """The door also locks dishes 2..n (dependency_gate)."""
    shared_inventory: bool = False
    """All agents share an inventory of `profile.inventory_capacity` (resource_constrained)."""
    exclusive_tools: tuple[str, ...] = ()
    """Tools one agent at a time must hold (conflict: knife and stove)."""
    hierarchical: bool = False
    """Decomposition edges root -> dish -> dish::ingredient are recorded (hierarchical)."""

    def dish_complexities(self, dish_count: int, profile_complexity: Complexity) -> list[Complexity]:
        """Complexity of each dish, in dish order."""
        if self.complexity_pattern == "critical_path":
            tail: list[Complexity] = ["medium", "high"]
        elif self.complexity_pattern == "load_balanced":
            tail = ["high"]
        else:
            return [profile_complexity] * dish_count
        tail = tail[-dish_count:]
        return ["low"] * (dish_count - len(tail)) + tail


FAMILY_SETTINGS: dict[str, FamilySettings] = {
    "fork_join": FamilySettings(pattern="fork_join"),
    "critical_path": FamilySettings(pattern="critical_path", complexity_pattern="critical_path"),
    "load_balanced": FamilySettings(pattern="load_balanced", complexity_pattern="load_balanced"),
    "resource_constrained": FamilySettings(pattern="resource_constrained", shared_inventory=True),
    "dependency_gate": FamilySettings(pattern="dependency_gate", forces_doors=True, gates_later_dishes=True),
    "conflict": FamilySettings(pattern="conflict", exclusive_tools=("knife", "stove")),
    "hierarchical": FamilySettings(pattern="hierarchical", hierarchical=True),
}
"""Family -> settings, in `FAMILIES` order."""


# --- split layout: which tasks a split has, their seeds and ids ------------------------------

SPLITS: tuple[str, ...] = ("train", "dev", "test")
TRAIN_COUNTS: dict[str, int] = {"medium": 900, "hard": 150, "extreme": 450}
"""Train tasks per difficulty."""
PER_CELL = {"test": 50, "dev": 50}
"""Tasks per family x difficulty (test) and per difficulty (dev)."""
_SEED_RULES = {  # split -> (base, difficulty stride, family stride, offsets allowed)
    "test": (820000, 1000, 100, 100),
    "train": (850000, 100000, 200, 200),
    "dev": (860000, 1000, 0, 1000),
}


@dataclass(frozen=True)
class TaskSlot:
    """Where one task sits in a split."""

    split: str
    """train, dev or test."""
    family: str
    """Task family."""
    difficulty: str
    """Difficulty band."""
    offset: int
    """Index within its (family, difficulty) cell (dev: within its difficulty)."""

    @property
    def seed(self) -> int:
        """The task seed."""
        return task_seed(self.split, self.family, self.difficulty, self.offset)

    @property
    def task_id(self) -> str:
        """`cookingworld_multidish_{split}_{family}_{difficulty}_{offset:04d}`."""
        return f"cookingworld_multidish_{self.split}_{self.family}_{self.difficulty}_{self.offset:04d}"


def task_seed(split: str, family: str, difficulty: str, offset: int) -> int:
    """The seed of a task (see the module docstring)."""
    if split not in _SEED_RULES:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; expected one of {', '.join(DIFFICULTIES)}")
    base, d_stride, f_stride, limit = _SEED_RULES[split]
    if not 0 <= offset < limit:
        raise ValueError(f"offset {offset} out of range for split {split} (0..{limit - 1})")
    return base + DIFFICULTIES.index(difficulty) * d_stride + FAMILIES.index(family) * f_stride + offset


def split_slots(split: str) -> list[TaskSlot]:
    """Every task slot of a split, in file order."""
    if split == "test":
        return [
            TaskSlot(split, f, d, k) for d in DIFFICULTIES for f in FAMILIES for k in range(PER_CELL["test"])
        ]
    if split == "dev":
        return [TaskSlot(split, FAMILIES[k % len(FAMILIES)], d, k) for d in DIFFICULTIES for k in range(PER_CELL["dev"])]
    if split == "train":
        slots = []
        for d in DIFFICULTIES:
            base, extra = divmod(TRAIN_COUNTS.get(d, 0), len(FAMILIES))
            for i, f in enumerate(FAMILIES):
                slots += [TaskSlot(split, f, d, k) for k in range(base + (i < extra))]
        return slots
    raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
