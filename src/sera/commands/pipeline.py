"""`sera pipeline`: a config resolved, then `sera.pipeline.job.run_pipeline` (the main job)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from sera.commands.common import console, fail, overrides


def pipeline_command(
    ctx: typer.Context,
    config: Annotated[Path, typer.Option(help="Run config, e.g. configs/main/textcraft-cpu.yaml.")],
    out: Annotated[Path, typer.Option(help="Job directory: pipeline.json, config.yaml, eval_base/, sft/, eval_sft/, rl/, eval_rl/, report.md.")],
    preset: Annotated[str | None, typer.Option(help="Scale preset beneath the config: paper, cpu or tiny.")] = None,
) -> None:
    """The main job: evaluate the base model, SFT, evaluate, RL for the time left, evaluate, report.

    Extra arguments are config overrides (`pipeline.budget_minutes=30`, `pipeline.eval_tasks=8`,
    `sft.train_tasks=4`, `steps.max_steps=4`). Rerun the same command to resume: finished phases
    are kept, RL continues from its checkpoint. Exit status 1 when a phase failed (recorded in
    pipeline.json), 2 for bad input, 130/143 when a signal stopped it.
    """
    from sera.pipeline.job import PipelineError, run_pipeline
    from sera.train.config import ConfigError, load_config

    given = overrides(ctx, "pipeline.budget_minutes=30")
    # Recorded in pipeline.json: the command that reruns (resumes) this job.
    command = shlex.join(["sera", "pipeline", "--config", str(config), "--out", str(out),
                          *(["--preset", preset] if preset else []), *given])
    try:
        cfg = load_config(config, preset=preset, overrides=given, host=True)
        result = run_pipeline(cfg, out, command=command, log=lambda m: typer.echo(m),
                              detail=lambda m: console.print(f"    {m}", markup=False, highlight=False, soft_wrap=True))
    except (ConfigError, PipelineError) as exc:
        fail(str(exc))
    if result.report is not None:
        typer.echo(f"outputs under {out}/; report: {result.report}")
    if result.exit_code:
        raise typer.Exit(code=result.exit_code)
