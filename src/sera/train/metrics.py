"""`metrics.jsonl`: one JSON object per training step, appended, flushed and fsynced.

The file is the run's record of what each step did (trainer-design §3.9). On resume it is cut
back to the steps the checkpoint covers (`truncate_after`), so a resumed run neither repeats nor
loses a line; the checkpoint keeps a copy of its own step's line for the case where the process
died between the checkpoint and the append (`ensure_last`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
"""Name of the metrics file in the run directory."""


def _json_safe(value: Any) -> Any:
    """NaN and infinities as null (JSON has none); mappings and sequences recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class MetricsSink:
    """Appends one line per step to `path` (created with its folder when missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: Mapping[str, Any]) -> None:
        """Write `record` as one line; fsync so that a line the run reported is on disk."""
        line = json.dumps(_json_safe(record), sort_keys=True, allow_nan=False)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read(self) -> list[dict[str, Any]]:
        """Every complete line (a torn last line, from a crash mid-write, is ignored)."""
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break
        return out

    def truncate_after(self, step: int) -> int:
        """Keep only the lines with `step < step` (in order, torn lines dropped); returns how many
        lines were removed."""
        lines = self.read()
        kept = [r for r in lines if int(r.get("step", -1)) < step]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept), encoding="utf-8")
        os.replace(tmp, self.path)
        return len(lines) - len(kept)

    def ensure_last(self, record: Mapping[str, Any] | None) -> None:
        """Append `record` (a checkpoint's copy of its step's line) unless that step is there."""
        if record is None:
            return
        if not any(r.get("step") == record.get("step") for r in self.read()):
            self.append(record)
