"""Read the reference's TextWorld-Sync V9 files (sera-spec §10.2) into `SyncTaskSpec`s.

Two formats: the task JSONL (`textworld_{train,dev,test}.jsonl`, one raw generator row per line)
and the manifest JSON (`textworld_multidish_*_v9.json`, whose `tasks[i]` hold the same data with
`game_params` as a compact JSON string and the rest under `generation_properties`). A manifest
entry is first reshaped into a row, then both go through `v9_row_to_spec`.

Mapping decisions (row field -> spec field):
- `task_id`, `difficulty`, `seed`: copied. `task_family`: `multi_dish_fork_join` -> `fork_join`,
  the other six names are ours already.
- `split`: `train`, `dev`, `test` copied; a manifest's `validation` -> `dev`. `fold` (food
  database): `generation.source_db_fold`, else the split's fold (`dev` -> `valid`).
- `rooms`: the first `max(4, min(11, game_params.numLocations))` of `ROOMS` (the reference rule).
- Ingredients: `preparation` is `[cook, cut]` in either order (empty = raw, uncut, as the
  reference simulator reads it); `branch_work` and `requires_preparation` must agree with it.
  `source` = the first candidate source (the reference simulator places an item in the room of
  its first candidate); we keep the container (`kitchen.fridge`). A first candidate outside
  kitchen/pantry/garden/supermarket, or none, means the kitchen (again the reference rule).
- Dish `complexity`: the family's per-dish pattern (critical_path, load_balanced) applied to
  `generation.v7_sampled_parameters.preparation_complexity` (absent: `medium`, the reference's
  default). It is descriptive only.
- Door: `game_params.includeDoors` = 1 -> our door: in the kitchen, locking the supermarket, and
  locking the dishes that `parallelism.dependencies` gates (`{"from": "gate_1", "to": dish,
  "type": "door"}`). Under `reference` rules the world ignores the room lock and the door's room
  (the authors' gate hides only the gated dishes and opens from anywhere).
- Hierarchy: `dependencies` of type `decompose` (`root -> dish`, `dish -> dish::ingredient`).
- Tools: cooldown = `parallelism.mechanisms.tool_cooldown_steps` for all four tools; the conflict
  family marks knife and stove exclusive (the reference recorded them as `resource_capacity`),
  which only `sync` rules enforce.
- `rules` (the rules profile, `rules.py`): `reference` by default, the game these rows were
  budgeted for; `sync` on request. Capacities depend on it:
  - `reference`: `agent_inventory_capacity` None; `shared_inventory_capacity` (one inventory
    for the whole team) = `parallelism.resource_capacity.inventory` when present, else 1 when
    `limitInventorySize` = 1 (the simulator's capacity is the flag itself), else None.
  - `sync`: `agent_inventory_capacity` = `v7_sampled_parameters.inventory_capacity` when
    `limitInventorySize` = 1 (absent: 1), else None; `shared_inventory_capacity` =
    `parallelism.resource_capacity.inventory` when present.
- `shared_budget`: `parallelism.shared_environment_max_steps` (else `generation.v7_sampled_runtime`).
- Descriptions: `task_descriptions` verbatim; `description_view` = `task_view`; `task_description`,
  when present, must equal the selected view. `family_sentence`: the structured view's lines
  after its closing line ("After all required ingredients ..."), joined with spaces.
- Distractors: none. The reference rows name no distractors (its simulator never placed them).
- `parallelism`: copied verbatim.
Everything else (`generation`, `game_params` counters, `schema_version`, ...) is ignored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sera.envs.textworld.bands import FAMILY_SETTINGS
from sera.envs.textworld.foods import fold_of
from sera.envs.textworld.rules import RulesName, rules_profile
from sera.envs.textworld.spec import (
    DIFFICULTIES,
    ROOMS,
    DishSpec,
    DoorSpec,
    IngredientSpec,
    SyncTaskSpec,
    ToolSpec,
)
from sera.envs.textworld.task_file import describe_validation_error

FAMILY_FROM_V9: dict[str, str] = {
    "multi_dish_fork_join": "fork_join",
    **{f: f for f in ("critical_path", "load_balanced", "resource_constrained", "dependency_gate", "conflict", "hierarchical")},
}
"""Reference family name -> ours."""
SPLIT_FROM_V9: dict[str, str] = {"train": "train", "dev": "dev", "validation": "dev", "test": "test"}
"""Reference split / manifest fold -> our split."""
GAME = "cookingworld_multidish"
BASE_ROOMS = ("kitchen", "pantry", "garden", "supermarket")
COOKINGS = ("raw", "fried", "roasted", "grilled", "baked", "boiled")
CUTTINGS = ("uncut", "chopped", "sliced", "diced", "minced")
CLOSING_PREFIX = "After all required ingredients"


class ReferenceFormatError(ValueError):
    """A V9 file or row is malformed; the message names file, line or index, task id and field."""


def is_v9_row(obj: Any) -> bool:
    """True for a dict shaped like a V9 JSONL row."""
    return isinstance(obj, dict) and obj.get("game") == GAME and "task_family" in obj and "dishes" in obj


def is_v9_manifest(obj: Any) -> bool:
    """True for a dict shaped like a V9 manifest."""
    return isinstance(obj, dict) and obj.get("game_selection") == GAME and "tasks" in obj


def read_v9_jsonl(path: str | Path, *, rules: RulesName = "reference") -> list[SyncTaskSpec]:
    """Every row of a V9 task JSONL, mapped to specs played under `rules` (strict; duplicate ids
    are errors)."""
    path = Path(path)
    try:
        lines = path.read_bytes().decode("utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise ReferenceFormatError(f"{path}: not UTF-8 text (byte {err.start})") from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ReferenceFormatError(f"{path}: contains no tasks")
    rows = []
    for line_no, line in enumerate(lines, start=1):
        where = f"{path} line {line_no}"
        if not line.strip():
            raise ReferenceFormatError(f"{where}: blank line between rows")
        try:
            rows.append((where, json.loads(line)))
        except json.JSONDecodeError as err:
            raise ReferenceFormatError(f"{where}: invalid JSON: {err.msg} (column {err.colno})") from None
    return _unique([v9_row_to_spec(row, where=where, rules=rules) for where, row in rows], [w for w, _ in rows])


def read_v9_manifest(path: str | Path, manifest: Any = None, *, rules: RulesName = "reference") -> list[SyncTaskSpec]:
    """Every task of a V9 manifest, mapped to specs played under `rules` (`manifest`: the already
    parsed JSON, if any)."""
    path = Path(path)
    if manifest is None:
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ReferenceFormatError(f"{path}: invalid JSON: {err.msg} (line {err.lineno})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("tasks"), list) or not manifest["tasks"]:
        raise ReferenceFormatError(f"{path}: field tasks: expected a non-empty list of tasks")
    count = manifest.get("task_count")
    if count is not None and count != len(manifest["tasks"]):
        raise ReferenceFormatError(f"{path}: field task_count: says {count} but tasks has {len(manifest['tasks'])}")
    wheres = [f"{path} tasks[{i}]" for i in range(len(manifest["tasks"]))]
    specs = [
        v9_row_to_spec(manifest_entry_to_row(e, where=w), where=w, rules=rules) for w, e in zip(wheres, manifest["tasks"])
    ]
    return _unique(specs, wheres)


def manifest_entry_to_row(entry: Any, *, where: str) -> dict[str, Any]:
    """Reshape one manifest task into the JSONL row shape."""
    check = _Checker(where, entry.get("task_id") if isinstance(entry, dict) else None)
    if not isinstance(entry, dict):
        raise check.fail("", f"expected an object, got {type(entry).__name__}")
    props = check.obj(entry, "generation_properties")
    params = check.get(entry, "game_params", str)
    try:
        game_params = json.loads(params)
    except json.JSONDecodeError as err:
        raise check.fail("game_params", f"not a JSON string: {err.msg}") from None
    fold = check.get(entry, "fold", str)
    if fold not in SPLIT_FROM_V9:
        raise check.fail("fold", f"unknown fold {fold!r}; allowed: {', '.join(SPLIT_FROM_V9)}")
    row = {key: entry[key] for key in ("task_id", "difficulty", "seed", "game", "task_description") if key in entry}
    return row | props | {"game_params": game_params, "split": SPLIT_FROM_V9[fold]}


def v9_row_to_spec(row: Any, *, where: str = "row", rules: RulesName = "reference") -> SyncTaskSpec:
    """Map one V9 row to a spec played under `rules` (see the module docstring for every decision)."""
    rules_profile(rules)  # a clear error for an unknown name
    check = _Checker(where, row.get("task_id") if isinstance(row, dict) else None)
    try:
        return _map_row(check, row, rules)
    except ValidationError as err:
        raise ReferenceFormatError(f"{check.where}: mapped spec is invalid: {describe_validation_error(err)}") from None


def _map_row(check: _Checker, row: Any, rules: RulesName) -> SyncTaskSpec:
    if not isinstance(row, dict):
        raise check.fail("", f"expected an object, got {type(row).__name__}")
    task_id = check.get(row, "task_id", str)
    v9_family = check.get(row, "task_family", str)
    if v9_family not in FAMILY_FROM_V9:
        raise check.fail("task_family", f"unknown family {v9_family!r}; allowed: {', '.join(FAMILY_FROM_V9)}")
    family = FAMILY_FROM_V9[v9_family]
    difficulty = check.get(row, "difficulty", str)
    if difficulty not in DIFFICULTIES:
        raise check.fail("difficulty", f"unknown difficulty {difficulty!r}; allowed: {', '.join(DIFFICULTIES)}")
    split = check.get(row, "split", str)
    if split not in SPLIT_FROM_V9:
        raise check.fail("split", f"unknown split {split!r}; allowed: {', '.join(SPLIT_FROM_V9)}")
    split = SPLIT_FROM_V9[split]
    generation = check.obj(row, "generation", required=False)
    sampled = check.obj(generation, "v7_sampled_parameters", required=False, prefix="generation.")
    fold = generation.get("source_db_fold", split)
    if fold not in ("train", "valid", "test", "dev"):
        raise check.fail("generation.source_db_fold", f"unknown fold {fold!r}; allowed: train, valid, test")
    params = check.obj(row, "game_params")
    rooms = list(ROOMS[: max(4, min(len(ROOMS), check.get(params, "numLocations", int, "game_params.")))])
    parallelism = check.obj(row, "parallelism")
    gated, hierarchy = _dependencies(check, parallelism)
    dishes = _dishes(check, row, family, sampled.get("preparation_complexity", "medium"))
    has_door = check.flag(params, "includeDoors")
    if gated and not has_door:
        raise check.fail("parallelism.dependencies", f"gates {gated} but game_params.includeDoors is 0")
    door = DoorSpec(room="kitchen", locks_rooms=["supermarket"], locks_dishes=gated) if has_door else None
    mechanisms = check.obj(parallelism, "mechanisms", prefix="parallelism.")
    cooldown = check.get(mechanisms, "tool_cooldown_steps", int, "parallelism.mechanisms.")
    exclusive = FAMILY_SETTINGS[family].exclusive_tools
    capacity = parallelism.get("resource_capacity") or {}
    if not isinstance(capacity, dict):
        raise check.fail("parallelism.resource_capacity", f"expected an object or null, got {capacity!r}")
    agent_cap, shared_cap = None, capacity.get("inventory")
    limited = check.flag(params, "limitInventorySize")
    if rules == "reference":  # the authors' one team inventory: the flag's 1, or the family's capacity
        shared_cap = shared_cap or (1 if limited else None)
    elif limited:
        agent_cap = check.get(sampled, "inventory_capacity", int, "generation.v7_sampled_parameters.") if sampled else 1
    descriptions = check.obj(row, "task_descriptions")
    view = check.get(row, "task_view", str)
    for name in ("structured", "coarse"):
        check.get(descriptions, name, str, "task_descriptions.")
    if view not in descriptions:
        raise check.fail("task_view", f"unknown view {view!r}; allowed: structured, coarse")
    if "task_description" in row and row["task_description"] != descriptions[view]:
        raise check.fail("task_description", f"differs from task_descriptions.{view}")
    if "shared_environment_max_steps" in parallelism:
        budget = check.get(parallelism, "shared_environment_max_steps", int, "parallelism.")
    else:
        runtime = check.obj(generation, "v7_sampled_runtime", prefix="generation.")
        budget = check.get(runtime, "shared_environment_max_steps", int, "generation.v7_sampled_runtime.")
    return SyncTaskSpec(
        task_id=task_id, split=split, fold=fold_of(fold), family=family, difficulty=difficulty,
        seed=check.get(row, "seed", int), rooms=rooms, dishes=dishes, door=door,
        tools=[ToolSpec(name=t, exclusive=t in exclusive, cooldown_steps=cooldown) for t in ("knife", "stove", "oven", "grill")],
        agent_inventory_capacity=agent_cap, shared_inventory_capacity=shared_cap, rules=rules,
        shared_budget=budget, description_view=view,
        descriptions={"structured": descriptions["structured"], "coarse": descriptions["coarse"]},
        family_sentence=_family_sentence(descriptions["structured"]), hierarchy=hierarchy, parallelism=parallelism,
    )


class _Checker:
    """Typed field access whose errors name the place, the task and the dotted field."""

    def __init__(self, where: str, task_id: Any) -> None:
        self.where = f"{where} (task {task_id})" if isinstance(task_id, str) and task_id else where

    def fail(self, field: str, problem: str) -> ReferenceFormatError:
        return ReferenceFormatError(f"{self.where}: " + (f"field {field}: " if field else "") + problem)

    def get(self, obj: dict[str, Any], key: str, kind: type, prefix: str = "") -> Any:
        value = obj.get(key)
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok or (kind is str and not value.strip()) or (kind is int and value < 0):
            got = "nothing (missing)" if key not in obj else repr(value)[:80]
            want = "a non-empty string" if kind is str else "a non-negative integer"
            raise self.fail(prefix + key, f"expected {want}, got {got}")
        return value

    def obj(self, obj: dict[str, Any], key: str, *, required: bool = True, prefix: str = "") -> dict[str, Any]:
        value = obj.get(key)
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            got = "nothing (missing)" if key not in obj else repr(value)[:80]
            raise self.fail(prefix + key, f"expected an object, got {got}")
        return value

    def flag(self, params: dict[str, Any], key: str) -> bool:
        value = params.get(key, 0)
        if value not in (0, 1) or isinstance(value, float):
            raise self.fail(f"game_params.{key}", f"expected 0 or 1, got {value!r}")
        return bool(value)


def _dependencies(check: _Checker, parallelism: dict[str, Any]) -> tuple[list[str], dict[str, list[str]]]:
    deps = parallelism.get("dependencies", [])
    if not isinstance(deps, list):
        raise check.fail("parallelism.dependencies", f"expected a list, got {deps!r}"[:120])
    gated: list[str] = []
    hierarchy: dict[str, list[str]] = {}
    for i, dep in enumerate(deps):
        field = f"parallelism.dependencies[{i}]"
        ok = isinstance(dep, dict) and all(isinstance(dep.get(k), str) for k in ("from", "to", "type"))
        if not ok or dep["type"] not in ("door", "decompose"):
            raise check.fail(field, f'expected {{"from": str, "to": str, "type": "door"|"decompose"}}, got {dep!r}'[:200])
        if dep["type"] == "door":
            gated.append(dep["to"])
        else:
            hierarchy.setdefault(dep["from"], []).append(dep["to"])
    return gated, hierarchy


def _dishes(check: _Checker, row: dict[str, Any], family: str, profile_complexity: Any) -> list[DishSpec]:
    raw = row.get("dishes")
    if not isinstance(raw, list) or not raw:
        raise check.fail("dishes", "expected a non-empty list of dishes")
    if profile_complexity not in ("low", "medium", "high"):
        raise check.fail("generation.v7_sampled_parameters.preparation_complexity", f"unknown {profile_complexity!r}")
    complexities = FAMILY_SETTINGS[family].dish_complexities(len(raw), profile_complexity)
    dishes = []
    for d, dish in enumerate(raw):
        if not isinstance(dish, dict):
            raise check.fail(f"dishes[{d}]", "expected an object")
        dish_id = check.get(dish, "dish_id", str, f"dishes[{d}].")
        recipe = dish.get("recipe")
        if not isinstance(recipe, list) or not recipe:
            raise check.fail(f"dishes[{d}].recipe", "expected a non-empty list of ingredients")
        items = [_ingredient(check, item, dish_id, f"dishes[{d}].recipe[{k}]") for k, item in enumerate(recipe)]
        names = dish.get("ingredient_names", [i.name for i in items])
        if names != [i.name for i in items]:
            raise check.fail(f"dishes[{d}].ingredient_names", f"{names!r} differs from the recipe's names")
        dishes.append(DishSpec(dish_id=dish_id, ingredients=items, complexity=complexities[d]))
    return dishes


def _ingredient(check: _Checker, item: Any, dish_id: str, field: str) -> IngredientSpec:
    if not isinstance(item, dict):
        raise check.fail(field, "expected an object")
    name = check.get(item, "name", str, field + ".")
    prep = item.get("preparation")
    if not isinstance(prep, list) or not all(isinstance(p, str) for p in prep):
        raise check.fail(field + ".preparation", f"expected a list like ['roasted', 'sliced'], got {prep!r}")
    cooks, cuts = [p for p in prep if p in COOKINGS], [p for p in prep if p in CUTTINGS]
    if prep and (len(cooks) != 1 or len(cuts) != 1 or len(prep) != 2):
        raise check.fail(
            field + ".preparation",
            f"expected one cooking {COOKINGS} and one cutting {CUTTINGS} (or []), got {prep!r}",
        )
    cook, cut = (cooks[0], cuts[0]) if prep else ("raw", "uncut")
    work = 1 + (cut != "uncut") + (cook != "raw")
    if check.get(item, "branch_work", int, field + ".") != work:
        raise check.fail(field + ".branch_work", f"is {item['branch_work']} but {prep!r} takes {work}")
    if item.get("requires_preparation", work > 1) != (work > 1):
        raise check.fail(field + ".requires_preparation", f"is {item['requires_preparation']!r} for {prep!r}")
    sources = item.get("candidate_source_locations", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
        raise check.fail(field + ".candidate_source_locations", f"expected a list of sources, got {sources!r}")
    source = sources[0] if sources and sources[0].split(".", 1)[0] in BASE_ROOMS else "kitchen"
    return IngredientSpec(
        name=name, dish_id=dish_id, cook=cook, cut=cut, source=source, candidate_sources=list(sources), branch_work=work
    )


def _family_sentence(structured: str) -> str:
    lines = structured.split("\n")
    closing = [k for k, line in enumerate(lines) if line.startswith(CLOSING_PREFIX)]
    return " ".join(line.strip() for line in lines[closing[-1] + 1 :] if line.strip()) if closing else ""


def _unique(specs: list[SyncTaskSpec], wheres: list[str]) -> list[SyncTaskSpec]:
    first: dict[str, str] = {}
    for spec, where in zip(specs, wheres):
        if spec.task_id in first:
            raise ReferenceFormatError(f"{where} (task {spec.task_id}): field task_id: duplicate (first at {first[spec.task_id]})")
        first[spec.task_id] = where
    return specs
