"""Choosing the tasks of a run: a split or a task file, then ids, a difficulty band and a limit.

Shared by `sera eval`, `sera play` and training, so every command selects tasks the same way and
refuses the same bad requests with the same one-line messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sera.envs.registry import EnvSpec
from sera.envs.task_lookup import find_task
from sera.types import Task


class TaskSelectionError(ValueError):
    """The requested tasks cannot be selected (unknown split, id or difficulty; bad limit; none left)."""


@dataclass(frozen=True)
class TaskSelection:
    """Which tasks of an environment a run uses."""

    split: str | None = None
    """A published split; ignored when `tasks_file` is given."""
    tasks_file: Path | None = None
    """A task file in the environment's published format, instead of the split."""
    task_ids: tuple[str, ...] = ()
    """Only these ids, in this order (empty: all)."""
    difficulty: str | None = None
    """Only this difficulty band."""
    limit: int | None = None
    """At most this many tasks (the first ones), >= 1."""
    rules: str | None = None
    """The rules profile to play the tasks under (TextWorld-Sync: `sync` / `reference`); None
    keeps each split's or file's own."""

    @property
    def source(self) -> str:
        """Where the tasks come from, as recorded in summaries: the split or the file path."""
        return str(self.tasks_file) if self.tasks_file is not None else str(self.split)


def load_tasks(spec: EnvSpec, selection: TaskSelection) -> list[Task]:
    """All tasks of the selection's split or file (before ids, difficulty and limit), played under
    the selection's rules profile."""
    if selection.rules is not None:
        if not spec.rules:
            raise TaskSelectionError(f"{spec.name} has no rules profiles; --rules applies to textworld-sync only")
        if selection.rules not in spec.rules:
            raise TaskSelectionError(f"unknown rules profile {selection.rules!r} for {spec.name}; known: {', '.join(spec.rules)}")
    if selection.tasks_file is not None:
        return spec.load_file(selection.tasks_file, rules=selection.rules)
    if selection.split not in spec.splits:
        raise TaskSelectionError(f"unknown split {selection.split!r} for {spec.name}; known: {', '.join(spec.splits)}")
    return spec.load_split(selection.split, rules=selection.rules)


def select_tasks(spec: EnvSpec, selection: TaskSelection) -> list[Task]:
    """The tasks `selection` names; `TaskSelectionError` (one line) for anything it cannot give."""
    if selection.limit is not None and selection.limit < 1:
        raise TaskSelectionError(f"limit must be a positive number of tasks, got {selection.limit}")
    tasks = filter_tasks(load_tasks(spec, selection), selection.task_ids, selection.difficulty)
    tasks = tasks[: selection.limit] if selection.limit is not None else tasks
    if not tasks:
        raise TaskSelectionError(f"no task selected from {selection.source}")
    return tasks


def filter_tasks(tasks: Sequence[Task], task_ids: Sequence[str], difficulty: str | None) -> list[Task]:
    """`tasks` narrowed to `task_ids` (in that order) and then to one difficulty band."""
    chosen = list(tasks)
    if task_ids:
        try:
            chosen = [find_task(chosen, task_id) for task_id in task_ids]
        except KeyError as exc:
            raise TaskSelectionError(str(exc)) from None
    if difficulty:
        known = sorted({t.difficulty for t in chosen if t.difficulty})
        if difficulty not in known:
            raise TaskSelectionError(f"unknown difficulty {difficulty!r}; known: {', '.join(known) or 'none'}")
        chosen = [t for t in chosen if t.difficulty == difficulty]
    return chosen
