"""Finding run directories below the paths given to `sera report`.

A directory is a **training run** when it holds `config.yaml` or `metrics.jsonl` (`sera train`),
and an **evaluation run** when it holds `run.json`, `summary.json` or a `rollouts/<task>/<k>.json`
tree (`sera eval`). Every path is searched below, so a folder of many runs, or one written by
`sera eval --runs N` / `--shard i/n` (one ordinary run directory per seed or shard), is accepted
as it is. An evaluation directory with evaluation runs below it is a container: its own files
(the `--runs` mean ± std, say) are not read, the runs below are, so nothing is counted twice;
except a merged run (its own `summary.json`, runs below only in `shards/`), which is read
instead of its shards.
`rollouts/` and `checkpoints/` folders are never searched (they hold no runs, and can be huge).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sera.reports.records import Problem

TRAIN_MARKERS = ("config.yaml", "metrics.jsonl")
"""Files that make a directory a training run."""
EVAL_MARKERS = ("run.json", "summary.json")
"""Files that make a directory an evaluation run."""
NOT_SEARCHED = frozenset({"rollouts", "checkpoints"})
"""Folders that are never searched for runs."""
SHARDS = "shards"
"""Folder of a run's shards (`sera eval --shard i/n`: `<RUN>/shards/<i>-of-<n>/`)."""


@dataclass
class Found:
    """The run directories found below the inputs, in input order."""

    evals: list[Path] = field(default_factory=list)
    """Evaluation run directories."""
    trains: list[Path] = field(default_factory=list)
    """Training run directories."""
    problems: list[Problem] = field(default_factory=list)
    """Inputs that are not, or hold no, run directories."""
    notes: list[str] = field(default_factory=list)
    """Things worth saying that are not errors (containers whose own files were skipped)."""


def find_runs(paths: list[Path]) -> Found:
    """Every evaluation and training run directory at or below `paths` (each listed once)."""
    found = Found()
    seen: set[Path] = set()
    for path in paths:
        if not path.exists():
            found.problems.append(Problem(str(path), "no such file or directory"))
            continue
        if path.is_file():
            if path.name not in TRAIN_MARKERS + EVAL_MARKERS:
                found.problems.append(Problem(str(path), "not a run directory or a run's summary.json / run.json / metrics.jsonl"))
                continue
            path = path.parent  # a run's own file stands for its directory
        before, already = len(found.evals) + len(found.trains), path.resolve() in seen
        _visit(path, found, seen)
        if len(found.evals) + len(found.trains) == before and not already:
            found.problems.append(Problem(str(path), "holds no evaluation or training run (no run.json, summary.json, rollouts/, config.yaml or metrics.jsonl)"))
    return found


def kind_of(directory: Path) -> str | None:
    """`train`, `eval` or None for a directory that is not itself a run."""
    if any((directory / name).is_file() for name in TRAIN_MARKERS):
        return "train"
    if any((directory / name).is_file() for name in EVAL_MARKERS) or _has_eval_trees(directory / "rollouts"):
        return "eval"
    return None


def _visit(directory: Path, found: Found, seen: set[Path]) -> list[Path]:
    """Add the runs at and below `directory`; returns the evaluation runs found at or below it."""
    key = directory.resolve()
    if key in seen:
        return []
    seen.add(key)
    kind = kind_of(directory)
    below: list[Path] = []
    for child in _subdirs(directory):
        below += _visit(child, found, seen)
    if kind == "train":
        found.trains.append(directory)
    elif kind == "eval" and not below:
        found.evals.append(directory)
        return [directory]
    elif kind == "eval" and (directory / "summary.json").is_file() and all(SHARDS in p.relative_to(directory).parts[:1] for p in below):
        # A merged run (`sera eval --merge`) beside its shards: the merge checked them, read it alone.
        found.evals[:] = [p for p in found.evals if p not in below]
        found.evals.append(directory)
        found.notes.append(f"{directory}: a merged run; its {len(below)} shards under {SHARDS}/ were not read again")
        return [directory]
    elif kind == "eval":
        found.notes.append(f"{directory}: holds evaluation runs below it; its own files were not read (the runs below were)")
    return below


def _subdirs(directory: Path) -> list[Path]:
    try:
        children = sorted(directory.iterdir())
    except OSError:
        return []
    return [c for c in children if c.is_dir() and not c.is_symlink() and c.name not in NOT_SEARCHED and not c.name.startswith(".")]


def _has_eval_trees(rollouts: Path) -> bool:
    """True when `rollouts/` has the evaluation layout: `<task>/<k>.json` (training's is `step_*/`)."""
    if not rollouts.is_dir():
        return False
    for task in rollouts.iterdir():
        if task.is_dir() and not task.name.startswith("step_") and any(p.name.split(".")[0].isdigit() for p in task.iterdir()):
            return True
    return False
