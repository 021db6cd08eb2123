"""A readable table of an evaluation summary."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from sera.eval.summary import EvalSummary


def print_summary(summary: EvalSummary, console: Console | None = None) -> None:
    """Print per-difficulty and overall success, then tree statistics and timing."""
    console = console or Console()
    table = Table(title=f"{summary.env} / {summary.split} / {summary.policy}")
    for column in ("difficulty", "tasks", "success", "rate", "errors"):
        table.add_column(column, justify="left" if column == "difficulty" else "right")
    rows = list(summary.by_difficulty.items()) + [("overall", summary.overall)]
    for name, group in rows:
        table.add_row(name, str(group.tasks), str(group.successes), f"{100 * group.success_rate:.2f}%", str(group.errors))
    console.print(table)
    t = summary.trees
    console.print(
        f"trees: mean {t.mean_nodes:.2f} agents (max {t.max_nodes}), depth distribution {t.depth_distribution}, "
        f"agents by depth {t.agents_by_depth}, mean policy calls {t.mean_policy_calls:.2f}"
    )
    console.print(f"wall time {summary.wall_time_s:.1f} s, mean rollout {summary.mean_rollout_s:.2f} s")
