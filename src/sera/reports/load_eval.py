"""Reading one evaluation directory into an `EvalRun`.

`run.json` says what the run was (its fingerprint) and `summary.json` what it scored. Keys that
this version's records do not know (written by a newer `sera eval`: `best_of`, `shard`, ...) are
kept as settings rather than refused, so a report never needs the writer's exact version. When
`summary.json` is missing or unreadable but trees exist, the summary is recomputed from them with
`sera.eval.summary.summarise`; tasks that never left a tree or an error file are then unknown to
the report and not counted (said in the problem line).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from sera.envs.registry import get_env
from sera.eval.failures import Failure, classify, failure
from sera.eval.names import task_file_name
from sera.eval.seeds import sample_seed
from sera.eval.summary import EvalSummary, SampleKey, summarise
from sera.reports.records import EvalRun, Problem
from sera.types import RolloutTree, Task

IDENTITY_KEYS = frozenset({"version", "env", "source", "seed", "shard"})
"""run.json keys that are not settings: who the run is, not what it depends on."""


def load_eval(directory: Path) -> tuple[EvalRun | None, list[Problem]]:
    """The run in `directory` (None when nothing usable is there) and the problems met."""
    problems: list[Problem] = []
    run = _read_json(directory / "run.json", problems)
    raw_summary = _read_json(directory / "summary.json", problems)
    task_dirs = _task_dirs(directory)
    summary, extras = _parse_summary(directory / "summary.json", raw_summary, problems)
    recomputed = False
    if summary is None:
        if run is None or not task_dirs:
            why = "no run.json" if run is None else "no trees under rollouts/"
            problems.append(Problem(str(directory), f"no usable summary.json and nothing to recompute it from ({why}); left out"))
            return None, problems
        summary = _recompute(directory, run, task_dirs, problems)
        if summary is None:
            return None, problems
        recomputed = True
        problems = _one_line_per_file(problems)
    if not summary.complete:
        problems.append(Problem(str(directory / "summary.json"), f"partial: {summary.finished_rollouts} of "
                                f"{summary.planned_rollouts} rollouts finished (the run is going, or was stopped); "
                                "counted as it stands, rerun its sera eval command to finish it"))
    if run is None:
        problems.append(Problem(str(directory / "run.json"), "missing: the run's settings are unknown; compared by environment, split, policy and seed only"))
        run = {"env": summary.env, "source": summary.split, "policy": summary.policy, "rules": summary.rules, "seed": summary.seed}
    if run.get("env") != summary.env or run.get("source") != summary.split:
        problems.append(Problem(str(directory / "summary.json"), f"is for {summary.env}/{summary.split} but run.json says {run.get('env')}/{run.get('source')}; left out"))
        return None, problems
    best_of = _best_of(run.get("best_of") or (raw_summary or {}).get("best_of"), directory, problems)
    settings = flatten({k: v for k, v in run.items() if k not in IDENTITY_KEYS})
    settings["best_of"] = best_of
    seed = run.get("seed", summary.seed)
    shard_record = _read_json(directory / "shard.json", problems) if (directory / "shard.json").is_file() else None
    shard = _shard(shard_record if shard_record is not None else run.get("shard", extras.get("shard")))
    selection = (raw_summary or {}).get("best_of")
    return EvalRun(
        path=directory, env=summary.env, source=summary.split, policy=summary.policy, model=run.get("model"),
        seed=seed if isinstance(seed, int) else None, best_of=best_of, shard=shard, settings=settings,
        summary=summary, recomputed=recomputed, task_dirs=frozenset(task_dirs),
        best_of_record=selection if isinstance(selection, dict) else None,
    ), problems


def _one_line_per_file(problems: list[Problem]) -> list[Problem]:
    """Problems of one file joined into one line (`unreadable (...); recomputed from ...`)."""
    by_path: dict[str, list[str]] = {}
    for p in problems:
        by_path.setdefault(p.path, []).append(p.message)
    return [Problem(path, "; ".join(messages)) for path, messages in by_path.items()]


def _read_json(path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_bytes())
    except (ValueError, OSError) as exc:
        problems.append(Problem(str(path), f"unreadable ({str(exc).splitlines()[0]})"))
        return None
    if not isinstance(value, dict):
        problems.append(Problem(str(path), f"holds a JSON {type(value).__name__}, not an object"))
        return None
    return value


def _parse_summary(path: Path, raw: dict[str, Any] | None, problems: list[Problem]) -> tuple[EvalSummary | None, dict[str, Any]]:
    """The summary (keys this version does not know set aside as extras) and those extras."""
    if raw is None:
        return None, {}
    known, extras = _split_known(raw, EvalSummary)
    try:
        return EvalSummary.model_validate(known), extras
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        problems.append(Problem(str(path), f"not an evaluation summary ({where}: {error['msg']})"))
        return None, extras


def _split_known(raw: dict[str, Any], model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    fields = model.model_fields
    return {k: v for k, v in raw.items() if k in fields}, {k: v for k, v in raw.items() if k not in fields}


def _task_dirs(directory: Path) -> list[str]:
    rollouts = directory / "rollouts"
    if not rollouts.is_dir():
        return []
    return sorted(p.name for p in rollouts.iterdir() if p.is_dir())


def _best_of(value: Any, directory: Path, problems: list[Problem]) -> int:
    """N of best-of-N: an int, a mapping with `n` (`BestOf.record()`), or a summary's report with
    `settings.n`; absent means 1."""
    if isinstance(value, dict) and isinstance(value.get("settings"), dict):
        value = value["settings"]
    if isinstance(value, dict):
        value = value.get("n", value.get("N"))
    if value is None:
        return 1
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    problems.append(Problem(str(directory / "run.json"), f"best_of {value!r} is not a positive integer; read as 1"))
    return 1


def _shard(value: Any) -> str | None:
    """`i/n` from a string, an `[i, n]` pair or a mapping with index/count (or i/n)."""
    if value is None:
        return None
    if isinstance(value, dict):
        index, count = value.get("index", value.get("i")), value.get("count", value.get("n"))
        return f"{index}/{count}"
    if isinstance(value, list | tuple) and len(value) == 2:
        return f"{value[0]}/{value[1]}"
    return str(value)


def flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as `a.b` keys (lists as tuples, so values are hashable)."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            flat.update(flatten(item, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = tuple(item) if isinstance(item, list) else item  # hashable
    return flat


# -- recomputing a summary from the trees ------------------------------------------------------------


@lru_cache(maxsize=8)
def _tasks_of(env: str, source: str, from_file: bool, rules: str | None) -> tuple[Task, ...]:
    spec = get_env(env)
    return tuple(spec.load_file(Path(source), rules=rules) if from_file else spec.load_split(source, rules=rules))


def _recompute(directory: Path, run: dict[str, Any], task_dirs: list[str], problems: list[Problem]) -> EvalSummary | None:
    """The summary of the trees under `directory`, as `sera eval` would have written it."""
    env, source, rules, seed = run.get("env"), run.get("source"), run.get("rules"), run.get("seed", 0)
    try:
        all_tasks = _tasks_of(str(env), str(source), run.get("tasks_file_sha256") is not None, rules)
    except (KeyError, ValueError, OSError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        problems.append(Problem(str(directory / "run.json"), f"cannot load the tasks of {env}/{source} to recompute the summary ({message}); left out"))
        return None
    by_name = {task_file_name(t.id): t for t in all_tasks}
    tasks: list[Task] = []
    trees: dict[SampleKey, RolloutTree] = {}
    failures: dict[SampleKey, Failure] = {}
    samples = 1
    for name in task_dirs:
        folder = directory / "rollouts" / name
        task = by_name.get(name)
        if task is None:
            problems.append(Problem(str(folder), f"is not a task of {env}/{source}; left out"))
            continue
        tasks.append(task)
        for path in sorted(folder.iterdir()):
            k_text, _, rest = path.name.partition(".")
            if not k_text.isdigit() or rest not in ("json", "error.txt"):
                continue
            key = (task.id, int(k_text))
            samples = max(samples, key[1] + 1)
            if rest == "error.txt":
                failures.setdefault(key, failure("crashed", _last_line(path)))
                continue
            tree = _read_tree(path, task, sample_seed(seed, task.id, key[1]), problems)
            if tree is None:
                failures[key] = failure("unreadable", f"{path.name} could not be read")
                continue
            trees[key] = tree
            failures.pop(key, None)  # a tree supersedes a stale crash file
            if (problem := classify(tree)) is not None:
                failures[key] = problem
    if not tasks:
        problems.append(Problem(str(directory / "rollouts"), "holds no tree of a known task; left out"))
        return None
    order = {t.id: i for i, t in enumerate(all_tasks)}
    tasks.sort(key=lambda t: order[t.id])
    done = list(trees.values())
    wall = max(t.started_at + t.wall_time_s for t in done) - min(t.started_at for t in done) if done else 0.0
    problems.append(Problem(str(directory / "summary.json"), f"recomputed from the trees of {len(tasks)} tasks (tasks that left no file are not counted; wall time from the trees' start and end)"))
    return summarise(tasks, trees, env=str(env), split=str(source), policy=str(run.get("policy")), wall_time_s=wall,
                     failures=failures, samples=samples, seed=seed, rules=rules)


def _read_tree(path: Path, task: Task, seed: int, problems: list[Problem]) -> RolloutTree | None:
    try:
        tree = RolloutTree.from_json(path.read_bytes())
    except (ValueError, OSError) as exc:
        problems.append(Problem(str(path), f"corrupt rollout ({str(exc).splitlines()[0]}); counted as an error"))
        return None
    if tree.seed != seed:
        problems.append(Problem(str(path), f"has seed {tree.seed}, not the run's {seed} for this sample; counted as an error"))
        return None
    return tree


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return "the rollout crashed"
    return lines[-1] if lines else "the rollout crashed"
