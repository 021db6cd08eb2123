"""`sera sft`: a config resolved, then `sera.train.sft.run_sft` (supervised warm start)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from sera.commands.common import exit_if_stopped, fail, log, overrides


def sft_command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Run directory: config.yaml, metrics.jsonl, demos/, checkpoints/.")],
    config: Annotated[Path | None, typer.Option(help="Run config, e.g. configs/textcraft-synth/sera.yaml (the one sera train --init-from will use); with --resume: optional.")] = None,
    preset: Annotated[str | None, typer.Option(help="Scale preset beneath the config: paper, cpu or tiny.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its newest checkpoint.")] = False,
) -> None:
    """Supervised warm start on the scripted expert's demonstrations: `sera sft --config C --preset P --out DIR KEY=VALUE ...`.

    Extra arguments are config overrides (`sft.train_tasks=16`, `sft.val_tasks=4`, `sft.epochs=2`,
    `sft.batch_datums=8`, `sft.lr=1e-4`, `sft.checkpoint_every=20`). Then: `sera train --init-from DIR ...`,
    or `sera eval --policy hf --model DIR`. SIGINT or SIGTERM checkpoints at the next batch and exits
    with 130 or 143; `sera sft --resume --out DIR` continues exactly where it stopped (also after a kill).
    """
    from sera.checkpoints.store import CheckpointError, CheckpointWriteError
    from sera.envs.selection import TaskSelectionError
    from sera.train.config import ConfigError, load_config
    from sera.train.run_dir import TrainError
    from sera.train.sft import run_sft

    given = overrides(ctx, "sft.epochs=3")
    if config is None and not resume:
        fail("--config is required (or --resume to continue the run in --out)")
    try:
        cfg = load_config(config, preset=preset, overrides=given, host=True) if config is not None else None
        result = run_sft(cfg, out, resume=resume, log=log)
    except (ConfigError, TrainError, CheckpointError, CheckpointWriteError, TaskSelectionError) as exc:
        fail(str(exc))  # SftError is a TrainError
    exit_if_stopped(result.stopped_by)  # checkpointed, not finished
    Console().print(f"SFT: {result.steps} steps on {result.train_datums} datums; held-out NLL {result.nll_before:.4f} -> "
                    f"{result.nll_after:.4f} nats/token; checkpoint {result.checkpoint}", soft_wrap=True)
