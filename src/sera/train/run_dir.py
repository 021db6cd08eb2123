"""The run directory of `sera train`: what is in it, starting a run there, and resuming one.

| path | what |
|---|---|
| `config.yaml` | the resolved config |
| `metrics.jsonl` | one line per step |
| `rollouts/step_NNNNN/<task>.<k>.json` | every tree of the step |
| `eval/v<version>/` | each periodic evaluation (an ordinary `sera eval` run directory) |
| `tensorboard/` | TensorBoard event files |
| `checkpoints/` | `sera.checkpoints.store` layout |
| `adapters/v<version>/` | vLLM backend: the LoRA adapter the server serves (`sera.serving.vllm_sync`) |
| `sampler_base/` | vLLM backend: the learner's base model saved for the server (`sera.serving.vllm_backend`) |
| `vllm-server.log` | vLLM backend: the started server's output |
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sera.train.config import TrainConfig, config_diff, dump_config, load_config
from sera.train.metrics import METRICS_FILE, MetricsSink

CONFIG_FILE = "config.yaml"
"""The resolved config of the run, in the run directory."""
CKPT_DIR = "checkpoints"
"""Checkpoints of the run (`sera.checkpoints.store` layout)."""
ROLLOUTS_DIR = "rollouts"
"""Trees of each step: `rollouts/step_NNNNN/<task>.<k>.json`."""
EVAL_DIR = "eval"
"""Periodic evaluations: `eval/v<version>/`."""
TENSORBOARD_DIR = "tensorboard"
"""TensorBoard event files."""
RESUMABLE_KEYS = frozenset({"steps.max_steps", "ray.address", "ray.workers", "ray.worker_cpus", "ray.worker_gpus", "ray.connect_timeout_s",
                            "ray.placement_timeout_s"})
"""Config keys `--resume` may change: extending a run, or sampling it elsewhere (trees are seeded
per tree, so where they are sampled does not change them), is not a different run."""


class TrainError(RuntimeError):
    """The run cannot start or continue; the message says why (config change, too many skips)."""


class NoLearningSignal(TrainError):
    """`steps.max_consecutive_skips` steps in a row had nothing to train on (e.g. every tree of a
    task got the same reward). The run is checkpointed; a caller that treats this as an outcome
    (the main job) reads how far it got from `steps` and `version`."""

    def __init__(self, message: str, *, steps: int, version: int) -> None:
        super().__init__(message)
        self.steps = steps
        """Steps the run has recorded (its `metrics.jsonl` lines)."""
        self.version = version
        """Optimizer updates made (the policy version)."""


def prepare_run(out: Path, cfg: TrainConfig | None, *, resume: bool) -> TrainConfig:
    """Fresh: refuse a run directory that already holds a run, write `config.yaml`. Resume: the
    saved config, or `cfg` if it differs from it only in `RESUMABLE_KEYS` (else refuse, naming
    the keys)."""
    path = out / CONFIG_FILE
    if not resume:
        assert cfg is not None
        if path.exists() or (out / CKPT_DIR).exists():
            raise TrainError(f"{out} already holds a run; use --resume {out} or another --out")
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_config(cfg), encoding="utf-8")
        return cfg
    if not path.is_file():
        raise TrainError(f"{out} holds no run to resume ({CONFIG_FILE} is missing)")
    saved = load_config(path)
    if cfg is None:
        return saved
    changed = [line for line in config_diff(saved, cfg) if line.split(":", 1)[0] not in RESUMABLE_KEYS]
    if changed:
        raise TrainError(f"--resume {out}: the config differs from the run's {CONFIG_FILE} in "
                         + "; ".join(changed) + f" (only {', '.join(sorted(RESUMABLE_KEYS))} may change)")
    path.write_text(dump_config(cfg), encoding="utf-8")
    return cfg


def trim_past(out: Path, step: int, version: int) -> None:
    """Remove what steps >= `step` left (metrics lines, rollout folders) and evaluations of
    versions > `version`: the resumed run redoes them."""
    MetricsSink(out / METRICS_FILE).truncate_after(step)
    for folder in (out / ROLLOUTS_DIR).glob("step_*"):
        if folder.name[5:].isdigit() and int(folder.name[5:]) >= step:
            shutil.rmtree(folder)
    for folder in (out / EVAL_DIR).glob("v*"):
        if folder.name[1:].isdigit() and int(folder.name[1:]) > version:
            shutil.rmtree(folder)
