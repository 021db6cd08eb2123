"""`build_report`: find and read the runs, aggregate them, write `report.md`, `report.json` and
the PNGs under `plots/`.

Every input that cannot be used (or is used only in part) becomes a `Problem` naming its file:
it is listed at the top of the page and in `report.json`, and everything else still renders.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sera.reports import plots, tables
from sera.reports.aggregate import EvalTable, build_tables
from sera.reports.bestof import compare_best_of
from sera.reports.discover import find_runs
from sera.reports.load_eval import load_eval
from sera.reports.load_train import load_train
from sera.reports.records import EvalRun, Problem, TrainRun
from sera.reports.train_stats import curve, stage_times, train_labels
from sera.stats import Stat

REPORT_VERSION = 1
"""Version of `report.json`'s layout."""


@dataclass
class Report:
    """What `build_report` wrote."""

    markdown: Path
    """`DIR/report.md`."""
    json: Path
    """`DIR/report.json`."""
    plots: list[Path] = field(default_factory=list)
    """The PNGs written."""
    problems: list[Problem] = field(default_factory=list)
    """Inputs not (fully) used, each naming its file."""
    eval_runs: int = 0
    """Evaluation run directories used."""
    train_runs: int = 0
    """Training run directories used."""


def build_report(paths: list[Path], out_dir: Path) -> Report:
    """Report on every run at or below `paths` into `out_dir` (created)."""
    found = find_runs(paths)
    problems = list(found.problems)
    evals: list[EvalRun] = []
    for directory in found.evals:
        run, more = load_eval(directory)
        problems += more
        if run is not None:
            evals.append(run)
    trains: list[TrainRun] = []
    for directory in found.trains:
        train, more = load_train(directory)
        problems += more
        if train is not None:
            trains.append(train)
    eval_tables, more = build_tables(evals)
    problems += more
    comparisons = compare_best_of(eval_tables)
    labels = train_labels(trains)
    stages = [stage_times(t) for t in trains]
    curves = [curve(t, label) for t, label in zip(trains, labels) if t.steps]

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    success_pngs: list[Path | None] = []
    names: set[str] = set()
    for table in eval_tables:
        success_pngs.append(_plot(lambda p, t=table: plots.success_plot(t, p), out_dir, _name(f"success_{table.env}_{table.source}", names), problems, written))
    curve_pngs: dict[str, Path | None] = {}
    by_env: dict[str, list[Any]] = defaultdict(list)
    for c in curves:
        by_env[c.env].append(c)
    for env, members in by_env.items():
        curve_pngs[env] = _plot(lambda p, m=members: plots.curves_plot(m, p), out_dir, _name(f"curves_{env}", names), problems, written)

    page = _markdown(eval_tables, success_pngs, comparisons, trains, labels, stages, curve_pngs, problems, found.notes, out_dir)
    markdown = out_dir / "report.md"
    markdown.write_text(page, encoding="utf-8")
    data = {
        "version": REPORT_VERSION,
        "inputs": [str(p) for p in paths],
        "problems": problems,
        "notes": found.notes + [n for t in eval_tables for n in t.notes],
        "table1": eval_tables,
        "table2": {"train": [{"label": l, "path": str(t.path), "env": t.env, "method": t.method, "steps": len(t.steps),
                              "counters": t.counters, "counters_source": t.counters_source} for l, t in zip(labels, trains)]},
        "table4": comparisons,
        "table7": {"train": [{"label": l, "path": str(t.path), "env": t.env, "stages": s} for l, t, s in zip(labels, trains, stages)]},
        "curves": curves,
        "plots": [str(p.relative_to(out_dir)) for p in written],
    }
    report_json = out_dir / "report.json"
    report_json.write_text(json.dumps(_jsonable(data), indent=1), encoding="utf-8")
    return Report(markdown=markdown, json=report_json, plots=written, problems=problems, eval_runs=len(evals), train_runs=len(trains))


def _markdown(eval_tables: list[EvalTable], success_pngs: list[Path | None], comparisons: list[Any], trains: list[TrainRun],
              labels: list[str], stages: list[Any], curve_pngs: dict[str, Path | None], problems: list[Problem],
              notes: list[str], out_dir: Path) -> str:
    parts = ["# sera report", ""]
    if problems:
        parts += [f"## Problems ({len(problems)})", "", "Inputs not used, or used only in part:", "", tables.problems_list(problems), ""]
    all_notes = notes + [n for t in eval_tables for n in t.notes]
    if all_notes:
        parts += ["Notes:", "", *(f"- {n}" for n in all_notes), ""]
    if eval_tables:
        parts += ["## Table 1: success by difficulty (%)", "",
                  "Mean ± sample std over runs with different seeds. Overall: successes / rollouts. Headline: TextCraft-Synth "
                  "task-weighted with the full set's band sizes 147/213/136/136, TextWorld-Sync the mean of the four band rates.", ""]
        for table, png in zip(eval_tables, success_pngs):
            parts += [f"### {table.env} / {table.source}", "", tables.table1(table), ""]
            if table.families:
                parts += ["By task family:", "", tables.families_table(table), ""]
            if png is not None:
                parts += [f"![success by difficulty, {table.env} / {table.source}]({png.relative_to(out_dir).as_posix()})", ""]
    if eval_tables or trains:
        parts += ["## Table 2: external supervision spent", "",
                  "Verifier labels (TextCraft), judge calls and tokens (TextWorld); evaluation rows are per run, training rows are totals.", "",
                  tables.table2(eval_tables, list(zip(labels, trains))), ""]
    if comparisons:
        parts += ["## Table 4: best-of-N against N = 1", "", tables.table4(comparisons), ""]
    if trains or eval_tables:
        parts += ["## Table 7: wall clock", ""]
        for label, run, stage in zip(labels, trains, stages):
            if stage:
                parts += [f"### training: {label} ({run.env}, `{run.path}`)", "", tables.table7_train(stage), ""]
        if eval_tables:
            parts += ["### evaluation", "", tables.table7_eval(eval_tables), ""]
    if curve_pngs:
        parts += ["## Learning curves", ""]
        for env, png in curve_pngs.items():
            if png is not None:
                parts += [f"![learning curves, {env}]({png.relative_to(out_dir).as_posix()})", ""]
    if not eval_tables and not trains:
        parts += ["No usable run was found.", ""]
    return "\n".join(parts)


def _plot(draw: Any, out_dir: Path, name: str, problems: list[Problem], written: list[Path]) -> Path | None:
    path = out_dir / "plots" / f"{name}.png"
    try:
        draw(path)
    except Exception as exc:  # a plot that fails must not take the tables with it
        problems.append(Problem(str(path), f"plot failed: {type(exc).__name__}: {exc}"))
        return None
    written.append(path)
    return path


def _name(text: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or "plot"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def _jsonable(value: Any) -> Any:
    if isinstance(value, Stat):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        items = sorted(value) if isinstance(value, frozenset | set) else value
        return [_jsonable(v) for v in items]
    if isinstance(value, Path):
        return str(value)
    return value
