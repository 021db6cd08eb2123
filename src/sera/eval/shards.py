"""`--shard i/n`: split one evaluation over several processes or machines.

**Partition.** Shard `i` of `n` (0 <= i < n) takes the tasks at positions `p` of the selected
task list (after `--task-id`, `--difficulty`, `--limit`, in the split's order) with
`p % n == i`. The partition depends only on the selection and `n`, so every shard computes it
alone; round-robin by position spreads each difficulty band and family (contiguous in the
splits) evenly over the shards.

**Layout.** A shard is an ordinary run directory (`sera.eval.store`) over its own tasks, at
`OUT/shards/<i>-of-<n>/`, plus `shard.json` (`ShardRecord`: which shard, how many samples, the
whole selection's task ids). Shards on one machine share `OUT`; shards on other machines write
their own `OUT` with the same structure. Each shard folder has its own lock, so shards run at
once and a killed shard resumes when its command is rerun. `sera eval --merge --out OUT
[--merge-from OTHER_OUT ...]` (`sera.eval.merge`) checks that the shards agree and cover every
selected task exactly once, and writes the merged run into `OUT`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sera.eval.errors import EvalSetupError
from sera.eval.store import write_atomically
from sera.types import Record, Task

SHARDS = "shards"
"""Folder of the shard run directories under `--out`."""
SHARD_FILE = "shard.json"
"""The shard's record inside its run directory."""
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_DIR = re.compile(r"^(\d+)-of-(\d+)$")


class ShardError(EvalSetupError):
    """A bad `--shard`, or shards that cannot be merged; the message is one line."""


@dataclass(frozen=True)
class ShardSpec:
    """Which part of the selection a process evaluates."""

    index: int
    """This shard, 0-based."""
    count: int
    """Number of shards."""

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        """`i/n` with 0 <= i < n; `ShardError` otherwise."""
        found = _SPEC.match(text)
        if not found:
            raise ShardError(f"--shard {text!r} is not i/n (e.g. 0/4: the first of four shards, counted from 0)")
        index, count = int(found.group(1)), int(found.group(2))
        if count < 1:
            raise ShardError(f"--shard {text}: the number of shards must be at least 1")
        if index >= count:
            raise ShardError(f"--shard {text}: shard index {index} is out of range for {count} shards (0..{count - 1})")
        return cls(index, count)

    @property
    def name(self) -> str:
        """The shard's folder name, `<i>-of-<n>`."""
        return f"{self.index}-of-{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def take(self, tasks: list[Task]) -> list[Task]:
        """This shard's tasks: positions p with p % count == index."""
        return tasks[self.index :: self.count]


class ShardRecord(Record):
    """What `shard.json` holds: enough to check a merge without the shard's command line."""

    index: int
    """This shard, 0-based."""
    count: int
    """Number of shards."""
    samples: int
    """Rollouts per task."""
    selection: list[str]
    """Task ids of the whole selection, in order (this shard's are `selection[index::count]`)."""

    @property
    def spec(self) -> ShardSpec:
        """The shard as `ShardSpec`."""
        return ShardSpec(self.index, self.count)

    @property
    def task_ids(self) -> list[str]:
        """This shard's task ids."""
        return self.selection[self.index :: self.count]

    def selection_sha256(self) -> str:
        """sha256 of the selection's ids, to compare selections briefly."""
        return hashlib.sha256("\n".join(self.selection).encode("utf-8", "surrogatepass")).hexdigest()


def shard_dir(out_dir: Path, spec: ShardSpec) -> Path:
    """The run directory of shard `spec` under `out_dir`."""
    return out_dir / SHARDS / spec.name


def shard_dirs(out_dir: Path) -> list[Path]:
    """The shard run directories under `out_dir` (by count, then index)."""
    root = out_dir / SHARDS
    found = []
    for path in root.iterdir() if root.is_dir() else ():
        match = _DIR.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(2)), int(match.group(1)), path))
    return [path for _, _, path in sorted(found)]


def write_record(run_dir: Path, record: ShardRecord) -> None:
    """Record which shard `run_dir` is (replacing an older record: a grown selection is a resume)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(run_dir / SHARD_FILE, record.model_dump_json(indent=1))


def read_record(run_dir: Path) -> ShardRecord:
    """The shard record of `run_dir`; `ShardError` naming the file when it is missing or unreadable."""
    path = run_dir / SHARD_FILE
    if not path.is_file():
        raise ShardError(f"{path} is missing: {run_dir} is not a shard folder (rerun its `sera eval --shard` command)")
    try:
        record = ShardRecord.model_validate_json(path.read_bytes())
    except (ValidationError, ValueError) as exc:
        raise ShardError(f"{path} is not a shard record ({str(exc).splitlines()[0]}); rerun the shard") from None
    if not 0 <= record.index < record.count or _DIR.match(run_dir.name) and run_dir.name != record.spec.name:
        raise ShardError(f"{path} says shard {record.spec}, which does not match its folder {run_dir.name}")
    return record


def describe_ids(ids: list[str], shown: int = 5) -> str:
    """A few ids for a one-line message: `a, b, c and 7 more`."""
    head = ", ".join(ids[:shown])
    return head if len(ids) <= shown else f"{head} and {len(ids) - shown} more"
