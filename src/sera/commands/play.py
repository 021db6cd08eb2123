"""`sera play`: one task played by hand through `sera.eval.play.play_task`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from sera.commands.common import console, fail


def play_command(
    task_id: Annotated[str, typer.Option("--task-id", help="Task to play.")],
    env: Annotated[str, typer.Option(help="Environment.")] = "textcraft-synth",
    split: Annotated[str, typer.Option(help="Task split.")] = "val",
    out: Annotated[Path | None, typer.Option(help="Save the rollout tree here.")] = None,
    rules: Annotated[str | None, typer.Option(help="textworld-sync: rules profile, sync or reference (default: the split's own).")] = None,
    unsafe_sandbox: Annotated[bool, typer.Option("--unsafe-sandbox", help="Run code even where the sandbox cannot isolate it fully.")] = False,
) -> None:
    """Play a task yourself through the agent interface: type replies, end each with an empty line."""
    from sera.envs.registry import get_env
    from sera.envs.selection import TaskSelection, select_tasks
    from sera.eval.play import play_task

    try:
        spec = get_env(env)
    except KeyError as exc:
        fail(str(exc.args[0]))
    try:
        (task,) = select_tasks(spec, TaskSelection(split, task_ids=(task_id,), rules=rules))
    except (ValueError, OSError) as exc:  # TaskSelectionError, a corrupt task file, a missing one
        fail(str(exc))
    if unsafe_sandbox:
        from sera.sandbox import configure

        configure(allow_weak_isolation=True)
    result = play_task(task, spec, out=out)
    Console().print(f"\nsuccess: {result.tree.root_success}  agents: {len(result.tree.nodes)}")
    if result.problem is not None and result.problem.infra:  # e.g. the sandbox refused: say why, in one line
        console.print(f"[red]error:[/red] {result.problem.kind}: {result.problem.message}", highlight=False)
        raise typer.Exit(code=1)
