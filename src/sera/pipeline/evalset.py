"""The fixed held-out evaluation of the main job: which tasks, under which settings.

The same set, the same settings every time (before SFT, after SFT, after RL), so the three
results differ only in the weights: the first `pipeline.eval_tasks` tasks of the held-out split
(`pipeline.eval_split`; null: `val`, else `dev`) in the band `pipeline.eval_difficulty`,
`pipeline.eval_samples` rollouts each at `pipeline.eval_temperature` (default one greedy rollout;
sample k of a task has the same seed in every evaluation), `pipeline.eval_max_calls` calls per
agent (null: the rollouts'), and the rollouts' completion cap and depth.
"""

from __future__ import annotations

from dataclasses import replace

from sera.envs.registry import EnvSpec
from sera.envs.selection import TaskSelection, select_tasks
from sera.runtime.config import RuntimeConfig
from sera.train.config import TrainConfig
from sera.train.setup import runtime_config
from sera.types import Task


def eval_split(cfg: TrainConfig, spec: EnvSpec) -> str:
    """`pipeline.eval_split`, else `val`, else `dev`, else the environment's last split."""
    if cfg.pipeline.eval_split is not None:
        return cfg.pipeline.eval_split
    return next((s for s in ("val", "dev") if s in spec.splits), spec.splits[-1])


def eval_selection(cfg: TrainConfig, spec: EnvSpec) -> TaskSelection:
    """The selection of the fixed set (split, band, the first `pipeline.eval_tasks`)."""
    p = cfg.pipeline
    return TaskSelection(split=eval_split(cfg, spec), difficulty=p.eval_difficulty, limit=p.eval_tasks,
                         rules=cfg.environment.rules)


def eval_tasks(cfg: TrainConfig, spec: EnvSpec) -> list[Task]:
    """The fixed set; ValueError (one line) when the split and band hold fewer tasks than asked."""
    selection = eval_selection(cfg, spec)
    tasks = select_tasks(spec, selection)
    if len(tasks) < cfg.pipeline.eval_tasks:
        band = f" in band {selection.difficulty}" if selection.difficulty else ""
        raise ValueError(f"pipeline.eval_tasks={cfg.pipeline.eval_tasks}: split {selection.split}{band} of "
                         f"{spec.name} has only {len(tasks)} tasks")
    return tasks


def eval_runtime(cfg: TrainConfig, spec: EnvSpec) -> RuntimeConfig:
    """`pipeline.eval_temperature` (default greedy), the rollouts' completion cap and depth,
    `pipeline.eval_max_calls` calls per agent."""
    runtime = runtime_config(cfg, spec, temperature=cfg.pipeline.eval_temperature)
    calls = cfg.pipeline.eval_max_calls
    return replace(runtime, max_calls_per_agent=calls) if calls is not None else runtime
