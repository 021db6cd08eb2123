"""`sera train`: a config resolved (`sera.train.config.load_config`), then `sera.train.loop.run_train`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from sera.commands.common import exit_if_stopped, fail, log, overrides

CONTEXT: dict[str, bool] = {"allow_extra_args": True, "ignore_unknown_options": False}
"""Extra arguments are config overrides (key=value)."""


def train_command(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(help="Run config, e.g. configs/textcraft-synth/sera.yaml.")] = None,
    preset: Annotated[str | None, typer.Option(help="Scale preset beneath the config: paper, cpu or tiny.")] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory: config.yaml, metrics.jsonl, rollouts/, checkpoints/.")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue the run in this directory from its newest complete checkpoint.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the resolved config and the first cycle of stages; train nothing.")] = False,
    fallback: Annotated[bool, typer.Option("--fallback", help="With --resume: if the newest checkpoint is corrupt, use the newest older one that is complete.")] = False,
    init_from: Annotated[Path | None, typer.Option("--init-from", help="Start from the weights of the newest checkpoint of this sera sft (or sera train) run directory; fresh optimizer.")] = None,
    ray: Annotated[str | None, typer.Option("--ray", metavar="ADDRESS", help="Sample on Ray rollout workers: 'local' (Ray on this machine), 'auto', HOST:PORT or ray://HOST:PORT; sets ray.address (ray.workers: how many).")] = None,
) -> None:
    """Train a policy with RL (RAO / SERA): `sera train --config C --preset P --out DIR [key=value ...]`.

    Extra arguments are config overrides (`optimizer.lr=1e-5`, `max_steps=10`). `--resume DIR`
    continues a run; it refuses a changed config except `steps.max_steps`.
    """
    from sera.checkpoints.store import CheckpointError, CheckpointWriteError
    from sera.serving.errors import ServingError
    from sera.train.config import ConfigError, describe, load_config
    from sera.train.loop import CONFIG_FILE, TrainError, run_train
    from sera.train.ray_rollouts import RayUnavailable
    from sera.train.sft import InitFromError
    from sera.train.sharded_learner import LearnerGroupError

    given = overrides(ctx, "optimizer.lr=1e-5") + ([f"ray.address={ray}"] if ray is not None else [])
    if resume is not None and out is not None and out != resume:
        fail("give --resume DIR or --out DIR, not both")
    try:
        if resume is not None:
            cfg = None
            if config is not None or preset is not None or given:
                cfg = load_config(config or resume / CONFIG_FILE, preset=preset, overrides=given)
            elif dry_run:  # nothing to merge: the run's own config is what a dry run describes
                cfg = load_config(resume / CONFIG_FILE)
        else:
            if config is None:
                fail("--config is required (or --resume DIR)")
            cfg = load_config(config, preset=preset, overrides=given, host=not dry_run)
    except ConfigError as exc:
        fail(str(exc))
    if dry_run:
        assert cfg is not None
        typer.echo(describe(cfg))
        return
    if resume is None and out is None:
        fail("--out DIR is required")
    if init_from is not None and resume is not None:
        fail("--init-from starts a new run; a resumed run keeps the weights of its checkpoint (drop --init-from)")
    try:
        result = run_train(cfg, resume or out, resume=resume is not None, allow_fallback=fallback, init_from=init_from, log=log)
    except (InitFromError, CheckpointError, TrainError, ServingError, CheckpointWriteError,  # ServingError: the sampler's (InfraFailure)
            RayUnavailable, LearnerGroupError) as exc:
        fail(str(exc))
    Console().print(f"trained {result.version} updates in {result.steps} steps under {resume or out}/"
                    + (f" (stopped by {result.stopped_by})" if result.stopped_by else ""), soft_wrap=True)
    exit_if_stopped(result.stopped_by)  # checkpointed, not finished
