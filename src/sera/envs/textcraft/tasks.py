"""TextCraft-Synth tasks: where the published splits live, how to get them, how to pick one.

The published splits (train 2,522 tasks: easy 588, medium 852, hard 544, extreme 538; val 632:
147 / 213 / 136 / 136) ship as package data of `platoon-textcraft==0.3.0` (MIT). Our
generator reproduces both files byte for byte, so the package is a convenience, not a
requirement: `load_split` reads the package files when installed and generates otherwise.

Generation lives in `task_generator`, the file format in `task_file`; this module re-exports
their public names so callers need one import.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sera.envs.textcraft.task_file import (
    TaskFileError,
    load_tasks,
    row_to_task,
    task_to_row,
    write_tasks,
)
from sera.envs.textcraft.task_generator import (
    DIFFICULTY_BANDS,
    ENV_NAME,
    SPLITS,
    GenerationConfig,
    Split,
    generate_splits,
    generate_tasks,
)
from sera.envs.task_lookup import UnknownTaskError, find_task
from sera.envs.textcraft.starter import STARTER_SPLITS, is_starter_split, starter_tasks
from sera.types import Task

__all__ = [
    "DIFFICULTY_BANDS",
    "ENV_NAME",
    "PUBLISHED_PACKAGE",
    "SPLITS",
    "STARTER_SPLITS",
    "GenerationConfig",
    "PublishedDataUnavailable",
    "Split",
    "TaskFileError",
    "UnknownTaskError",
    "find_task",
    "generate_splits",
    "generate_tasks",
    "load_split",
    "load_tasks",
    "published_task_file",
    "write_split",
    "row_to_task",
    "task_to_row",
    "write_tasks",
]

PUBLISHED_PACKAGE = "platoon_textcraft"
"""Import name of the package that ships the published task files."""
INSTALL_HINT = "pip install --no-deps --ignore-requires-python platoon-textcraft==0.3.0"
"""How to get the published files (`--no-deps`: we only need its data, not its runtime)."""


class PublishedDataUnavailable(FileNotFoundError):
    """The published task files are not installed."""


def published_task_file(split: Split) -> Path:
    """Path of a published split's JSONL inside the installed `platoon-textcraft` package.

    Found with `importlib.util.find_spec`, which locates the package without importing it.
    """
    _check_split(split)
    spec = importlib.util.find_spec(PUBLISHED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PublishedDataUnavailable(
            f"the published TextCraft-Synth tasks come with the {PUBLISHED_PACKAGE!r} package, "
            f"which is not installed; install it with: {INSTALL_HINT}"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "data" / f"textcraft_synth_{split}.jsonl"
        if path.is_file():
            return path
    raise PublishedDataUnavailable(
        f"{PUBLISHED_PACKAGE!r} is installed but has no textcraft_synth_{split}.jsonl; "
        f"reinstall the published version with: {INSTALL_HINT}"
    )


def load_split(split: str) -> list[Task]:
    """A published split: read from the installed package, else generated (same tasks); or a
    starter split (`sera.envs.textcraft.starter`, always generated)."""
    if is_starter_split(split):
        return starter_tasks(split)
    try:
        path = published_task_file(split)
    except PublishedDataUnavailable:
        return generate_tasks(split)
    return load_tasks(path)


def write_split(split: str, out: Path, *, generate: bool = True) -> int:
    """Write the tasks of split `split` (train or val) to the JSONL file `out` in the published
    format (`generate`: with our generator, else copied from the installed package); returns the
    number written. An unknown split is a ValueError, a folder at `out` an IsADirectoryError."""
    if split not in ("train", "val"):
        raise ValueError(f"unknown split {split!r}; known: train, val")
    if out.is_dir():
        raise IsADirectoryError(f"{out} is a folder; give the JSONL file to write, e.g. {out / 'tasks.jsonl'}")
    tasks = generate_tasks(split) if generate else load_split(split)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_tasks(tasks, out)
    return len(tasks)


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
