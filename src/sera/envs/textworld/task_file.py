"""Our TextWorld-Sync task files: JSONL, one `SyncTaskSpec` JSON object per line.

Writing is atomic (a temporary file in the same folder, then a rename), so a reader never sees
half a file, and an interrupted write leaves the old file intact. Every line ends with a newline.

Reading is strict (the shared skeleton in `sera.envs.task_file`): the first problem raises
`TaskFileError` naming the file, the 1-based line, the task id (when the row has one) and the
field, e.g.

    tasks.jsonl line 7 (task cookingworld_multidish_test_conflict_hard_0003): field family:
    unknown family 'fork-joinn'; allowed: fork_join, critical_path, ...

Checked: UTF-8 and JSON per line; an object per row; `task_id` a non-empty string, unique in the
file; `family` and `difficulty` among the known ones; then every field of `SyncTaskSpec` (types,
unknown keys, and the spec's own consistency rules). Blank lines at the end are ignored; a blank
line followed by more rows is an error.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sera.envs.task_file import TaskFileError, line_label, read_jsonl_rows
from sera.envs.textworld.spec import DIFFICULTIES, FAMILIES, SyncTaskSpec
from sera.types import Task


def spec_to_line(spec: SyncTaskSpec) -> str:
    """One file line (with its newline)."""
    return spec.model_dump_json() + "\n"


def write_task_file(specs: Iterable[SyncTaskSpec | Task], path: str | Path) -> int:
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
    return read_jsonl_rows(
        path, lambda row, line_no: parse_row(row, path=path, line_no=line_no),
        id_of=lambda spec: spec.task_id, id_field="task_id",
    )


def parse_row(row: Any, *, path: str | Path, line_no: int) -> SyncTaskSpec:
    """Validate one parsed row of our format."""
    if not isinstance(row, dict):
        raise TaskFileError(f"{line_label(path, line_no)}: expected a JSON object, got {_show(row)}")
    task_id = row.get("task_id")
    where = line_label(path, line_no, task_id if isinstance(task_id, str) and task_id else None)
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


def _got(row: dict[str, Any], key: str) -> str:
    return "nothing (missing)" if key not in row else _show(row[key])


def _show(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
