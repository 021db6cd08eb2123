"""CookingWorld's food database (`cooking_world.json` of `textworld-express`), read for the generator.

What the JSON holds (textworld-express 1.1.0) and how we read it:

- `FOOD_PREPARATIONS_SPLITS[fold][food]`: the allowed `[cook, cut]` pairs of a food in a fold.
  Every fold lists the *same 22 foods*; only their allowed preparations differ (train has the
  most options, test the fewest). These 22 are **the recipe foods of every fold**: a recipe may
  only use a food whose preparation the fold defines.
- `FOODS_SPLITS[fold]`: a split of food *names* (train 22 = the foods above; valid 8 and test 8
  are other foods, e.g. `green apple`, `milk`, with no preparation entries at all). They cannot
  be recipe ingredients (no allowed preparation), so we use them only as **distractors**: a
  fold's distractors come first from its own unused recipe foods and `FOODS_SPLITS[fold]`
  names, then from the rest of the database (see `distractor_pools`).
- `FOODS_COMPACT[key]`: properties and candidate source `locations` (`kitchen.fridge`,
  `pantry.shelf`, `garden`, ...). Keys are base foods (`apple`, `cooking oil`); coloured or
  specific variants are listed in the entry's `names` (`red apple` -> `apple`, `olive oil` ->
  `cooking oil`). Every food name above resolves to exactly one entry (checked at load).

The database is "the whole food database" of the generator: recipe foods plus every
`FOODS_SPLITS` name, 38 foods in 1.1.0.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from sera.envs.textworld.spec import Cooking, Cutting

FOLDS: tuple[str, ...] = ("train", "valid", "test")
"""Folds of the food database."""
SPLIT_TO_FOLD: dict[str, str] = {"train": "train", "dev": "valid", "valid": "valid", "test": "test"}
"""Task split -> database fold (`dev` reads the `valid` fold)."""
PACKAGE = "textworld_express"
DATABASE_FILE = "cooking_world.json"


class FoodDatabaseError(RuntimeError):
    """The food database is missing or does not have the expected shape."""


@dataclass(frozen=True)
class Preparation:
    """One allowed way to serve a food."""

    cook: str
    """`raw`, `fried`, `roasted`, `grilled` (the simulator also knows `baked`, `boiled`)."""
    cut: str
    """`uncut`, `chopped`, `sliced`, `diced` (the simulator also knows `minced`)."""

    @property
    def work(self) -> int:
        """Work units: 1 (fetch) + 1 if cut + 1 if cooked."""
        return 1 + (self.cut != "uncut") + (self.cook != "raw")

    @property
    def trivial(self) -> bool:
        """True for raw and uncut: the food is ready as soon as it is taken."""
        return self.cook == "raw" and self.cut == "uncut"


@dataclass(frozen=True)
class RecipeFood:
    """A food that a recipe of one fold may use."""

    name: str
    """Food name, e.g. `red apple`."""
    preparations: tuple[Preparation, ...]
    """The fold's allowed preparations, in database order."""
    locations: tuple[str, ...]
    """Candidate sources (`room` or `room.container`)."""

    @functools.cached_property
    def raw_only(self) -> bool:
        """Its only allowed preparation is raw and uncut."""
        return all(p.trivial for p in self.preparations)

    @functools.cached_property
    def can_be_prepared(self) -> bool:
        """It has at least one non-trivial preparation."""
        return any(not p.trivial for p in self.preparations)

    @functools.cached_property
    def can_be_raw(self) -> bool:
        """It may be served raw and uncut."""
        return any(p.trivial for p in self.preparations)


@dataclass(frozen=True)
class FoodDatabase:
    """The parsed database: recipe foods per fold and every food's candidate sources."""

    path: Path
    """Where it was read from."""
    recipe_foods: dict[str, tuple[RecipeFood, ...]]
    """Fold -> its recipe foods (sorted by name)."""
    fold_names: dict[str, tuple[str, ...]]
    """Fold -> `FOODS_SPLITS[fold]` names (sorted)."""
    locations: dict[str, tuple[str, ...]]
    """Every food of the database -> its candidate sources."""

    @property
    def all_foods(self) -> tuple[str, ...]:
        """Every food name of the database, sorted."""
        return tuple(sorted(self.locations))

    def foods(self, fold: str) -> tuple[RecipeFood, ...]:
        """Recipe foods of a fold (`dev` reads `valid`)."""
        return self.recipe_foods[fold_of(fold)]

    def distractor_pools(self, fold: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(foods of the fold, the other foods of the database), each sorted.

        Foods of the fold = its recipe foods and its `FOODS_SPLITS` names.
        """
        fold = fold_of(fold)
        own = {f.name for f in self.recipe_foods[fold]} | set(self.fold_names[fold])
        return tuple(sorted(own)), tuple(sorted(set(self.locations) - own))


def fold_of(split_or_fold: str) -> str:
    """Database fold of a split or fold name; unknown names raise ValueError listing the known ones."""
    if split_or_fold not in SPLIT_TO_FOLD:
        raise ValueError(f"unknown fold {split_or_fold!r}; expected one of {', '.join(SPLIT_TO_FOLD)}")
    return SPLIT_TO_FOLD[split_or_fold]


def database_path() -> Path:
    """Path of `cooking_world.json` inside the installed `textworld_express` package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FoodDatabaseError(
            f"the TextWorld-Sync generator reads CookingWorld's food database from the {PACKAGE!r} "
            "package, which is not installed; install it with: pip install textworld-express==1.1.0"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / DATABASE_FILE
        if path.is_file():
            return path
    raise FoodDatabaseError(f"{PACKAGE!r} is installed but has no {DATABASE_FILE}; reinstall textworld-express==1.1.0")


@functools.cache
def load_food_database(path: Path | None = None) -> FoodDatabase:
    """Read and check the database (memoised per path)."""
    path = path or database_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise FoodDatabaseError(f"{path}: cannot read the food database: {err}") from None
    return _parse(path, raw)


def _parse(path: Path, raw: Any) -> FoodDatabase:
    def fail(field: str, problem: str) -> FoodDatabaseError:
        return FoodDatabaseError(f"{path}: field {field}: {problem}")

    for key in ("FOOD_PREPARATIONS_SPLITS", "FOODS_SPLITS", "FOODS_COMPACT"):
        if not isinstance(raw, dict) or not isinstance(raw.get(key), dict):
            raise fail(key, "missing or not an object")
    alias_to_key: dict[str, str] = {}
    for key, entry in raw["FOODS_COMPACT"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("locations"), list) or not entry["locations"]:
            raise fail(f"FOODS_COMPACT.{key}.locations", "expected a non-empty list of sources")
        for name in [key, *entry.get("names", [])]:
            alias_to_key[name] = key

    def sources(name: str, field: str) -> tuple[str, ...]:
        if name not in alias_to_key:
            raise fail(field, f"food {name!r} has no FOODS_COMPACT entry (neither a key nor in a 'names' list)")
        return tuple(raw["FOODS_COMPACT"][alias_to_key[name]]["locations"])

    cooks, cuts = set(get_args(Cooking)), set(get_args(Cutting))
    recipe_foods: dict[str, tuple[RecipeFood, ...]] = {}
    fold_names: dict[str, tuple[str, ...]] = {}
    locations: dict[str, tuple[str, ...]] = {}
    for fold in FOLDS:
        table = raw["FOOD_PREPARATIONS_SPLITS"].get(fold)
        if not isinstance(table, dict) or not table:
            raise fail(f"FOOD_PREPARATIONS_SPLITS.{fold}", "missing or empty")
        foods = []
        for name, options in sorted(table.items()):
            field = f"FOOD_PREPARATIONS_SPLITS.{fold}.{name}"
            if not isinstance(options, list) or not options:
                raise fail(field, "expected a non-empty list of [cook, cut] pairs")
            preps = []
            for pair in options:
                if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in cooks and pair[1] in cuts):
                    raise fail(field, f"expected [cook, cut] with cook in {sorted(cooks)}, cut in {sorted(cuts)}, got {pair!r}")
                preps.append(Preparation(cook=pair[0], cut=pair[1]))
            locations[name] = sources(name, field)
            foods.append(RecipeFood(name=name, preparations=tuple(preps), locations=locations[name]))
        recipe_foods[fold] = tuple(foods)
        names = raw["FOODS_SPLITS"].get(fold)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise fail(f"FOODS_SPLITS.{fold}", "expected a list of food names")
        for name in names:
            locations[name] = sources(name, f"FOODS_SPLITS.{fold}")
        fold_names[fold] = tuple(sorted(names))
    return FoodDatabase(path=path, recipe_foods=recipe_foods, fold_names=fold_names, locations=locations)
