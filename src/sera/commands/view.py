"""`sera view`: rollout trees into one HTML page through `sera.view.write_view`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sera.commands.common import fail


def view_command(
    path: Annotated[Path, typer.Argument(help="A rollout tree (.json) or a run directory (evaluation or training).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="HTML file to write (default: X.html beside X.json, or PATH/view.html).")] = None,
    max_mb: Annotated[float, typer.Option(min=1, help="Embed trees until the page holds this many MB; the rest are listed, not shown.")] = 256,
) -> None:
    """Write one self-contained HTML page of rollout trees: agents, steps, rubrics, fork groups.

    The page needs no network. Files of a run directory that are not readable trees are named one
    per line and listed in the page; the rest still renders (exit status 1 then).
    """
    from sera.view import ViewError, write_view

    try:
        result = write_view(path, output, max_mb=max_mb)
    except ViewError as exc:
        fail(str(exc))
    for line in result.unreadable:
        typer.echo(f"unreadable: {line}", err=True)  # one line each, never wrapped
    skipped = f", {result.skipped} over the size limit not embedded" if result.skipped else ""
    typer.echo(f"wrote {result.path} ({result.trees} trees, {result.size / 2**20:.1f} MB{skipped})")
    if result.unreadable or result.skipped:
        raise typer.Exit(code=1)
