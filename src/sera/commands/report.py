"""`sera report`: recorded runs into tables and plots through `sera.reports.writer.build_report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sera.commands.common import fail


def report_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="Evaluation or training run directories, or folders holding them (searched below).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder: report.md, report.json, plots/*.png.")] = Path("report"),
) -> None:
    """Turn recorded runs into the paper's tables (success by difficulty, supervision, wall clock,
    best-of-N) and plots, as DIR/report.md with DIR/report.json.

    Inputs that cannot be used are named one per line and listed in the report; the rest still
    renders. Exit status 1 when any input was not (fully) used, 2 when no run was usable.
    """
    from sera.reports.writer import build_report

    report = build_report(run_dirs, out)
    for problem in report.problems:
        typer.echo(f"problem: {problem.line()}", err=True)  # one line each, never wrapped
    typer.echo(f"wrote {report.markdown} and {report.json.name} ({report.eval_runs} evaluation runs, "
               f"{report.train_runs} training runs, {len(report.plots)} plots, {len(report.problems)} problems)")
    if not report.eval_runs and not report.train_runs:
        fail("no usable run found under " + ", ".join(str(p) for p in run_dirs))
    if report.problems:
        raise typer.Exit(code=1)
