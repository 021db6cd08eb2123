"""TextWorld-Sync task records: everything the world needs to build one kitchen.

A task file row is a `SyncTaskSpec` (JSON). The generator writes these, the world is built
from one, and `to_task` turns one into the runtime's `Task` (goal = the description the root
agent reads; `misc["sync"]` = the spec itself). Vocabulary follows CookingWorld's food database
(`cooking_world.json` in `textworld-express`).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, model_validator

from sera.types import Record, Task

RulesName = Literal["sync", "reference"]
"""The rules profiles of TextWorld-Sync (`sera.envs.textworld.rules`)."""

ENV_NAME = "textworld-sync"

Cooking = Literal["raw", "fried", "roasted", "grilled", "baked", "boiled"]
Cutting = Literal["uncut", "chopped", "sliced", "diced", "minced"]
Family = Literal[
    "fork_join",
    "critical_path",
    "load_balanced",
    "resource_constrained",
    "dependency_gate",
    "conflict",
    "hierarchical",
]
Difficulty = Literal["easy", "medium", "hard", "extreme"]

FAMILIES: tuple[str, ...] = get_args(Family)
"""The seven task families, in the paper's order (seeds and ids depend on this order)."""
DIFFICULTIES: tuple[str, ...] = get_args(Difficulty)
"""Difficulty bands, in the paper's order."""

ROOMS: tuple[str, ...] = (
    "kitchen",
    "pantry",
    "garden",
    "supermarket",
    "hallway",
    "dining room",
    "garage",
    "study",
    "basement",
    "attic",
    "courtyard",
)
"""Room names; a task uses the first `len(spec.rooms)` of them (at least 4)."""

TOOL_FOR_COOKING: dict[str, str] = {
    "fried": "stove",
    "boiled": "stove",
    "roasted": "oven",
    "baked": "oven",
    "grilled": "grill",
}
"""Which heat tool applies each cooking (cutting always uses the knife)."""

_FROZEN = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class IngredientSpec(Record):
    """One ingredient of one dish, and how it must end up."""

    model_config = _FROZEN

    name: str
    """Food name from the CookingWorld database, unique within the task (e.g. `red apple`)."""
    dish_id: str
    """The dish this ingredient belongs to (`dish_1`, ...)."""
    cook: Cooking
    """Required cooking; `raw` means it must not be cooked."""
    cut: Cutting
    """Required cutting; `uncut` means it must not be cut."""
    source: str
    """Where it starts: `room` or `room.container` (e.g. `kitchen.fridge`, `garden`)."""
    candidate_sources: list[str] = Field(default_factory=list)
    """The database's candidate sources for this food (`source` is one of them)."""
    branch_work: int = 1
    """Work units: 1 (fetch) + 1 if it must be cut + 1 if it must be cooked."""

    @property
    def room(self) -> str:
        """The room it starts in."""
        return self.source.split(".", 1)[0]

    @property
    def requires_preparation(self) -> bool:
        """True when it must be cut or cooked before it is ready."""
        return self.cook != "raw" or self.cut != "uncut"


class DishSpec(Record):
    """One dish: a set of ingredients, prepared together then eaten."""

    model_config = _FROZEN

    dish_id: str
    """`dish_1`, `dish_2`, ..."""
    ingredients: list[IngredientSpec]
    """Its ingredients (names unique across the task)."""
    complexity: Literal["low", "medium", "high"] = "medium"
    """How preparation options were chosen (low = least work, high = most)."""

    @property
    def work(self) -> int:
        """Sum of its ingredients' work units."""
        return sum(i.branch_work for i in self.ingredients)


class DistractorSpec(Record):
    """A food placed in the world that no dish needs."""

    model_config = _FROZEN

    name: str
    """Food name (distinct from every ingredient)."""
    source: str
    """Where it lies: `room` or `room.container`."""


class DoorSpec(Record):
    """A closed door: some rooms and some dishes' ingredients are out of reach until it opens."""

    model_config = _FROZEN

    room: str
    """The room where the door is; `open door` works only there."""
    locks_rooms: list[str] = Field(default_factory=list)
    """Rooms that cannot be entered while the door is closed."""
    locks_dishes: list[str] = Field(default_factory=list)
    """Dishes whose ingredients cannot be seen or taken while the door is closed
    (the dependency-gate family: dishes 2..n)."""


class ToolSpec(Record):
    """A kitchen tool and how agents share it."""

    model_config = _FROZEN

    name: Literal["knife", "stove", "oven", "grill"]
    """Tool name."""
    exclusive: bool = False
    """True in the conflict family: one agent at a time must hold it (`take knife` /
    `claim stove`) and release it (`put knife` / `release stove`) before another can use it."""
    cooldown_steps: int = 0
    """After each use the tool is unusable by anyone for this many shared steps."""


class SyncTaskSpec(Record):
    """One TextWorld-Sync task: the kitchen, the dishes, the mechanisms, and the budget."""

    model_config = _FROZEN

    task_id: str
    """`cookingworld_multidish_{split}_{family}_{difficulty}_{offset:04d}`."""
    split: str
    """`train`, `dev` or `test` (or a user's own)."""
    fold: Literal["train", "valid", "test"]
    """Food-database fold the recipes come from."""
    family: Family
    """Task family."""
    difficulty: Difficulty
    """Difficulty band."""
    seed: int
    """Generator seed of this task."""
    rooms: list[str]
    """Rooms of this kitchen world (a prefix of `ROOMS`, at least 4)."""
    dishes: list[DishSpec]
    """The dishes to prepare and eat."""
    distractors: list[DistractorSpec] = Field(default_factory=list)
    """Foods lying around that no dish needs."""
    door: DoorSpec | None = None
    """The closed door, if the task has one."""
    tools: list[ToolSpec]
    """knife, stove, oven, grill."""
    agent_inventory_capacity: int | None = None
    """Ingredients one agent may hold at once (None = unlimited)."""
    shared_inventory_capacity: int | None = None
    """Ingredients all agents together may hold at once (resource-constrained family)."""
    shared_budget: int
    """World actions all agents of the tree may take together (65-125 by difficulty)."""
    description_view: Literal["structured", "coarse"]
    """Which description the root agent reads (coarse: preparations only in the cookbook)."""
    descriptions: dict[str, str]
    """`structured` and `coarse` task descriptions."""
    family_sentence: str = ""
    """The family's extra sentence (already part of both descriptions)."""
    hierarchy: dict[str, list[str]] = Field(default_factory=dict)
    """Decomposition edges (hierarchical family): `root` -> dishes, dish -> `dish::ingredient`."""
    parallelism: dict[str, Any] = Field(default_factory=dict)
    """Metadata: branch work, critical path estimate, estimated sequential actions, speedup."""
    rules: RulesName = "sync"
    """The rules profile the task is played under (`rules.py`): `sync` (ours; our generated
    splits) or `reference` (the authors' game; their V9 files)."""

    @model_validator(mode="after")
    def _consistent(self) -> SyncTaskSpec:
        if len(self.rooms) < 4 or list(self.rooms) != list(ROOMS[: len(self.rooms)]):
            raise ValueError(f"rooms must be a prefix of {ROOMS} with at least 4 rooms, got {self.rooms}")
        if not self.dishes:
            raise ValueError("a task needs at least one dish")
        names = [i.name for d in self.dishes for i in d.ingredients]
        if len(set(names)) != len(names):
            raise ValueError(f"ingredient names must be unique across dishes, got {names}")
        dish_ids = [d.dish_id for d in self.dishes]
        if len(set(dish_ids)) != len(dish_ids):
            raise ValueError(f"dish ids must be unique, got {dish_ids}")
        for dish in self.dishes:
            for ing in dish.ingredients:
                if ing.dish_id != dish.dish_id:
                    raise ValueError(f"ingredient {ing.name!r} lists dish {ing.dish_id!r} inside {dish.dish_id!r}")
        places = [i.source for d in self.dishes for i in d.ingredients] + [x.source for x in self.distractors]
        for place in places:
            if place.split(".", 1)[0] not in self.rooms:
                raise ValueError(f"source {place!r} is not in a room of this task ({self.rooms})")
        if set(names) & {x.name for x in self.distractors}:
            raise ValueError("a distractor has the name of an ingredient")
        if sorted(t.name for t in self.tools) != ["grill", "knife", "oven", "stove"]:
            raise ValueError(f"tools must be knife, stove, oven and grill once each, got {[t.name for t in self.tools]}")
        if self.door is not None:
            if self.door.room not in self.rooms:
                raise ValueError(f"door room {self.door.room!r} is not a room of this task")
            bad = [r for r in self.door.locks_rooms if r not in self.rooms or r == self.door.room or r == "kitchen"]
            if bad:
                raise ValueError(f"door locks rooms that are missing, the door's own room or the kitchen: {bad}")
            unknown = [d for d in self.door.locks_dishes if d not in dish_ids]
            if unknown:
                raise ValueError(f"door locks unknown dishes {unknown}")
        for cap_name in ("agent_inventory_capacity", "shared_inventory_capacity"):
            cap = getattr(self, cap_name)
            if cap is not None and cap < 1:
                raise ValueError(f"{cap_name} must be >= 1 or null, got {cap}")
        if self.shared_budget < 1:
            raise ValueError(f"shared_budget must be >= 1, got {self.shared_budget}")
        if self.description_view not in self.descriptions:
            raise ValueError(f"descriptions lack the {self.description_view!r} view")
        return self

    @property
    def description(self) -> str:
        """The description the root agent reads."""
        return self.descriptions[self.description_view]

    def ingredient(self, name: str) -> IngredientSpec:
        """The ingredient called `name`; KeyError names the task."""
        for dish in self.dishes:
            for ing in dish.ingredients:
                if ing.name == name:
                    return ing
        raise KeyError(f"task {self.task_id} has no ingredient {name!r}")

    def tool(self, name: str) -> ToolSpec:
        """The tool called `name`."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(f"task {self.task_id} has no tool {name!r}")

    def to_task(self) -> Task:
        """The runtime's task record: the root agent's goal is the description."""
        return Task(
            id=self.task_id,
            goal=self.description,
            env=ENV_NAME,
            difficulty=self.difficulty,
            max_steps=self.shared_budget,
            misc={"family": self.family, "rules": self.rules, "sync": self.model_dump(mode="json")},
        )

    @classmethod
    def from_task(cls, task: Task) -> SyncTaskSpec:
        """Read the spec back from a runtime task."""
        if "sync" not in task.misc:
            raise ValueError(f"task {task.id} has no TextWorld-Sync spec (misc['sync'])")
        return cls.model_validate(task.misc["sync"])
