"""TextWorld-Sync tasks: the splits, task files in any supported format, and lookup by id.

- `load_split("train" | "dev" | "test")`: generated deterministically by `generator` (1,500 /
  200 / 1,400 tasks, about a second each), memoised per process.
- `load_tasks(path)`: our JSONL (`task_file`), the reference V9 JSONL or a V9 manifest
  (`reference_v9`); the format is detected from the content, not the file name.
- `rules=` (every loader): the rules profile to play under (`rules.py`); None keeps the file's
  own: `sync` for our splits and files, `reference` for the authors' V9 files.
- `write_tasks(specs, path)`: our JSONL, atomically (argument order as TextCraft's).
- `find_task(tasks, task_id)`: the shared lookup (`sera.envs.task_lookup`).
Every `Task` is `SyncTaskSpec.to_task()`; `SyncTaskSpec.from_task(task)` gives the spec back.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from sera.envs.textworld.generator import SPLITS, generate_split
from sera.envs.textworld.reference_v9 import is_v9_manifest, is_v9_row, read_v9_jsonl, read_v9_manifest
from sera.envs.textworld.rules import RulesName, rules_profile
from sera.envs.textworld.spec import SyncTaskSpec
from sera.envs.textworld.task_file import read_task_file, write_task_file
from sera.envs.task_lookup import UnknownTaskError, find_task
from sera.types import Task

__all__ = [
    "SPLITS",
    "TaskFormat",
    "UnknownTaskError",
    "detect_format",
    "find_task",
    "load_split",
    "load_split_specs",
    "load_task_specs",
    "load_tasks",
    "write_split",
    "write_tasks",
]

TaskFormat = Literal["sera", "v9_jsonl", "v9_manifest"]


def load_split_specs(split: str, *, rules: RulesName | None = None) -> list[SyncTaskSpec]:
    """The specs of a split (generated once per process), played under `rules` (None: `sync`,
    the rules their budgets were drawn for)."""
    return [_with_rules(s, rules) for s in _split_specs(split)]


def load_split(split: str, *, rules: RulesName | None = None) -> list[Task]:
    """The tasks of a split (generated once per process), played under `rules` (None: `sync`)."""
    if rules is None or rules == "sync":
        return list(_split_tasks(split))
    return [spec.to_task() for spec in load_split_specs(split, rules=rules)]


def _with_rules(spec: SyncTaskSpec, rules: RulesName | None) -> SyncTaskSpec:
    if rules is None or rules == spec.rules:
        return spec
    rules_profile(rules)  # a clear error for an unknown name
    return spec.model_copy(update={"rules": rules})


@functools.cache
def _split_specs(split: str) -> tuple[SyncTaskSpec, ...]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return tuple(generate_split(split))


@functools.cache
def _split_tasks(split: str) -> tuple[Task, ...]:
    return tuple(spec.to_task() for spec in _split_specs(split))


def detect_format(path: str | Path) -> TaskFormat:
    """Which format a file holds, from its first row (or the whole file, for a manifest)."""
    path = Path(path)
    text = path.read_bytes().decode("utf-8", errors="replace")
    first = next((line for line in text.split("\n") if line.strip()), "")
    if not first:
        raise ValueError(f"{path}: contains no tasks")
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        try:
            head = json.loads(text)
        except json.JSONDecodeError:
            return "sera"  # unreadable first row: our strict reader reports the line's JSON error
    if is_v9_manifest(head):
        return "v9_manifest"
    if is_v9_row(head):
        return "v9_jsonl"
    if isinstance(head, dict) and "task_id" in head:
        return "sera"
    raise ValueError(
        f"{path}: not a TextWorld-Sync task file: expected our JSONL (rows with task_id, family, dishes, ...), "
        "the reference V9 JSONL (rows with game 'cookingworld_multidish', task_family, dishes) "
        "or a V9 manifest (an object with game_selection 'cookingworld_multidish' and tasks)"
    )


def load_task_specs(path: str | Path, *, rules: RulesName | None = None) -> list[SyncTaskSpec]:
    """Specs from a file in any supported format, played under `rules`; None: the file's own
    (`reference` for the authors' V9 files, each row's `rules` field for ours, default `sync`)."""
    fmt = detect_format(path)
    if fmt == "v9_manifest":
        return read_v9_manifest(path, rules=rules or "reference")
    if fmt == "v9_jsonl":
        return read_v9_jsonl(path, rules=rules or "reference")
    return [_with_rules(s, rules) for s in read_task_file(path)]


def load_tasks(path: str | Path, *, rules: RulesName | None = None) -> list[Task]:
    """Tasks from a file in any supported format, played under `rules` (None: the file's own)."""
    return [spec.to_task() for spec in load_task_specs(path, rules=rules)]


def write_tasks(specs: Iterable[SyncTaskSpec | Task], path: str | Path) -> int:
    """Write our JSONL atomically; returns the number of tasks written."""
    return write_task_file(specs, path)


def write_split(split: str, out: Path) -> int:
    """Generate the tasks of split `split` (train, dev or test) and write them to the JSONL file
    `out`; returns the number written. An unknown split is a ValueError, a folder at `out` an
    IsADirectoryError."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    if out.is_dir():
        raise IsADirectoryError(f"{out} is a folder; give the JSONL file to write, e.g. {out / 'tasks.jsonl'}")
    return write_tasks(load_split_specs(split), out)
