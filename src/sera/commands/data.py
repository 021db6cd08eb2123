"""`sera data textcraft|textworld`: a published task set written through its environment's
`tasks.write_split`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from sera.commands.common import fail

data_app = typer.Typer(no_args_is_help=True, help="Write published task sets to files.")


@data_app.command("textcraft")
def data_textcraft(
    split: Annotated[str, typer.Option(help="train or val.")],
    out: Annotated[Path, typer.Option(help="Output JSONL file.")],
    generate: Annotated[bool, typer.Option(help="Generate with our generator instead of copying the package data.")] = True,
) -> None:
    """Write the TextCraft-Synth task set of a split in the published JSONL format."""
    from sera.envs.textcraft.tasks import write_split

    _written(split, out, lambda: write_split(split, out, generate=generate))


@data_app.command("textworld")
def data_textworld(
    split: Annotated[str, typer.Option(help="train, dev or test.")],
    out: Annotated[Path, typer.Option(help="Output JSONL file (one task spec per line).")],
) -> None:
    """Generate the TextWorld-Sync task set of a split and write it as JSONL."""
    from sera.envs.textworld.tasks import write_split

    _written(split, out, lambda: write_split(split, out))


def _written(split: str, out: Path, write: Callable[[], int]) -> None:
    """Run `write`, print what it wrote; its refusals are one-line errors naming the option."""
    try:
        count = write()
    except IsADirectoryError as exc:
        fail(f"--out {exc}")
    except ValueError as exc:  # an unknown split
        fail(str(exc))
    Console().print(f"wrote {count} {split} tasks to {out}")
