"""The on-disk layout of an evaluation, and reading and writing its trees.

    OUT/run.json                    the run's fingerprint (`sera.eval.fingerprint`)
    OUT/run.lock                    held while an evaluation runs (`sera.eval.lock`)
    OUT/summary.json                the results (`sera.eval.summary.EvalSummary`)
    OUT/rollouts/<task>/<k>.json    the tree of sample k of a task (`RolloutTree`, seed inside)
    OUT/rollouts/<task>/<k>.error.txt   why that rollout crashed (traceback), until it is redone

`<task>` is `sera.eval.names.task_file_name(task_id)`. Folders written by the first layout
(`rollouts/<task_id>.json`, one unseeded sample per task, no fingerprint) are refused rather
than read: nothing in them says which run wrote them, so resuming them could mix two runs.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from pydantic import ValidationError

from sera.eval.errors import EvalSetupError
from sera.eval.fingerprint import RunFingerprint
from sera.eval.json_safe import make_json_safe
from sera.eval.names import task_file_name
from sera.text_safety import clean_text
from sera.types import RolloutTree

ROLLOUTS = "rollouts"
"""Folder of the trees under `--out`."""
RUN_FILE = "run.json"
"""The fingerprint's file under `--out`."""


def task_dir(out_dir: Path, task_id: str) -> Path:
    """The folder of a task's samples."""
    return out_dir / ROLLOUTS / task_file_name(task_id)


def tree_path(out_dir: Path, task_id: str, sample: int = 0) -> Path:
    """Where the tree of sample `sample` of `task_id` is saved."""
    return task_dir(out_dir, task_id) / f"{sample}.json"


def error_path(out_dir: Path, task_id: str, sample: int = 0) -> Path:
    """Where a crashed rollout's traceback is kept until the rollout is redone."""
    return task_dir(out_dir, task_id) / f"{sample}.error.txt"


def check_out_dir(out_dir: Path) -> None:
    """Create `out_dir` if needed and make sure files can be written in it; one-line errors."""
    if out_dir.exists() and not out_dir.is_dir():
        raise EvalSetupError(f"--out {out_dir} is a file, not a folder; give a folder for rollouts/ and summary.json")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as exc:
        raise EvalSetupError(f"--out {out_dir} is not a writable folder: {exc.strerror or exc}") from None


def check_layout(out_dir: Path) -> None:
    """Refuse a folder written by the first layout (`rollouts/<task_id>.json`)."""
    rollouts = out_dir / ROLLOUTS
    if not rollouts.is_dir():
        return
    old = [p for p in rollouts.iterdir() if p.is_file() and p.name.endswith((".json", ".error.txt"))]
    if old:
        raise EvalSetupError(
            f"{out_dir} holds results in the old layout ({old[0].relative_to(out_dir)}: one unseeded tree per task, "
            f"no run.json); evaluate into a new --out (the old results stay readable as they are)"
        )


def read_fingerprint(out_dir: Path) -> RunFingerprint | None:
    """The fingerprint recorded under `out_dir`, None when there is none yet."""
    path = out_dir / RUN_FILE
    if not path.exists():
        return None
    try:
        return RunFingerprint.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise EvalSetupError(f"{path} is not a run fingerprint ({exc.errors()[0]['msg']}); use another --out") from None


def check_fingerprint(out_dir: Path, fingerprint: RunFingerprint) -> None:
    """Refuse `out_dir` when it records a run with another fingerprint, naming the differences."""
    recorded = read_fingerprint(out_dir)
    if recorded is None:
        return
    differences = recorded.differences(fingerprint)
    if differences:
        raise EvalSetupError(
            f"{out_dir} holds another run ({'; '.join(differences)}); "
            f"rerun with the same settings to resume it, or pass --new-run to write to a new folder"
        )


def new_run_dir(out_dir: Path, fingerprint: RunFingerprint) -> Path:
    """`out_dir` if it is free or holds this run, else the first `OUT.2`, `OUT.3`, ... that is:
    the same command with `--new-run` twice resumes the same new folder."""
    candidate, n = out_dir, 1
    while True:
        if candidate.is_file():
            pass
        elif not candidate.exists() or not any(candidate.iterdir()):
            return candidate
        else:
            try:
                check_layout(candidate)
                recorded = read_fingerprint(candidate)
            except EvalSetupError:
                recorded = None
            else:
                if recorded is not None and not recorded.differences(fingerprint):
                    return candidate
        n += 1
        candidate = out_dir.with_name(f"{out_dir.name}.{n}")


def write_fingerprint(out_dir: Path, fingerprint: RunFingerprint) -> None:
    """Record `fingerprint` under `out_dir` (once: a recorded one is never replaced)."""
    path = out_dir / RUN_FILE
    if not path.exists():
        write_atomically(path, fingerprint.model_dump_json(indent=2))


def load_tree(path: Path, task_id: str, seed: int) -> RolloutTree | None:
    """The saved tree at `path` if it is readable and is the rollout asked for, else None
    (the reason printed on stderr: it will be redone)."""
    if not path.exists():
        return None
    try:
        tree = RolloutTree.from_json(path.read_bytes())
    except (ValueError, OSError) as exc:
        print(f"warning: {path} is unreadable and will be redone: {str(exc).splitlines()[0]}", file=sys.stderr)
        return None
    if tree.task_id != clean_text(task_id)[0]:  # trees are saved JSON-safe, their task id too
        print(f"warning: {path} holds task {tree.task_id!r}, not {task_id!r}; it will be redone", file=sys.stderr)
        return None
    if tree.seed != seed:
        print(f"warning: {path} has seed {tree.seed}, not this run's {seed}; it will be redone", file=sys.stderr)
        return None
    return tree


def save_tree(path: Path, tree: RolloutTree) -> tuple[RolloutTree, int]:
    """Write `tree` (made JSON-safe first) to `path`; the tree as saved and how many of its
    strings had to be escaped."""
    safe, escaped = make_json_safe(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, safe.to_json())
    return safe, escaped


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a killed run never leaves half a file."""
    partial = path.with_name(f"{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
