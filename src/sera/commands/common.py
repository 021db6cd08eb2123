"""What the commands share: the stderr console and the one-line error that ends a command."""

from __future__ import annotations

import signal
from typing import NoReturn

import typer
from rich.console import Console

console = Console(stderr=True)
"""Messages and errors go to stderr; stdout is for results."""


def fail(message: str) -> NoReturn:
    """Print `error: MESSAGE` and exit with status 2 (bad input)."""
    # One line whatever the width (soft_wrap), and the message printed as is: it may hold brackets.
    console.print("[red]error:[/red]", end=" ")
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def log(message: str) -> None:
    """A progress line on stderr, printed as is and never wrapped."""
    console.print(message, markup=False, highlight=False, soft_wrap=True)


def overrides(ctx: typer.Context, example: str) -> list[str]:
    """The extra `key=value` arguments of a command; anything else is a one-line error."""
    given = list(ctx.args)
    bad = [a for a in given if "=" not in a]
    if bad:
        fail(f"unexpected argument(s) {bad}; overrides are key=value (e.g. {example})")
    return given


def exit_if_stopped(stopped_by: str | None) -> None:
    """A run a signal stopped (checkpointed, not finished) exits as the shell's convention for
    that signal: 128 + its number."""
    if stopped_by:
        raise typer.Exit(code=128 + signal.Signals[stopped_by].value)
