"""Every table the reports show, and how their cells are written: one module for `sera report`,
the pipeline report and the `sera eval` console summaries.

- Markdown (`markdown_table`): `sera report`'s Table 1 (success by difficulty), Table 2
  (external supervision), Table 4 (best-of-N), Table 7 (wall clock) and the list of problems;
  the pipeline report's tables are built with the same function and cell writers.
- Terminal (`group_table`, `stat_table`, rich): a `sera eval` summary's success per difficulty
  or family, and mean ± std over the runs of `--runs`.

Rates are percentages, `mean ± std` over the runs of a row (just the mean for one run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from sera.reports.bestof import COMPUTE, BestOfComparison
from sera.reports.records import Problem, TrainRun
from sera.reports.train_stats import StageTime
from sera.reports.wording import describe_count
from sera.stats import HEADLINE_WEIGHTS, PairedChange, Rate, Stat

if TYPE_CHECKING:
    from sera.eval.summary import GroupResult
    from sera.reports.aggregate import EvalTable

SUPERVISION = ("verifier_calls", "judge_calls", "judge_prompt_tokens", "judge_completion_tokens")
"""External supervision counters (sera-spec §9): programmatic verifier labels, judge calls and tokens."""
SELF_EVAL = ("rubric_calls", "score_calls")
"""The policy's own rubric writing and scoring calls (SERA's replacement for a judge)."""
SELECTION_SHOWN = ("groups", "candidates", "skipped_cap", "extra_calls_ratio", "extra_tokens_ratio")
"""Numbers of a summary's best-of report shown in Table 4 (all are in report.json)."""


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table (pipes in cells escaped)."""
    def cells(values: list[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|").replace("\n", " ") for v in values) + " |"

    return "\n".join([cells(headers), "|" + "|".join("---" for _ in headers) + "|", *(cells(r) for r in rows)])


def fixed(value: float | None, digits: int = 3) -> str:
    """A number with `digits` decimals; `—` when absent."""
    return "—" if value is None else f"{value:.{digits}f}"


def share(rate: Rate) -> str:
    """A rate as a whole percentage (`19%`); `—` when nothing was counted."""
    return "—" if rate.n == 0 else f"{100 * rate.k / rate.n:.0f}%"


def share_value(value: float | None) -> str:
    """A share in [0, 1] as a percentage with one decimal (`12.5%`); `—` when absent."""
    return "—" if value is None else f"{100 * value:.1f}%"


def count(rate: Rate | None) -> str:
    """A rate with its interval (`3/16 (19%; 95% CI 7–43%)`); `—` when absent or nothing was counted."""
    return "—" if rate is None or rate.n == 0 else describe_count(rate)


def paired(change: PairedChange) -> str:
    """A paired exact test as `+8 / −0 of 32, p = 0.00781`."""
    return f"+{change.gained} / −{change.lost} of {change.paired}, p = {change.p_value:.3g}"


def pct(stat: Stat | None) -> str:
    """A rate statistic as `74.31 ± 1.20` (percent)."""
    if stat is None or stat.mean is None:
        return "—"
    return f"{100 * stat.mean:.2f}" + (f" ± {100 * stat.std:.2f}" if stat.std is not None else "")


def num(value: float | None, digits: int = 1) -> str:
    """A count or a number of seconds, with thousands separators."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"


def stat_num(stat: Stat | None) -> str:
    """A count statistic as `mean ± std`."""
    if stat is None or stat.mean is None:
        return "0"
    return num(stat.mean) + (f" ± {num(stat.std)}" if stat.std else "")


def table1(table: EvalTable) -> str:
    """Success by difficulty and overall, one row per method."""
    rules = sorted({r.headline_rule for r in table.rows if r.headline_rule})
    headers = (["method", "runs (seeds)", "tasks", *table.bands, "overall"] + ([f"headline ({' / '.join(rules)})"] if rules else [])
               + ["errors / run (infra, judge)"])
    rows = []
    for r in table.rows:
        cells = [r.label, f"{len(r.runs)} ({', '.join(str(s.seed) for s in r.runs)})", str(r.tasks),
                 *(pct(r.bands.get(b)) for b in table.bands), pct(r.overall)]
        if rules:
            partial = r.headline_rule in {rule for rule, _ in HEADLINE_WEIGHTS.values()} and len(r.headline_bands) < 4
            cells.append(pct(r.headline) + (f" ({len(r.headline_bands)}/4 bands)" if partial else ""))
        cells.append(f"{stat_num(r.errors)} ({stat_num(r.infra_failures)}, {stat_num(r.judge_errors)})")
        rows.append(cells)
    return markdown_table(headers, rows)


def families_table(table: EvalTable) -> str:
    """Success by task family, one row per method."""
    return markdown_table(["method", *table.families], [[r.label, *(pct(r.families.get(f)) for f in table.families)] for r in table.rows])


def table2(tables: list[EvalTable], train: list[tuple[str, TrainRun]]) -> str:
    """External supervision per evaluation run (mean ± std) and per training run (totals)."""
    headers = ["run", "kind", *SUPERVISION, "rubric + score calls (policy)"]
    rows = []
    for t in tables:
        for r in t.rows:
            self_eval = sum(r.counters[n].mean or 0 for n in SELF_EVAL if n in r.counters)
            rows.append([f"{r.label} ({t.env}/{t.source})", f"eval, per run of {r.tasks}",
                         *(stat_num(r.counters.get(n)) for n in SUPERVISION), num(self_eval)])
    for label, run in train:
        steps = len(run.steps)
        rows.append([f"{label} ({run.env}, {run.path.name})", f"train, {steps} steps, from {run.counters_source}",
                     *(num(run.counters.get(n, 0)) for n in SUPERVISION), num(sum(run.counters.get(n, 0) for n in SELF_EVAL))])
    return markdown_table(headers, rows)


def table4(comparisons: list[BestOfComparison]) -> str:
    """Best-of-N against N = 1, with the compute per rollout (N = 1 → N, ×ratio)."""
    headers = ["method", "N = 1", "best-of-N", "Δ (points)", "headline N = 1 → N", *(f"{c} / rollout" for c in COMPUTE),
               "recorded by the selection", "differs in"]
    rows = []
    for c in comparisons:
        delta = None
        if c.baseline_success and c.baseline_success.mean is not None and c.success.mean is not None:
            delta = 100 * (c.success.mean - c.baseline_success.mean)
        compute = [f"{num(b, 2)} → {num(n, 2)}" + (f" (×{n / b:.2f})" if b else "") for b, n in c.compute.values()]
        headline = f"{pct(c.baseline_headline)} → {pct(c.headline)}" if c.headline is not None else "—"
        recorded = ", ".join(f"{k} {num(v, 2)}" for k, v in c.selection.items() if k in SELECTION_SHOWN) or "—"
        rows.append([f"{c.label} ({c.env}/{c.source})", pct(c.baseline_success) if c.baseline else "no N = 1 run",
                     pct(c.success), "—" if delta is None else f"{delta:+.2f}", headline, *compute, recorded, ", ".join(c.differs) or "—"])
    return markdown_table(headers, rows)


def table7_train(stages: list[StageTime]) -> str:
    """Seconds by stage of one training run, with each `time/*` part."""
    parts = sorted({p for s in stages for p in s.parts})
    rows = [[s.stage, str(s.steps), str(s.trained), num(s.seconds, 2), *(num(s.parts.get(p, 0.0), 2) for p in parts)] for s in stages]
    total = sum(s.seconds for s in stages)
    rows.append(["**all**", str(sum(s.steps for s in stages)), str(sum(s.trained for s in stages)), num(total, 2),
                 *(num(sum(s.parts.get(p, 0.0) for s in stages), 2) for p in parts)])
    return markdown_table(["stage", "steps", "trained", "seconds", *(f"{p} s" for p in parts)], rows)


def table7_eval(tables: list[EvalTable]) -> str:
    """Wall clock of the evaluation runs."""
    rows = []
    for t in tables:
        for r in t.rows:
            per_rollout = sum(s.mean_rollout_s for s in r.runs) / len(r.runs)
            rows.append([f"{r.label} ({t.env}/{t.source})", str(len(r.runs)), str(r.tasks), stat_num(r.wall_time), num(per_rollout, 2)])
    return markdown_table(["run", "runs", "tasks", "wall seconds per run", "mean seconds per rollout"], rows)


def problems_list(problems: list[Problem]) -> str:
    """The problems as a bullet list."""
    return "\n".join(f"- `{p.path}`: {p.message}" for p in problems)


# -- Terminal (rich) ---------------------------------------------------------------------------------


def group_table(title: str, key: str, rows: list[tuple[str, GroupResult]]) -> Table:
    """One evaluation's success counts per group (difficulty or family), as `sera eval` prints it."""
    table = Table(title=title)
    for column in (key, "tasks", "success", "rate", "errors"):
        table.add_column(column, justify="left" if column == key else "right")
    for name, group in rows:
        table.add_row(name, str(group.tasks), str(group.successes), f"{100 * group.success_rate:.2f}%", str(group.errors))
    return table


def stat_table(title: str, key: str, rows: list[tuple[str, Stat]], n_runs: int) -> Table:
    """Mean ± std of each group's success over the runs of `sera eval --runs`, and each run's rate."""
    table = Table(title=title)
    columns = (key, "tasks", "mean", "std", *(f"r{i}" for i in range(n_runs)))
    for column in columns:
        table.add_column(column, justify="left" if column == key else "right")
    for name, stat in rows:
        table.add_row(name, str(stat.tasks), "—" if stat.mean is None else f"{100 * stat.mean:.2f}%",
                      "—" if stat.std is None else f"{100 * stat.std:.2f}", *(f"{100 * v:.2f}%" for v in stat.values))
    return table
