"""Reading one training directory (`sera train --out`) into a `TrainRun`.

`config.yaml` is read as plain YAML (not through `sera.train.config`, whose validation would
refuse a run written by an older or newer version over one key the report does not need).
`metrics.jsonl` is read line by line, generically: metric names grow as the loop does, so
nothing here depends on more than `step`, `stage`, `trained`, `loss`, `root_success` and the
`time/*` prefix. Usage counters come from the step's metrics when the loop records them (per
step, summed over steps): `counters/<name>`, `usage/<name>` or a bare counter name, and the role
names of `METRIC_ALIASES` (`calls/judge`, `tokens/judge/prompt`, ...); otherwise from the trees
saved under `rollouts/step_*/`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sera.counters import Counter
from sera.reports.load_eval import flatten
from sera.reports.records import Problem, TrainRun

COUNTER_NAMES = frozenset(c.value for c in Counter)
"""Usage counters a metrics key or a tree may hold."""
COUNTER_PREFIXES = ("counters", "usage", "")
"""Prefixes under which metrics.jsonl may hold a counter (per step)."""
METRIC_ALIASES: dict[str, str] = {
    "calls/act": Counter.POLICY_CALLS, "tokens/act/prompt": Counter.PROMPT_TOKENS,
    "tokens/act/completion": Counter.COMPLETION_TOKENS, "calls/verifier": Counter.VERIFIER_CALLS,
    "calls/judge": Counter.JUDGE_CALLS, "tokens/judge/prompt": Counter.JUDGE_PROMPT_TOKENS,
    "tokens/judge/completion": Counter.JUDGE_COMPLETION_TOKENS, "calls/rubric": Counter.RUBRIC_CALLS,
    "calls/score": Counter.SCORE_CALLS,
}
"""Per-step metric names that stand for a usage counter (the loop's role names)."""


def load_train(directory: Path) -> tuple[TrainRun | None, list[Problem]]:
    """The training run in `directory` and the problems met (None when nothing is usable)."""
    problems: list[Problem] = []
    config = _read_config(directory / "config.yaml", problems)
    steps = _read_metrics(directory / "metrics.jsonl", problems)
    if config is None and not steps:
        problems.append(Problem(str(directory), "neither a readable config.yaml nor metrics lines; left out"))
        return None, problems
    flat = flatten(config or {})
    counters, source = _counters_from_metrics(steps), "metrics"
    if not counters:
        counters, source = _counters_from_trees(directory / "rollouts", problems)
    seed = flat.get("seed")
    return TrainRun(
        path=directory,
        env=str(flat.get("environment.name", "unknown")),
        method=str(flat.get("method.name", directory.name)),
        model=str(flat.get("model.name", "unknown")),
        seed=seed if isinstance(seed, int) else None,
        config=flat,
        steps=tuple(steps),
        counters=counters,
        counters_source=source,
    ), problems


def _read_config(path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    if not path.is_file():
        problems.append(Problem(str(path), "missing: the run's method and environment are unknown"))
        return None
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(str(path), f"unreadable ({str(exc).splitlines()[0]}); method and environment unknown"))
        return None
    if not isinstance(value, dict):
        problems.append(Problem(str(path), "is not a mapping of settings; method and environment unknown"))
        return None
    return value


def _read_metrics(path: Path, problems: list[Problem]) -> list[dict[str, Any]]:
    """Every readable line; each unreadable one is named (a torn last line is one of them)."""
    if not path.is_file():
        problems.append(Problem(str(path), "missing: no learning curve or stage wall clock for this run"))
        return []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        problems.append(Problem(str(path), f"unreadable ({exc.strerror or exc})"))
        return []
    steps = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            problems.append(Problem(f"{path}:{number}", "not a metrics line (JSON object with an integer step); skipped"))
            continue
        steps.append(record)
    return steps


def _counters_from_metrics(steps: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for record in steps:
        found: dict[str, int] = {}
        for key, value in record.items():
            name = _counter_of(key)
            # One value per counter and line: a name under two spellings is not counted twice.
            if name is not None and name not in found and isinstance(value, int | float) and not isinstance(value, bool):
                found[name] = int(value)
        for name, value in found.items():
            total[name] = total.get(name, 0) + value
    return dict(sorted(total.items()))


def _counter_of(key: str) -> str | None:
    if key in METRIC_ALIASES:
        return str(METRIC_ALIASES[key])
    prefix, _, name = key.rpartition("/")
    return name if name in COUNTER_NAMES and prefix in COUNTER_PREFIXES else None


def _counters_from_trees(rollouts: Path, problems: list[Problem]) -> tuple[dict[str, int], str]:
    files = sorted(rollouts.glob("step_*/*.json")) if rollouts.is_dir() else []
    if not files:
        return {}, "none"
    total: dict[str, int] = {}
    for path in files:
        try:
            counters = json.loads(path.read_bytes()).get("counters", {})
        except (ValueError, OSError, AttributeError) as exc:
            problems.append(Problem(str(path), f"corrupt rollout ({str(exc).splitlines()[0]}); its counters are not in the totals"))
            continue
        for name, value in counters.items() if isinstance(counters, dict) else ():
            if isinstance(value, int):
                total[name] = total.get(name, 0) + value
    return dict(sorted(total.items())), "trees"

