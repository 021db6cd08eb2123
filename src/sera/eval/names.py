"""File names under an evaluation's `--out`, derived from task ids.

A task id comes from a task file and may hold anything a JSON string can (`../../x`, `/`, NUL,
hundreds of characters), so it is never used as a path as it is. A plain id (letters, digits,
`.`, `_`, `-`; starting with a letter or digit; at most `PLAIN_MAX_CHARS`) is its own name, so
the common case stays readable. Any other id becomes a readable prefix of its safe characters,
`+`, and the first `HASH_CHARS` hex digits of the id's sha256: `+` never occurs in a plain name,
so two ids never share a name (short of a sha256 prefix collision), and the name has no path
separator, is never `.` or `..`, and is at most `PREFIX_CHARS + 1 + HASH_CHARS` characters.
"""

from __future__ import annotations

import hashlib
import re

PLAIN_MAX_CHARS = 100
"""Longest id used as its own file name."""
PREFIX_CHARS = 60
"""Longest readable prefix of a hashed name."""
HASH_CHARS = 16
"""Hex digits of the id's sha256 in a hashed name (64 bits)."""

_PLAIN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{PLAIN_MAX_CHARS - 1}}}")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")


def task_file_name(task_id: str) -> str:
    """The file-system name that stands for `task_id` (see the module docstring)."""
    if _PLAIN.fullmatch(task_id):
        return task_id
    prefix = _UNSAFE_RUN.sub("_", task_id)[:PREFIX_CHARS].lstrip(".") or "task"
    # surrogatepass: an id with a lone surrogate still hashes (it cannot be encoded otherwise).
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{prefix}+{digest}"
