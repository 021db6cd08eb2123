"""The `sera` command line: train, evaluate, write data sets, play a task by hand.

Each command lives in `sera.commands.<name>`: it parses its options and calls the library
function that does the work, which Python code can call too (README, "Use from Python").
"""

from __future__ import annotations

import typer

from sera.commands.data import data_app
from sera.commands.eval import eval_command
from sera.commands.pipeline import pipeline_command
from sera.commands.play import play_command
from sera.commands.report import report_command
from sera.commands.sft import sft_command
from sera.commands.train import CONTEXT, train_command
from sera.commands.view import view_command

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train and evaluate recursive LLM agents, write task sets, play tasks by hand.")
# Registered in the order `sera --help` has always listed them.
app.command("eval")(eval_command)
app.add_typer(data_app, name="data")
app.command("play")(play_command)
app.command("train", context_settings=CONTEXT)(train_command)
app.command("report")(report_command)
app.command("view")(view_command)
app.command("sft", context_settings=CONTEXT)(sft_command)
app.command("pipeline", context_settings=CONTEXT)(pipeline_command)


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
