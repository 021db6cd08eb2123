"""Our TextWorld-Sync task files: JSONL, one `SyncTaskSpec` JSON object per line.

Writing is atomic (a temporary file in the same folder, then a rename), so a reader never sees
half a file, and an interrupted write leaves the old file intact. Every line ends with a newline.

Reading is strict: the first problem raises `TaskFileError` naming the file, the 1-based line,
the task id (when the row has one) and the field, e.g.

    tasks.jsonl line 7 (task cookingworld_multidish_test_conflict_hard_0003): field family:
    unknown family 'fork-joinn'; allowed: fork_join, critical_path, ...

Checked: UTF-8 and JSON per line; an object per row; `task_id` a non-empty string, unique in the
file; `family` and `difficulty` among the known ones; then every field of `SyncTaskSpec` (types,
unknown keys, and the spec's own consistency rules). Blank lines at the end are ignored; a blank
line followed by more rows is an error.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sera.envs.textworld.spec import DIFFICULTIES, FAMILIES, SyncTaskSpec
from sera.types import Task

_TASK_ID = re.compile(r'"task_id"\s*:\s*"([^"\\]*)"')


class TaskFileError(ValueError):
    """A task file or row is malformed; the message names file, line, task id and field."""


def spec_to_line(spec: SyncTaskSpec) -> str:
    """One file line (with its newline)."""
    return spec.model_dump_json() + "\n"


def write_task_file(path: str | Path, specs: Iterable[SyncTaskSpec | Task]) -> int:
    """Write specs (or runtime tasks carrying one) atomically; returns the number written.

    Duplicate task ids are refused before anything is written.
    """
    path = Path(path)
    lines, seen = [], set()
    for item in specs:
        spec = SyncTaskSpec.from_task(item) if isinstance(item, Task) else item
        if not isinstance(spec, SyncTaskSpec):
            raise TypeError(f"expected SyncTaskSpec or Task, got {type(item).__name__}")
        if spec.task_id in seen:
            raise ValueError(f"duplicate task id {spec.task_id!r}; nothing was written to {path}")
        seen.add(spec.task_id)
        lines.append(spec_to_line(spec))
    atomic_write_bytes(path, "".join(lines).encode("utf-8"))
    return len(lines)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary sibling file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_task_file(path: str | Path) -> list[SyncTaskSpec]:
    """Read and validate our JSONL; `TaskFileError` at the first problem."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise TaskFileError(f"{path}: not UTF-8 text (byte {err.start})") from None
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise TaskFileError(f"{path}: contains no tasks")
    specs: list[SyncTaskSpec] = []
    first_line: dict[str, int] = {}
    for line_no, line in enumerate(lines, start=1):
        spec = parse_line(line, path=path, line_no=line_no)
        if spec.task_id in first_line:
            raise TaskFileError(
                f"{_where(path, line_no, spec.task_id)}: field task_id: duplicate id "
                f"(first on line {first_line[spec.task_id]})"
            )
        first_line[spec.task_id] = line_no
        specs.append(spec)
    return specs


def parse_line(line: str, *, path: str | Path, line_no: int) -> SyncTaskSpec:
    """Validate one line of our format."""
    if not line.strip():
        raise TaskFileError(f"{path} line {line_no}: blank line between rows")
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        found = _TASK_ID.search(line)
        task = f" (task {found.group(1)})" if found else ""
        raise TaskFileError(f"{path} line {line_no}{task}: invalid JSON: {err.msg} (column {err.colno})") from None
    return parse_row(row, path=path, line_no=line_no)


def parse_row(row: Any, *, path: str | Path, line_no: int) -> SyncTaskSpec:
    """Validate one parsed row of our format."""
    if not isinstance(row, dict):
        raise TaskFileError(f"{path} line {line_no}: expected a JSON object, got {_show(row)}")
    task_id = row.get("task_id")
    where = _where(path, line_no, task_id if isinstance(task_id, str) and task_id else None)
    if not isinstance(task_id, str) or not task_id.strip():
        raise TaskFileError(f"{where}: field task_id: expected a non-empty string, got {_got(row, 'task_id')}")
    for field, allowed in (("family", FAMILIES), ("difficulty", DIFFICULTIES)):
        if field in row and row[field] not in allowed:
            raise TaskFileError(
                f"{where}: field {field}: unknown {field} {_show(row[field])}; allowed: {', '.join(allowed)}"
            )
    try:
        return SyncTaskSpec.model_validate(row, strict=True)  # strict: no '5' -> 5 coercion
    except ValidationError as err:
        raise TaskFileError(f"{where}: {describe_validation_error(err)}") from None


def describe_validation_error(err: ValidationError) -> str:
    """`field dishes[0].ingredients[1].cook: Input should be ..., got 'boiledd'` for the first error."""
    first = err.errors()[0]
    field = dotted(first["loc"]) or "(task)"
    message = first["msg"]
    if first["type"] != "missing" and first["loc"]:
        message += f", got {_show(first.get('input'))}"
    return f"field {field}: {message}"


def dotted(loc: tuple[int | str, ...]) -> str:
    """`('dishes', 0, 'cook')` -> `dishes[0].cook`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _where(path: str | Path, line_no: int, task_id: str | None) -> str:
    return f"{path} line {line_no}" + (f" (task {task_id})" if task_id else "")


def _got(row: dict[str, Any], key: str) -> str:
    return "nothing (missing)" if key not in row else _show(row[key])


def _show(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
