"""TextCraft-Synth task files: the published JSONL rows, read strictly and written byte-exactly.

One task per line, `json.dumps` with its default separators, keys in this order:

    {"goal": "Craft the following items: 3x t7_i3", "id": "textcraft_synth.val.0",
     "max_steps": 75, "misc": {"target_items": {...}, "initial_inventory": {...},
     "gold_trajectory": [...], "difficulty": "easy", "max_depth": 3, "num_craft_steps": 6}}

The published rows have no `fork_strategy` key; SERA's copies do, so reading accepts (and drops)
it (platoon's TextCraft forces "task" regardless). Every line ends
with a newline, including the last. `write_tasks` reproduces the published files byte for
byte.

Reading is strict (the shared skeleton in `sera.envs.task_file`): the first problem raises
`TaskFileError` naming the file, the 1-based line and the field, e.g.

    tasks.jsonl line 7: field misc.target_items: expected a non-empty {item: positive int} mapping, got []

Checked: valid UTF-8 and JSON; each row an object with the four keys above (plus an optional
`fork_strategy` of "task" or "subtask"); non-empty string `id` (unique in the file) and `goal`; `max_steps` a
positive int or null; `misc` an object whose `target_items` is a non-empty {item: positive
int} mapping of craftable items of the recipe book and whose `initial_inventory` is an
{item: positive int} mapping (possibly empty) of known items. `difficulty`, `max_depth`,
`num_craft_steps` and `gold_trajectory` are checked when present; other `misc` keys pass
through (child tasks add some). Blank lines at the end of a file are ignored; a blank line
followed by more rows is an error (it usually means files were pasted together badly).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sera.envs.task_file import TaskFileError, read_jsonl_rows
from sera.envs.textcraft.recipes import RecipeBook, default_recipe_book
from sera.envs.textcraft.task_generator import DIFFICULTY_BANDS, ENV_NAME, gc_paused

TASK_DIFFICULTIES: tuple[str, ...] = (*DIFFICULTY_BANDS, "starter")
"""Difficulty labels a task file may carry: the published bands and the starter tier
(`sera.envs.textcraft.starter`)."""
from sera.envs.textcraft.world import is_positive_int
from sera.types import Task

ROW_KEYS = ("goal", "id", "max_steps", "misc")
"""Top-level keys of a row, in file order."""
OPTIONAL_KEYS = ("fork_strategy",)
"""Accepted and ignored: SERA's copies of the files carry platoon's `fork_strategy` (TextCraft
children never see ancestor goals either way)."""


def task_to_row(task: Task) -> dict[str, Any]:
    """The published row of a task (its `misc` is written unchanged)."""
    if task.env != ENV_NAME:
        raise ValueError(f"task {task.id!r} is a {task.env!r} task, not {ENV_NAME!r}")
    if task.difficulty != task.misc.get("difficulty"):
        raise ValueError(
            f"task {task.id!r}: difficulty {task.difficulty!r} disagrees with "
            f"misc.difficulty {task.misc.get('difficulty')!r}"
        )
    return {"goal": task.goal, "id": task.id, "max_steps": task.max_steps, "misc": task.misc}


def write_tasks(tasks: Iterable[Task], path: str | Path) -> None:
    """Write tasks in the published format (byte-identical to the package files)."""
    lines = [json.dumps(task_to_row(task)) + "\n" for task in tasks]
    Path(path).write_bytes("".join(lines).encode("utf-8"))  # bytes: no newline translation


def load_tasks(path: str | Path, *, book: RecipeBook | None = None) -> list[Task]:
    """Read and validate a task file; raises `TaskFileError` at the first problem."""
    path = Path(path)
    book = book or default_recipe_book()
    with gc_paused():
        return read_jsonl_rows(
            path, lambda row, line_no: row_to_task(row, source=path, line_no=line_no, book=book),
            id_of=lambda task: task.id, id_field="id",
        )


def row_to_task(row: Any, *, source: str | Path, line_no: int, book: RecipeBook | None = None) -> Task:
    """Validate one parsed row and map it to a `Task`; `source` and `line_no` go in errors."""
    check = _RowChecker(f"{source} line {line_no}", book or default_recipe_book())
    return check.row(row)


class _RowChecker:
    """Validates one row; each check raises `TaskFileError` with the field's dotted path."""

    def __init__(self, where: str, book: RecipeBook) -> None:
        self.where = where
        self.book = book

    def fail(self, field: str, problem: str) -> TaskFileError:
        return TaskFileError(f"{self.where}: field {field}: {problem}")

    def row(self, row: Any) -> Task:
        if not isinstance(row, dict):
            raise TaskFileError(f"{self.where}: expected a JSON object, got {_show(row)}")
        for key in row:
            if key not in ROW_KEYS and key not in OPTIONAL_KEYS:
                raise self.fail(key, f"unexpected field (a row has {', '.join(ROW_KEYS)})")
        if row.get("fork_strategy", "task") not in ("task", "subtask"):
            raise self.fail("fork_strategy", f"expected 'task' or 'subtask', got {_show(row['fork_strategy'])}")
        task_id = self.text(row, "id")
        goal = self.text(row, "goal")
        max_steps = row.get("max_steps")
        if max_steps is not None and not is_positive_int(max_steps):
            raise self.fail("max_steps", f"expected a positive int or null, got {_show(max_steps)}")
        misc = row.get("misc")
        if not isinstance(misc, dict):
            raise self.fail("misc", f"expected an object, got {_got(row, 'misc')}")
        self.misc(misc)
        return Task(
            id=task_id,
            goal=goal,
            env=ENV_NAME,
            difficulty=misc.get("difficulty"),
            max_steps=max_steps,
            misc=misc,
        )

    def text(self, row: dict[str, Any], key: str) -> str:
        value = row.get(key)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"expected a non-empty string, got {_got(row, key)}")
        return value

    def misc(self, misc: dict[str, Any]) -> None:
        targets = self.counts(misc, "target_items", allow_empty=False)
        for item in targets:
            if not self.book.knows(item):
                raise self.fail("misc.target_items", f"unknown item {item!r} (not in the recipe book)")
            if self.book.is_base(item):
                raise self.fail("misc.target_items", f"{item!r} is a base item and cannot be crafted")
        inventory = self.counts(misc, "initial_inventory", allow_empty=True)
        for item in inventory:
            if not self.book.knows(item):
                raise self.fail("misc.initial_inventory", f"unknown item {item!r} (not in the recipe book)")
        difficulty = misc.get("difficulty")
        if difficulty is not None and difficulty not in TASK_DIFFICULTIES:
            raise self.fail(
                "misc.difficulty", f"expected one of {', '.join(TASK_DIFFICULTIES)}, got {_show(difficulty)}"
            )
        for key in ("max_depth", "num_craft_steps"):
            value = misc.get(key)
            if value is not None and not (is_positive_int(value) or value == 0):
                raise self.fail(f"misc.{key}", f"expected a non-negative int, got {_show(value)}")
        if "gold_trajectory" in misc:
            self.gold(misc["gold_trajectory"])

    def counts(self, misc: dict[str, Any], key: str, *, allow_empty: bool) -> dict[str, int]:
        value = misc.get(key)
        valid = (
            isinstance(value, dict)
            and (allow_empty or value)
            and all(isinstance(item, str) and is_positive_int(n) for item, n in value.items())
        )
        if not valid:
            shape = "an" if allow_empty else "a non-empty"
            raise self.fail(
                f"misc.{key}", f"expected {shape} {{item: positive int}} mapping, got {_got(misc, key)}"
            )
        return value

    def gold(self, steps: Any) -> None:
        if not isinstance(steps, list):
            raise self.fail("misc.gold_trajectory", f"expected a list of craft steps, got {_show(steps)}")
        for i, step in enumerate(steps):
            if not _is_craft_step(step):
                raise self.fail(
                    f"misc.gold_trajectory[{i}]",
                    'expected {"action": "craft", "target": [item, crafts], "ingredients": '
                    f'{{item: positive int}}, "result_count": positive int}}, got {_show(step)}',
                )


def _is_craft_step(step: Any) -> bool:
    # Written for speed (the published files hold 200,000 steps): `type(x) is int` also
    # rejects bools.
    if type(step) is not dict or step.get("action") != "craft":
        return False
    target, used, made = step.get("target"), step.get("ingredients"), step.get("result_count")
    return (
        type(target) is list
        and len(target) == 2
        and type(target[0]) is str
        and type(target[1]) is int
        and target[1] > 0
        and type(made) is int
        and made > 0
        and type(used) is dict
        and all(type(name) is str and type(n) is int and n > 0 for name, n in used.items())
    )


def _got(container: dict[str, Any], key: str) -> str:
    """What was found under `key`: its short JSON, or "nothing (missing)"."""
    return _show(container[key]) if key in container else "nothing (missing)"


def _show(value: Any, limit: int = 80) -> str:
    """A short JSON rendering of a bad value for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
