"""What `sera view PATH` reads: one rollout file, or the tree files of a run directory.

An evaluation run keeps its trees as `OUT/rollouts/<task>/<k>.json` and a training run as
`OUT/rollouts/step_NNNNN/<task>.<k>.json`; any other folder is searched for `*.json` files (so a
single `step_NNNNN` folder can be viewed on its own). Every failure is a `ViewError` whose one
line names the file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sera.types import RolloutTree

ROLLOUTS = "rollouts"
"""The trees' folder in both run layouts."""
RUN_FILES = frozenset({"run.json", "summary.json"})
"""JSON files of an evaluation run that are not trees (skipped when a folder is searched)."""
_STEP = re.compile(r"^step_(\d+)$")
_DIGITS = re.compile(r"(\d+)")


class ViewError(Exception):
    """The input cannot be viewed; the message is one line and names the file or folder."""


@dataclass(frozen=True)
class TreeFile:
    """A file found in a run directory that should hold a tree."""

    path: Path
    """Where it is."""
    rel: str
    """Its path relative to the folder viewed (what the index shows)."""
    step: int | None
    """The training step, when it sits in a `step_NNNNN` folder."""
    sample: int | None
    """Sample k, when the file is named `<k>.json` or `<task>.<k>.json`."""


@dataclass(frozen=True)
class RunFolder:
    """A run directory: what kind it is, its settings and its tree files."""

    kind: str
    """`eval`, `train` or `folder`."""
    run_info: dict[str, Any]
    """Settings from `run.json` (its scalars, nested ones as `a.b`), or empty."""
    files: list[TreeFile]
    """The tree files in natural order (`val.2` before `val.10`)."""


def read_tree(path: Path) -> RolloutTree:
    """The tree in `path`; a missing, corrupt or partial file is a one-line `ViewError`."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ViewError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return RolloutTree.from_json(data)
    except ValidationError as exc:
        problems = exc.errors()
        first = problems[0]
        where = ".".join(str(part) for part in first["loc"])
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        detail = f"{where}: {first['msg']}" if where else first["msg"]
        raise ViewError(f"{path}: not a readable rollout tree: {detail}{more}") from None


def scan_folder(folder: Path) -> RunFolder:
    """The tree files of a run directory (or of any folder holding trees); a folder without
    any is a `ViewError`."""
    if not folder.is_dir():
        raise ViewError(f"{folder}: no such file or folder")
    base = folder / ROLLOUTS if (folder / ROLLOUTS).is_dir() else folder
    paths = [
        p for p in base.rglob("*.json")
        if p.is_file() and not (p.parent == folder and p.name in RUN_FILES)
    ]
    if not paths:
        raise ViewError(f"{folder}: no rollout trees (*.json) in it or under it")
    files = [_tree_file(p, folder) for p in sorted(paths, key=lambda p: _natural(p.relative_to(folder)))]
    if (folder / "run.json").is_file():
        kind = "eval"
    elif any(f.step is not None for f in files):
        kind = "train"
    else:
        kind = "folder"
    return RunFolder(kind=kind, run_info=_run_info(folder / "run.json"), files=files)


def _tree_file(path: Path, folder: Path) -> TreeFile:
    step = next((int(m.group(1)) for part in path.parent.parts if (m := _STEP.match(part))), None)
    last = path.stem.rsplit(".", 1)[-1]
    return TreeFile(
        path=path, rel=path.relative_to(folder).as_posix(), step=step, sample=int(last) if last.isdigit() else None
    )


def _natural(rel: Path) -> list[tuple[int, str]]:
    # Task ids end in numbers (`textcraft_synth.val.10`): compare those as numbers.
    key: list[tuple[int, str]] = []
    for piece in _DIGITS.split(rel.as_posix()):
        key.append((int(piece), "") if piece.isdigit() else (-1, piece))
    return key


def _run_info(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"run.json": "unreadable"}
    if not isinstance(data, dict):
        return {}
    info: dict[str, Any] = {}
    for key, value in data.items():  # scalars, and the scalars of nested settings as `a.b`
        if isinstance(value, dict):
            info.update({f"{key}.{k}": v for k, v in value.items() if _scalar(v)})
        elif _scalar(value):
            info[key] = value
    return info


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
