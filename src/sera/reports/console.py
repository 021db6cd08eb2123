"""What `sera eval` prints: a summary's tables (`sera.reports.tables`), trees, timing and errors;
for `--runs`, mean ± std over the runs. Here rather than in `sera.eval` so that the evaluation
harness does not import the reporting layer (which reads the harness's records)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from sera.eval.best_of import describe as describe_best_of
from sera.eval.summary import EvalSummary
from sera.reports.tables import group_table, stat_table

if TYPE_CHECKING:
    from pathlib import Path

    from sera.eval.aggregate import RunsSummary
    from sera.eval.runs import RunSlot


def print_summary(summary: EvalSummary, console: Console | None = None) -> None:
    """Print per-difficulty and overall success, then tree statistics, timing and errors."""
    console = console or Console()
    title = f"{summary.env} / {summary.split} / {summary.policy}"
    if not summary.complete:
        console.print(f"partial: {summary.finished_rollouts} of {summary.planned_rollouts} rollouts finished; "
                      "rerun the same command to finish the run", markup=False, highlight=False)
    console.print(group_table(title, "difficulty", list(summary.by_difficulty.items()) + [("overall", summary.overall)]))
    if summary.by_family:
        console.print(group_table(f"{title} by family", "family", list(summary.by_family.items())))
    t = summary.trees
    console.print(
        f"trees: mean {t.mean_nodes:.2f} agents (max {t.max_nodes}), depth distribution {t.depth_distribution}, "
        f"agents by depth {t.agents_by_depth}, mean policy calls {t.mean_policy_calls:.2f}"
    )
    console.print(f"wall time {summary.wall_time_s:.1f} s, mean rollout {summary.mean_rollout_s:.2f} s")
    if summary.samples > 1:
        console.print(f"{summary.samples} samples per task (base seed {summary.seed}); counts are per rollout")
    if summary.rules is not None:
        console.print(f"rules profile: {summary.rules}")
    if summary.best_of is not None:
        for line in describe_best_of(summary.best_of):
            console.print(line, markup=False, highlight=False)
    if summary.sanitized_trees:
        strings = summary.counters.get("sanitized_strings", 0)
        console.print(f"{summary.sanitized_trees} trees had {strings} strings escaped to be saved as JSON")
    print_errors(summary, console)


def error_counts(errors: int, infra: int, judge: int) -> str:
    """`3 errors (2 infrastructure, 1 judge)`: model failures are not errors; judge errors are
    among the infrastructure ones."""
    return f"{errors} errors ({infra} infrastructure, {judge} judge)"


def print_errors(summary: EvalSummary, console: Console, shown: int = 5) -> None:
    """Error counts (always), errors by kind, and the first few failed rollouts with their
    one-line messages."""
    line = error_counts(summary.overall.errors, summary.infra_failures, summary.judge_errors)
    if not summary.failed:
        console.print(f"{line}", markup=False, highlight=False)
        return
    kinds = ", ".join(f"{kind}: {n}" for kind, n in summary.errors_by_kind.items())
    console.print(f"{line}: {kinds}", markup=False, highlight=False)
    for item in summary.failed[:shown]:
        console.print(f"  {item.task_id} #{item.sample} {item.kind}: {item.message}", markup=False, highlight=False)
    if len(summary.failed) > shown:
        console.print(f"  ... {len(summary.failed) - shown} more in summary.json")


def print_runs_summary(runs: RunsSummary, console: Console | None = None) -> None:
    """Mean ± std over the runs of a `--runs` evaluation: the headline, per difficulty and
    overall, per family; then one line per run."""
    console = console or Console()
    title = f"{runs.env} / {runs.split} / {runs.policy} / {len(runs.runs)} runs"
    rows = [*runs.by_difficulty.items(), ("overall (pooled)", runs.overall), ("headline", runs.headline)]
    console.print(stat_table(title, "difficulty", rows, len(runs.runs)))
    console.print(f"headline: {runs.headline_rule}", markup=False, highlight=False)
    if runs.by_family:
        console.print(stat_table(f"{title} by family", "family", list(runs.by_family.items()), len(runs.runs)))
    for entry in runs.runs:
        console.print(
            f"  {entry.dir}: seed {entry.seed}, headline {100 * entry.headline:.2f}%, pooled {100 * entry.overall:.2f}%, "
            f"{error_counts(entry.errors, entry.infra_failures, entry.judge_errors)}, {entry.wall_time_s:.1f} s",
            markup=False, highlight=False,
        )
    counts = [("errors", runs.errors), ("infrastructure", runs.infra_failures), ("judge", runs.judge_errors)]
    console.print("per run: " + ", ".join(f"{name} {stat.mean:.1f}" + (f" ± {stat.std:.1f}" if stat.std is not None else "")
                                      for name, stat in counts if stat is not None and stat.mean is not None),
                  markup=False, highlight=False)


def print_slots(out_dir: Path, slots: list[RunSlot], summaries: list[EvalSummary], runs: RunsSummary | None,
                console: Console | None = None) -> None:
    """What one `sera eval` invocation did: each run's table (`--runs`: one line each and the mean
    ± std table), where it was saved, and for a shard how to merge."""
    console = console or Console()
    if runs is None:
        for slot, summary in zip(slots, summaries, strict=True):
            print_summary(summary, console)
            console.print(f"saved {summary.overall.tasks} rollout results under {slot.dir}/ (summary.json, rollouts/)")
    else:
        for slot, summary in zip(slots, summaries, strict=True):
            console.print(f"{slot.dir}: seed {slot.seed}, {summary.overall.successes}/{summary.overall.tasks} successful, "
                          f"{error_counts(summary.overall.errors, summary.infra_failures, summary.judge_errors)}",
                          markup=False, highlight=False)
        print_runs_summary(runs, console)
        console.print(f"saved {len(slots)} runs under {out_dir}/runs/ and their mean ± std in {out_dir}/summary.json")
    shard = next((slot.shard for slot in slots if slot.shard is not None), None)
    if shard is not None:
        console.print(f"shard {shard.spec} done; once all {shard.count} shards are done, merge them with: "
                      f"sera eval --merge --out {out_dir} [--merge-from OTHER_OUT ...]", markup=False, highlight=False)
