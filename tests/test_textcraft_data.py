"""TextCraft-Synth data: recipe book, generator, solver and task files against the published data.

The published files come with `platoon-textcraft==0.3.0`, a test dependency: the equality
tests fail (they do not skip) when it is missing.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from sera.envs.textcraft import tasks as tasks_module
from sera.envs.textcraft.recipes import Domain, RecipeBook, build_recipe_book, default_recipe_book
from sera.envs.textcraft.solver import CraftStep, plan_by_deficit, plan_by_tiers
from sera.envs.textcraft.tasks import (
    GenerationConfig,
    PublishedDataUnavailable,
    TaskFileError,
    UnknownTaskError,
    find_task,
    generate_splits,
    load_split,
    load_tasks,
    published_task_file,
    row_to_task,
    task_to_row,
    write_tasks,
)
from sera.types import Task

PUBLISHED_SHA256 = {  # from the package's data/SHA256SUMS
    "train": "685823fbca90aa89e061e61fef58d0122def4221eed14cf2c8c730341363a00f",
    "val": "84a123ee46e29e65f4d7b95f4943aa56907fc3fd5992268faa749602579dfc0c",
}
PUBLISHED_DIFFICULTIES = {
    "train": {"easy": 588, "medium": 852, "hard": 544, "extreme": 538},
    "val": {"easy": 147, "medium": 213, "hard": 136, "extreme": 136},
}


@pytest.fixture(scope="module")
def book() -> RecipeBook:
    return default_recipe_book()


@pytest.fixture(scope="module")
def generated() -> dict[str, list[Task]]:
    return generate_splits()


@pytest.fixture(scope="module")
def published() -> dict[str, list[Task]]:
    return {split: load_tasks(published_task_file(split)) for split in ("train", "val")}


# -- (a) recipe book --------------------------------------------------------------------------


def test_recipe_book_counts(book: RecipeBook) -> None:
    assert len(Domain) == 5
    assert len(book.base_items()) == 50
    assert all(len(book.items_in(d, 0)) == 10 for d in Domain)
    per_tier = [len(book.items_at_tier(t)) for t in range(1, 13)]
    assert per_tier == [125, 125, 120, 120, 120, 115, 115, 115, 110, 114, 114, 109]
    assert len(book.items()) == 50 + 1402
    assert all(len(book.recipes_for(i)) == 1 for i in book.items() if not book.is_base(i))


def test_recipe_book_structure(book: RecipeBook) -> None:
    for item in book.items():
        for recipe in book.recipes_for(item):
            assert 1 <= len(recipe.ingredients) <= 6 and recipe.result_count >= 1
            # Acyclic by construction: every ingredient sits on a lower tier.
            assert all(book.crafting_depth(i) < book.crafting_depth(item) for i in recipe.ingredients)
    assert book.is_base("m0_ore") and book.is_base("raw_t9") and not book.knows("raw_m0")
    assert book.recipes_for("m0_ore") == [] and book.recipes_for("nope") == []
    assert book.crafting_depth("m0_ore") == 0 and book.crafting_depth("m0_i7_7") == 7
    assert {"m0_i1_10", "m4_i1_24", "a3_i12_12", "m0_i6_6_10", "x12_all"} <= set(book.items())
    assert set(book.recipes_for("x10_mc")[0].ingredients) <= set(book.items_at_tier(7))
    assert default_recipe_book() is book  # cached


def test_recipe_book_is_seeded() -> None:
    small = build_recipe_book(seed=42, items_per_domain_tier=8)
    assert len(small.base_items()) == 40 and len(small.items()) == 422
    assert build_recipe_book(7, 8).recipes != small.recipes
    assert build_recipe_book(42, 8).recipes == small.recipes


# -- (b) the published data, row for row ------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "val"])
def test_generator_reproduces_published_bytes(
    split: str, generated: dict[str, list[Task]], tmp_path: Path
) -> None:
    source = published_task_file(split)  # raises (test fails) if the package is missing
    published_bytes = source.read_bytes()
    assert hashlib.sha256(published_bytes).hexdigest() == PUBLISHED_SHA256[split]

    ours = tmp_path / f"{split}.jsonl"
    write_tasks(generated[split], ours)
    if ours.read_bytes() != published_bytes:  # locate the first differing row for the report
        mine, theirs = ours.read_text().splitlines(), source.read_text().splitlines()
        assert len(mine) == len(theirs)
        for line_no, (a, b) in enumerate(zip(mine, theirs, strict=True), 1):
            assert json.loads(a) == json.loads(b), f"row {line_no} differs"
        pytest.fail("same rows, different bytes")
    counts = Counter(t.difficulty for t in generated[split])
    assert counts == PUBLISHED_DIFFICULTIES[split]


def test_published_rows_load_into_tasks(
    published: dict[str, list[Task]], generated: dict[str, list[Task]]
) -> None:
    for split in ("train", "val"):
        assert published[split] == generated[split]
    first = published["val"][0]
    assert first.id == "textcraft_synth.val.0" and first.env == "textcraft-synth"
    assert first.goal == "Craft the following items: 3x t7_i3" and first.max_steps == 75
    assert first.difficulty == first.misc["difficulty"] == "easy"
    assert list(first.misc) == [
        "target_items",
        "initial_inventory",
        "gold_trajectory",
        "difficulty",
        "max_depth",
        "num_craft_steps",
    ]
    train_targets = {i for t in published["train"] for i in t.misc["target_items"]}
    val_targets = {i for t in published["val"] for i in t.misc["target_items"]}
    assert not train_targets & val_targets


def test_load_split_and_find_task(published: dict[str, list[Task]], monkeypatch: pytest.MonkeyPatch) -> None:
    val = load_split("val")
    assert val == published["val"]
    assert find_task(val, "textcraft_synth.val.17") is val[17]
    with pytest.raises(UnknownTaskError, match=r"'textcraft_synth\.val\.1700'.*did you mean") as err:
        find_task(val, "textcraft_synth.val.1700")
    assert isinstance(err.value, KeyError) and not str(err.value).startswith("'")

    monkeypatch.setattr(tasks_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PublishedDataUnavailable, match="pip install --no-deps --ignore-requires-python"):
        published_task_file("train")
    monkeypatch.setattr(tasks_module, "generate_tasks", lambda split: [f"generated {split}"])
    assert load_split("val") == ["generated val"]


def test_small_generation_is_consistent() -> None:
    config = GenerationConfig(seed=7, requested={"train": 40, "val": 12}, items_per_domain_tier=12)
    splits = generate_splits(config)
    book = build_recipe_book(7, 12)
    assert [len(splits["train"]), len(splits["val"])] == [40, 12]
    for task in splits["train"] + splits["val"]:
        ((item, count),) = task.misc["target_items"].items()
        band = tasks_module.DIFFICULTY_BANDS[task.difficulty]
        assert band.min_tier <= book.crafting_depth(item) <= band.max_tier and 1 <= count <= band.max_count
        _assert_reaches_targets(book, task)


# -- (c) write / load round trip --------------------------------------------------------------


def test_write_then_load_round_trip(published: dict[str, list[Task]], tmp_path: Path) -> None:
    path = tmp_path / "val.jsonl"
    write_tasks(published["val"], path)
    assert path.read_bytes() == published_task_file("val").read_bytes()
    assert load_tasks(path) == published["val"]
    task = published["val"][3]
    assert row_to_task(task_to_row(task), source="x", line_no=1) == task


# -- (d) loader errors ------------------------------------------------------------------------


def _row(task_id: str = "t.0", **misc_changes: object) -> dict:
    misc = {
        "target_items": {"m0_i2": 1},
        "initial_inventory": {"m0_ore": 9},
        "gold_trajectory": [],
        "difficulty": "easy",
        "max_depth": 2,
        "num_craft_steps": 0,
    }
    misc.update(misc_changes)
    return {"goal": "Craft the following items: 1x m0_i2", "id": task_id, "max_steps": 75, "misc": misc}


def _file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _expect(path: Path, message: str) -> None:
    with pytest.raises(TaskFileError) as err:
        load_tasks(path)
    assert str(err.value) == f"{path} {message}"


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"goal": "x", "id": ', "line 2: invalid JSON: Expecting value (column 21)"),
        ("[1, 2]", "line 2: expected a JSON object, got [1, 2]"),
        (
            json.dumps(_row("t.1", target_items=[])),
            "line 2: field misc.target_items: expected a non-empty {item: positive int} mapping, got []",
        ),
        (
            json.dumps({k: v for k, v in _row("t.1").items() if k != "goal"}),
            "line 2: field goal: expected a non-empty string, got nothing (missing)",
        ),
        (
            json.dumps({**_row("t.1"), "misc": {"initial_inventory": {}}}),
            "line 2: field misc.target_items: expected a non-empty {item: positive int} mapping, "
            "got nothing (missing)",
        ),
        (
            json.dumps(_row("t.1", initial_inventory={"m0_ore": 0})),
            "line 2: field misc.initial_inventory: expected an {item: positive int} mapping, "
            'got {"m0_ore": 0}',
        ),
        (
            json.dumps(_row("t.1", target_items={"m0_i2": True})),
            "line 2: field misc.target_items: expected a non-empty {item: positive int} mapping, "
            'got {"m0_i2": true}',
        ),
        (json.dumps(_row("t.0")), "line 2: field id: duplicate id 't.0' (first on line 1)"),
        (
            json.dumps(_row("t.1", target_items={"zz_i9": 1})),
            "line 2: field misc.target_items: unknown item 'zz_i9' (not in the recipe book)",
        ),
        (
            json.dumps(_row("t.1", target_items={"m0_ore": 1})),
            "line 2: field misc.target_items: 'm0_ore' is a base item and cannot be crafted",
        ),
        (
            json.dumps(_row("t.1", initial_inventory={"gold": 1})),
            "line 2: field misc.initial_inventory: unknown item 'gold' (not in the recipe book)",
        ),
        (
            json.dumps({**_row("t.1"), "fork_strategy": "sideways"}),
            "line 2: field fork_strategy: expected 'task' or 'subtask', got \"sideways\"",
        ),
        (
            json.dumps({**_row("t.1"), "strategy": "task"}),
            "line 2: field strategy: unexpected field (a row has goal, id, max_steps, misc)",
        ),
        (
            json.dumps({**_row("t.1"), "max_steps": "75"}),
            'line 2: field max_steps: expected a positive int or null, got "75"',
        ),
        (
            json.dumps(_row("t.1", difficulty="trivial")),
            'line 2: field misc.difficulty: expected one of easy, medium, hard, extreme, starter, got "trivial"',
        ),
        (
            json.dumps(_row("t.1", gold_trajectory=[{"action": "craft", "target": ["m0_i1", 0]}])),
            'line 2: field misc.gold_trajectory[0]: expected {"action": "craft", "target": [item, crafts], '
            '"ingredients": {item: positive int}, "result_count": positive int}, got '
            '{"action": "craft", "target": ["m0_i1", 0]}',
        ),
        ("", "line 2: blank line between rows"),
    ],
)
def test_loader_errors_name_file_line_and_field(tmp_path: Path, bad_line: str, message: str) -> None:
    path = _file(tmp_path, json.dumps(_row("t.0")), bad_line, json.dumps(_row("t.9")))
    _expect(path, message)


def test_loader_edge_cases(tmp_path: Path) -> None:
    ok = _file(tmp_path, json.dumps(_row("t.0")), "", "  ")  # trailing blank lines are fine
    assert [t.id for t in load_tasks(ok)] == ["t.0"]
    empty = _file(tmp_path)
    with pytest.raises(TaskFileError, match=f"^{empty}: contains no tasks$"):
        load_tasks(empty)
    bad_utf8 = tmp_path / "tasks.jsonl"
    bad_utf8.write_bytes(json.dumps(_row("t.0")).encode() + b"\n\xff\n")
    _expect(bad_utf8, "line 2: not UTF-8 text")
    with pytest.raises(FileNotFoundError):
        load_tasks(tmp_path / "absent.jsonl")
    sera_copy = _file(tmp_path, json.dumps({**_row("t.0"), "fork_strategy": "subtask"}))
    assert [t.id for t in load_tasks(sera_copy)] == ["t.0"]  # SERA's copies carry platoon's key


# -- (e) solver -------------------------------------------------------------------------------


def _replay(book: RecipeBook, inventory: dict[str, int], steps: list[dict]) -> dict[str, int]:
    """Apply gold steps with the `craft` tool's rules (exact amounts, total = crafts * result)."""
    stock = dict(inventory)
    for step in steps:
        item, crafts = step["target"]
        recipe = book.recipes_for(item)[0]
        assert step["ingredients"] == {name: n * crafts for name, n in recipe.ingredients.items()}
        assert step["result_count"] == crafts * recipe.result_count
        for name, amount in step["ingredients"].items():
            assert stock.get(name, 0) >= amount, f"{item}: short of {name}"
            stock[name] -= amount
        stock[item] = stock.get(item, 0) + step["result_count"]
    return stock


def _assert_reaches_targets(book: RecipeBook, task: Task, steps: list[dict] | None = None) -> None:
    start = task.misc["initial_inventory"]
    end = _replay(book, start, task.misc["gold_trajectory"] if steps is None else steps)
    for item, count in task.misc["target_items"].items():
        assert end.get(item, 0) - start.get(item, 0) >= count, task.id


def test_published_gold_trajectories_replay(book: RecipeBook, published: dict[str, list[Task]]) -> None:
    for task in published["train"] + published["val"]:
        _assert_reaches_targets(book, task)
        assert task.misc["num_craft_steps"] == len(task.misc["gold_trajectory"])
        assert task.misc["max_depth"] == book.crafting_depth(next(iter(task.misc["target_items"])))


def test_planners(book: RecipeBook, published: dict[str, list[Task]]) -> None:
    for task in published["val"]:
        misc = task.misc
        tiered = plan_by_tiers(book, misc["target_items"], misc["initial_inventory"])
        assert [s.to_json() for s in tiered] == misc["gold_trajectory"]
        deficit = plan_by_deficit(book, misc["target_items"], misc["initial_inventory"])
        _assert_reaches_targets(book, task, [s.to_json() for s in deficit])
        assert len(deficit) <= len(tiered)
    step = CraftStep.from_json(published["val"][0].misc["gold_trajectory"][-1])
    assert step.to_json() == published["val"][0].misc["gold_trajectory"][-1]

    # Mid-episode: intermediates on hand, base materials only for the rest.
    recipe = book.recipes_for("m0_i2")[0]
    held = {name: n * 5 for name, n in recipe.ingredients.items()}
    plan = plan_by_deficit(book, {"m0_i2": 1}, held)
    assert [s.item for s in plan] == ["m0_i2"]
    assert plan_by_deficit(book, {"m0_i2": 1}, {}) is None
    assert plan_by_tiers(book, {"m0_i2": 1}, {}) is None
    assert plan_by_tiers(book, {"unknown": 1}, {}) is None
