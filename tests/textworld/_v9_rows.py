"""Hand-written rows in the reference's V9 formats (sera-spec §10.2), for the V9 loader tests.

`v9_row` builds one JSONL row shaped like the published generator rows (keys as in
`textworld_test.jsonl`); `v9_manifest` projects rows into the manifest shape (`game_params` as a
compact JSON string, the rest under `generation_properties`).
"""

from __future__ import annotations

import copy
import json
from typing import Any

STRUCTURED_CLOSING = "After all required ingredients for a dish are ready, prepare and eat that dish."


def recipe_item(name: str, prep: list[str], sources: list[str]) -> dict[str, Any]:
    """One recipe entry; branch_work and requires_preparation derived like the reference."""
    work = 1 + ("uncut" not in prep) + ("raw" not in prep)
    return {
        "branch_work": work,
        "candidate_source_locations": sources,
        "name": name,
        "preparation": prep,
        "requires_preparation": work > 1,
    }


DISHES_2x2 = [
    {
        "dish_id": "dish_1",
        "estimated_branch_work": 4,
        "ingredient_names": ["red apple", "water"],
        "recipe": [
            recipe_item("red apple", ["roasted", "sliced"], ["kitchen.counter", "garden"]),
            recipe_item("water", ["raw", "uncut"], ["kitchen.fridge", "supermarket.showcase"]),
        ],
    },
    {
        "dish_id": "dish_2",
        "estimated_branch_work": 3,
        "ingredient_names": ["salt", "carrot"],
        "recipe": [
            recipe_item("salt", ["raw", "uncut"], ["pantry.shelf", "supermarket.showcase"]),
            # order cut-first on purpose: the loader must not depend on [cook, cut] order
            recipe_item("carrot", ["chopped", "raw"], ["garden", "kitchen.fridge"]),
        ],
    },
]


def _descriptions(dishes: list[dict[str, Any]], family_line: str | None) -> dict[str, str]:
    structured = [
        f"Prepare and eat {len(dishes)} independent dishes. Complete every dish.",
        "The dishes are separate objectives and may be prepared independently before the final meal actions.",
    ]
    for dish in dishes:
        structured.append(f"Dish {dish['dish_id']}: prepare the following ingredients:")
        structured += [f"- {i['name']} ({', '.join(i['preparation'])})" for i in dish["recipe"]]
    structured.append(STRUCTURED_CLOSING)
    coarse = [f"Prepare and eat {len(dishes)} dishes. Check the cookbook and complete every dish."]
    coarse += [f"Dish {d['dish_id']} uses: {', '.join(i['name'] for i in d['recipe'])}." for d in dishes]
    if family_line:
        structured.append(family_line)
        coarse.append(family_line)
    return {"coarse": "\n".join(coarse), "structured": "\n".join(structured)}


def v9_row(
    *,
    family: str = "multi_dish_fork_join",
    difficulty: str = "medium",
    split: str = "train",
    offset: int = 0,
    seed: int = 850000,
    dishes: list[dict[str, Any]] | None = None,
    include_doors: int = 1,
    limit_inventory: int = 1,
    num_locations: int = 9,
    inventory_capacity: int = 2,
    complexity: str = "medium",
    budget: int = 96,
    cooldown: int = 1,
    dependencies: list[dict[str, str]] | None = None,
    resource_capacity: dict[str, int] | None = None,
    family_line: str | None = None,
    view: str = "structured",
) -> dict[str, Any]:
    """A V9 JSONL row (keys as the reference writes them)."""
    dishes = copy.deepcopy(DISHES_2x2 if dishes is None else dishes)
    descriptions = _descriptions(dishes, family_line)
    fold = {"train": "train", "dev": "valid", "test": "test"}[split]
    total_work = sum(d["estimated_branch_work"] for d in dishes)
    critical = max(d["estimated_branch_work"] for d in dishes) + 2 * len(dishes)
    return {
        "base_game": "cookingworld",
        "difficulty": difficulty,
        "dishes": dishes,
        "game": "cookingworld_multidish",
        "game_params": {
            "includeDoors": include_doors,
            "limitInventorySize": limit_inventory,
            "numDishes": len(dishes),
            "numDistractorItems": 7,
            "numIngredientsPerDish": len(dishes[0]["recipe"]),
            "numIngredientsTotal": sum(len(d["recipe"]) for d in dishes),
            "numLocations": num_locations,
        },
        "generation": {
            "require_disjoint_ingredients": True,
            "requires_composite_environment": True,
            "requires_composite_scorer": True,
            "source_db_fold": fold,
            "source_db_seed": seed,
            "task_family": family,
            "v7_sampled_parameters": {
                "dish_count": len(dishes),
                "include_doors": bool(include_doors),
                "ingredients_per_dish": len(dishes[0]["recipe"]),
                "inventory_capacity": inventory_capacity,
                "limit_inventory_size": bool(limit_inventory),
                "max_prepared_ingredients_per_dish": 3,
                "min_prepared_ingredients_per_dish": 1,
                "num_distractor_items": 7,
                "num_locations": num_locations,
                "preparation_complexity": complexity,
            },
            "v7_sampled_runtime": {"shared_environment_max_steps": budget, "tool_cooldown_steps": cooldown},
            "v7_seed": seed,
        },
        "parallelism": {
            "branches": len(dishes),
            "critical_path_estimate": critical,
            "dependencies": dependencies or [],
            "estimated_sequential_actions": total_work + 2 * len(dishes) + include_doors,
            "hierarchy_depth": 2 if family == "hierarchical" else 1,
            "ideal_parallel_speedup": round(total_work / critical, 4),
            "ingredient_disjoint": True,
            "mechanisms": {"tool_cooldown_steps": cooldown},
            "pattern": "fork_join" if family == "multi_dish_fork_join" else family,
            "resource_capacity": resource_capacity,
            "resource_conflict": family == "conflict",
            "shared_bottlenecks": ["kitchen", "meal_preparation", "meal_eating"],
            "shared_environment_max_steps": budget,
            "total_branch_work": total_work,
        },
        "schema_version": 1,
        "seed": seed,
        "source_fold": split,
        "split": split,
        "task_description": descriptions[view],
        "task_descriptions": descriptions,
        "task_family": family,
        "task_id": f"cookingworld_multidish_{split}_{family}_{difficulty}_{offset:04d}",
        "task_view": view,
    }


def v9_manifest(rows: list[dict[str, Any]], split: str = "validation") -> dict[str, Any]:
    """The manifest the reference writes for these rows."""
    tasks = []
    for row in rows:
        tasks.append(
            {
                "difficulty": row["difficulty"],
                "fold": split,
                "game": row["game"],
                "game_params": json.dumps(row["game_params"], sort_keys=True, separators=(",", ":")),
                "generation_properties": {
                    key: row[key]
                    for key in ("base_game", "dishes", "generation", "parallelism", "task_descriptions", "task_family", "task_view")
                },
                "seed": row["seed"],
                "task_description": row["task_description"],
                "task_id": row["task_id"],
            }
        )
    return {
        "dataset": "TextWorldExpress-MultiDish-V9-Validation",
        "difficulty_counts": {},
        "game_selection": "cookingworld_multidish",
        "schema_version": 1,
        "source_files": {"textworld_dev.jsonl": "0" * 64},
        "source_sha256": "0" * 64,
        "split": split,
        "task_count": len(tasks),
        "task_family_counts": {},
        "tasks": tasks,
    }


def write_jsonl(path, rows: list[dict[str, Any]]) -> None:
    """Rows as the reference writes them (sorted keys, one per line)."""
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


def write_manifest(path, manifest: dict[str, Any]) -> None:
    """A manifest as the reference writes it (indented, sorted keys)."""
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def v9_row_from_spec(spec, budget: int | None = None) -> dict[str, Any]:
    """One of our generated `SyncTaskSpec`s written as an authors' V9 row (their field names,
    descriptions in their style, the family's dependency and capacity records).

    `budget` defaults to the authors' rule: uniform in the difficulty's runtime band (unshifted,
    never checked against a plan), drawn from `Random(spec.seed)`. The ingredient's source is
    put first among its candidates, since the reader places an item at its first candidate.
    """
    import random

    from sera.envs.textworld.bands import RUNTIME_BANDS

    band = RUNTIME_BANDS[spec.difficulty].shared_budget
    budget = random.Random(spec.seed).randint(band.lo, band.hi) if budget is None else budget
    dishes = []
    for dish in spec.dishes:
        recipe = [
            recipe_item(i.name, [i.cook, i.cut], [i.source, *(c for c in i.candidate_sources if c != i.source)])
            for i in dish.ingredients
        ]
        dishes.append({
            "dish_id": dish.dish_id,
            "estimated_branch_work": dish.work,
            "ingredient_names": [i.name for i in dish.ingredients],
            "recipe": recipe,
        })
    deps = [{"from": "gate_1", "to": d, "type": "door"} for d in (spec.door.locks_dishes if spec.door else [])]
    deps += [{"from": parent, "to": child, "type": "decompose"} for parent, kids in spec.hierarchy.items() for child in kids]
    resource = None
    if spec.family == "conflict":
        resource = {"knife": 1, "stove": 1}
    elif spec.shared_inventory_capacity is not None:
        resource = {"inventory": spec.shared_inventory_capacity}
    family = "multi_dish_fork_join" if spec.family == "fork_join" else spec.family
    offset = int(spec.task_id.rsplit("_", 1)[1])
    return v9_row(
        family=family, difficulty=spec.difficulty, split=spec.split, offset=offset, seed=spec.seed, dishes=dishes,
        include_doors=int(spec.door is not None), limit_inventory=int(spec.agent_inventory_capacity is not None),
        num_locations=len(spec.rooms), inventory_capacity=spec.agent_inventory_capacity or 1, budget=budget,
        cooldown=spec.tool("knife").cooldown_steps, dependencies=deps, resource_capacity=resource,
        family_line=spec.family_sentence if spec.family in ("dependency_gate", "resource_constrained") else None,
        view=spec.description_view,
    )
