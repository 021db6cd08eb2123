"""What every environment's JSONL task file shares: the error, and the reader's skeleton.

A task file is UTF-8 text with one JSON object per line. `read_jsonl_rows` reads one strictly:
blank lines at the end are ignored, a blank line followed by more rows is an error (it usually
means files were pasted together badly), an empty file "contains no tasks", and a repeated task
id is refused naming the line that had it first. Task ids must be usable as keys of result
files: non-empty, at most `MAX_TASK_ID_CHARS` characters, without control characters (NUL, C0,
DEL, C1) or lone surrogates (`check_task_id`). JSON nested too deeply to parse is a row error,
not a `RecursionError`. Each environment maps a parsed row to its own
record and checks its fields; every problem is a `TaskFileError` whose message names the file,
the 1-based line and, where there is one, the field and the offending value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

MAX_TASK_ID_CHARS = 200
"""Longest task id a task file may hold (result file names are derived from ids)."""

_UNSAFE_ID_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class TaskFileError(ValueError):
    """A task file or row is malformed; the message names file, line, field and value."""


def line_label(path: str | Path, line_no: int, task_id: str | None = None) -> str:
    """`tasks.jsonl line 7` or `tasks.jsonl line 7 (task t.3)`: how errors name a row."""
    return f"{path} line {line_no}" + (f" (task {task_id})" if task_id else "")


def read_jsonl_rows(
    path: str | Path,
    to_record: Callable[[Any, int], T],
    *,
    id_of: Callable[[T], str],
    id_field: str,
) -> list[T]:
    """Parse every row of a JSONL task file; `TaskFileError` at the first problem.

    `to_record(row, line_no)` validates one parsed JSON value and returns the environment's
    record (raising `TaskFileError` itself); `id_of` gives the record's task id, which must be
    unique; `id_field` is the row key that holds it (named in errors). A missing file stays a
    `FileNotFoundError`, not a format error.
    """
    path = Path(path)
    records: list[T] = []
    first_line: dict[str, int] = {}
    id_pattern = re.compile(rf'"{re.escape(id_field)}"\s*:\s*"([^"\\]*)"')
    for line_no, text in enumerate(_rows(path), start=1):
        if not text.strip():
            raise TaskFileError(f"{line_label(path, line_no)}: blank line between rows")
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            found = id_pattern.search(text)  # name the task when its id is still readable
            where = line_label(path, line_no, found.group(1) if found else None)
            raise TaskFileError(f"{where}: invalid JSON: {err.msg} (column {err.colno})") from None
        except RecursionError:  # e.g. 100,000 `[`: the parser's stack, not a traceback for the user
            raise TaskFileError(f"{line_label(path, line_no)}: invalid JSON: nested too deeply") from None
        try:
            record = to_record(row, line_no)
        except RecursionError:  # a deep value inside a field: the record's validator recursed
            raise TaskFileError(f"{line_label(path, line_no)}: a value is nested too deeply") from None
        task_id = id_of(record)
        check_task_id(task_id, path, line_no, id_field)
        if task_id in first_line:
            raise TaskFileError(
                f"{line_label(path, line_no)}: field {id_field}: duplicate id {task_id!r} "
                f"(first on line {first_line[task_id]})"
            )
        first_line[task_id] = line_no
        records.append(record)
    return records


def check_task_id(task_id: object, path: str | Path, line_no: int, id_field: str = "id") -> str:
    """`task_id` if it is a usable id; `TaskFileError` naming the line, field and value if not."""
    where = f"{line_label(path, line_no)}: field {id_field}"
    if not isinstance(task_id, str) or not task_id.strip():
        raise TaskFileError(f"{where}: a task id must be a non-empty string, got {task_id!r}")
    if len(task_id) > MAX_TASK_ID_CHARS:
        raise TaskFileError(f"{where}: task id is {len(task_id)} characters long (at most {MAX_TASK_ID_CHARS}): {task_id[:40]!r}...")
    bad = _UNSAFE_ID_CHARS.search(task_id)
    if bad:
        raise TaskFileError(f"{where}: task id {task_id!r} contains the control character {bad.group()!r}")
    return task_id


def _rows(path: Path) -> list[str]:
    """The file's lines without trailing blank ones (nor `\\r` line ends); refuses an empty file."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line_no = data.count(b"\n", 0, err.start) + 1
        raise TaskFileError(f"{line_label(path, line_no)}: not UTF-8 text") from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise TaskFileError(f"{path}: contains no tasks")
    return lines

