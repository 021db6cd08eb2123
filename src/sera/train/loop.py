"""`sera train`: the synchronous RL loop (trainer-design §3.1-3.4, §3.9), in one file.

One step = one round = one stage:

    stage  = clock.stage                               # a function of the policy version
    tasks  = cursor.take(batch_tasks)                  # seeded permutation of the training split
    trees  = K rollouts per task, `concurrency` at once, with the in-process sampler
    batch  = build_batch(trees per task, stage, ...)   # credit, depth weights
    if trainable datums < min_trainable_datums: skip   # the clock does not advance
    else:  learner.train_step(batch.datums, loss)      # one optimizer step; version += 1
    save trees, checkpoint (every N updates, at the end, on SIGTERM/SIGINT), one metrics line

The sampler is a `TransformersSampler` over the learner's own `nn.Module`, so the weights it
samples with are the weights just trained (no sync step); it must be idle during the update,
which `InFlight` checks. Every tree gets a seed derived from (run seed, step, task id, k) and
every model call a seed derived from the tree seed and its prompt, so a resumed run samples what
an uninterrupted one would have (up to the float rounding of differently composed batches).

Counters: `step` counts rounds, trained or skipped (seeds, cursor, metrics lines, rollout
folders); `version` counts optimizer updates (stage, `max_steps`, checkpoint cadence).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from sera.envs.registry import EnvSpec, get_env
from sera.envs.selection import TaskSelection, select_tasks
from sera.eval.names import task_file_name
from sera.eval.seeds import sample_seed
from sera.eval.store import save_tree
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.train.checkpoint import capture_rng, load_latest, restore_rng, save_checkpoint
from sera.train.collect import Collector
from sera.train.config import TrainConfig, config_diff, dump_config, load_config
from sera.train.learner import LearnerConfig, LoraSettings, TorchLearner, load_causal_lm
from sera.train.metrics import METRICS_FILE, MetricsSink
from sera.train.schedule import StageClock
from sera.train.stage_data import build_batch
from sera.types import Message, RolloutTree, Task

CONFIG_FILE = "config.yaml"
"""The resolved config of the run, in the run directory."""
CKPT_DIR = "checkpoints"
"""Checkpoints of the run (`sera.train.checkpoint` layout)."""
ROLLOUTS_DIR = "rollouts"
"""Trees of each step: `rollouts/step_NNNNN/<task>.<k>.json`."""
RESUMABLE_KEYS = frozenset({"steps.max_steps"})
"""Config keys `--resume` may change: extending a run is not a different run."""

TreePolicy = Callable[[Policy, Task, int], Policy]
"""`(sampler policy, task, k) -> the policy of tree k of the task`; the default returns the
sampler. A seam for tests (e.g. a scripted expert on some trees, so a random model's groups have
mixed outcomes), never for the paper's runs."""


class TrainError(RuntimeError):
    """The run cannot start or continue; the message says why (config change, too many skips)."""


# -- state -----------------------------------------------------------------------------------------


@dataclass
class LoopState:
    """What the loop carries between steps besides the learner and the RNGs (all checkpointed)."""

    step: int = 0
    """Rounds done, trained or skipped; the next round's index."""
    cursor: int = 0
    """Index of the next task in the endless seeded task stream (`task_at`)."""
    consecutive_skips: int = 0
    """Skipped rounds in a row (reset by a trained round)."""
    skipped_trainable: list[int] = field(default_factory=list)
    """Trainable-datum counts of the current run of skipped rounds (for the abort message)."""


def task_at(tasks: list[Task], seed: int, index: int) -> Task:
    """Task `index` of the endless stream: epoch e is a permutation of `tasks` seeded by (seed, e),
    so the order is fixed by the config and the cursor alone."""
    epoch, position = divmod(index, len(tasks))
    order = list(range(len(tasks)))
    random.Random(f"{seed}/epoch/{epoch}").shuffle(order)
    return tasks[order[position]]


def take_tasks(tasks: list[Task], seed: int, cursor: int, n: int) -> tuple[list[Task], int]:
    """The next `n` distinct tasks of the stream from `cursor`, and the cursor after them. Across
    an epoch boundary a task can come up twice in a row: the repeat is passed over (one task's
    trees form one LOO group), so the stream stays a function of the cursor."""
    if n > len(tasks):
        raise TrainError(f"rollout.batch_tasks={n} but the training split has only {len(tasks)} tasks")
    chosen: list[Task] = []
    while len(chosen) < n:
        task = task_at(tasks, seed, cursor)
        cursor += 1
        if all(task.id != t.id for t in chosen):
            chosen.append(task)
    return chosen, cursor


# -- the sampler side --------------------------------------------------------------------------------


class InFlight:
    """Counts policy calls in flight, so the loop can assert the sampler is idle while training."""

    def __init__(self) -> None:
        self.count = 0
        """Calls started and not yet returned."""
        self.calls = 0
        """Calls made so far."""


class SeededPolicy:
    """A tree's policy: each call gets a seed from the tree seed, the prompt and how often that
    prompt came before in this tree, so the call order between concurrent agents does not change
    what is sampled; calls are counted in `InFlight`."""

    def __init__(self, inner: Policy, tree_seed: int, inflight: InFlight) -> None:
        self.inner = inner
        self.tree_seed = tree_seed
        self.inflight = inflight
        self._seen: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:  # max_positions, chat_ids, ... of the sampler
        return getattr(self.inner, name)

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        key = hashlib.sha256(json.dumps([[m.role, m.content] for m in messages]).encode()).hexdigest()
        n = self._seen.get(key, 0)
        self._seen[key] = n + 1
        seed = sample_seed(self.tree_seed, key, n)
        self.inflight.count += 1
        self.inflight.calls += 1
        try:
            return await self.inner(messages, replace(sampling, seed=seed))
        finally:
            self.inflight.count -= 1


def default_tree_policy(policy: Policy, task: Task, k: int) -> Policy:
    """Every tree samples from the model being trained."""
    return policy


# -- setup -------------------------------------------------------------------------------------------


def load_model(cfg: TrainConfig) -> tuple[torch.nn.Module, Any]:
    """`tiny` (the random test model, seeded by the config seed), `smollm2` or a local path."""
    if cfg.model.name == "tiny":
        from sera.testing.tiny import tiny_model_and_tokenizer

        return tiny_model_and_tokenizer(seed=cfg.seed)
    return load_causal_lm(cfg.model.name)


def make_learner(cfg: TrainConfig, model: torch.nn.Module, tokenizer: Any) -> TorchLearner:
    """The learner the config describes (loss options per loss, LoRA, dtype, device)."""
    loss = cfg.loss
    options = {"cispo": {"clip_low": loss.clip_low, "clip_high": loss.clip_high},
               "ppo_clip": {"eps_low": loss.ppo_eps_low, "eps_high": loss.ppo_eps_high}}.get(loss.name, {})
    lora = LoraSettings(rank=cfg.model.lora_rank, alpha=cfg.model.lora_alpha) if cfg.model.finetune == "lora" else None
    o = cfg.optimizer
    return TorchLearner(model, LearnerConfig(
        loss=loss.name, loss_options=options, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay,
        max_grad_norm=o.grad_clip, dtype="bfloat16" if cfg.model.dtype == "bf16" else "float32",
        device=cfg.model.device, gradient_checkpointing=cfg.model.gradient_checkpointing, lora=lora,
        pad_id=tokenizer.pad_token_id or 0,
    ), tokenizer=tokenizer)


def make_judge(cfg: TrainConfig) -> Any:
    """The external judge client, or None when the config has no judge."""
    if cfg.judge is None:
        return None
    from sera.judge.client import JudgeClient

    return JudgeClient(cfg.judge.base_url, cfg.judge.model, api_key=os.environ.get(cfg.judge.api_key_env, "EMPTY"),
                       max_concurrency=cfg.judge.max_concurrency)


def runtime_config(cfg: TrainConfig, spec: EnvSpec) -> RuntimeConfig:
    """Budgets and agent sampling of training rollouts (stop strings from the environment)."""
    r = cfg.rollout
    sampling = replace(spec.sampling, temperature=r.agent_temperature, max_tokens=r.max_tokens,
                       max_prompt_tokens=r.max_prompt_tokens, logprobs=True)
    return RuntimeConfig(max_calls_per_agent=r.max_calls_per_agent, max_depth=r.max_depth, sampling=sampling)


def training_tasks(cfg: TrainConfig, spec: EnvSpec) -> list[Task]:
    """The selected training tasks, in the split's order (the cursor permutes them)."""
    e = cfg.environment
    return select_tasks(spec, TaskSelection(split=e.split, tasks_file=e.tasks_file, difficulty=e.difficulty, rules=e.rules))


# -- the run directory ---------------------------------------------------------------------------------


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


def trim_past(out: Path, step: int) -> None:
    """Remove what steps >= `step` left (metrics lines, rollout folders): the resumed run redoes them."""
    MetricsSink(out / METRICS_FILE).truncate_after(step)
    for folder in (out / ROLLOUTS_DIR).glob("step_*"):
        if folder.name[5:].isdigit() and int(folder.name[5:]) >= step:
            shutil.rmtree(folder)


# -- signals --------------------------------------------------------------------------------------------


@contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """While inside, SIGTERM and SIGINT only record themselves (the loop checkpoints at the end
    of the step and exits); the previous handlers come back afterwards."""
    received: list[int] = []
    handlers = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            handlers[sig] = signal.signal(sig, lambda signum, _frame: received.append(signum))
    except ValueError:  # not the main thread: no handlers (the caller stops the run another way)
        pass
    try:
        yield received
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


# -- the loop -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """How `run_train` ended."""

    steps: int
    """Rounds done in total (this invocation and earlier ones)."""
    version: int
    """Optimizer updates done in total."""
    stopped_by: str | None
    """The signal name that stopped the run early; None when it reached `max_steps`."""


def run_train(
    cfg: TrainConfig | None, out: str | Path, *, resume: bool = False, tree_policy: TreePolicy | None = None,
    log: Callable[[str], None] = print,
) -> RunResult:
    """Train `cfg` into `out` (or resume the run there, with `cfg` None or a config that differs
    only in `RESUMABLE_KEYS`)."""
    out = Path(out)
    cfg = prepare_run(out, cfg, resume=resume)
    spec = get_env(cfg.environment.name)
    method = cfg.resolved_method()
    env_training = spec.training
    if cfg.steps.zero_variance is not None:
        env_training = replace(env_training, filter_zero_variance=cfg.steps.zero_variance == "drop_refill")
    for missing, on in (("eval.every", cfg.eval.every), ("logging.tensorboard", cfg.logging.tensorboard),
                        ("logging.wandb_project", cfg.logging.wandb_project), ("steps.max_refill_waves", cfg.steps.max_refill_waves)):
        if on:
            log(f"note: {missing}={on!r} is not implemented by this loop yet; ignored")
    tasks = training_tasks(cfg, spec)

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model, tokenizer = load_model(cfg)
    learner = make_learner(cfg, model, tokenizer)
    from sera.policy.transformers_sampler import TransformersSampler

    # The sampler shares the learner's module: what it samples with is what was just trained.
    sampler = TransformersSampler(learner.model, tokenizer, max_batch_size=max(1, cfg.rollout.concurrency))
    inflight = InFlight()
    collector = Collector(sampler, method, spec, runtime_config(cfg, spec), make_judge(cfg))
    clock = StageClock(method.stage_schedule)
    state = LoopState()
    metrics = MetricsSink(out / METRICS_FILE)
    ckpt_dir = out / CKPT_DIR

    if resume and (ckpt := load_latest(ckpt_dir)) is not None:
        learner.load_state_dict(torch.load(ckpt.file("learner.pt"), weights_only=True))
        restore_rng(torch.load(ckpt.file("rng.pt"), weights_only=True))
        saved = ckpt.read_json("state.json")
        clock.load_state_dict(saved["clock"])
        state = LoopState(**saved["loop"])
        trim_past(out, state.step)
        metrics.ensure_last(ckpt.read_json("last_metrics.json"))
        log(f"resumed {out} at step {state.step}, policy version {clock.version} ({ckpt.path.name})")
    elif resume:
        trim_past(out, 0)

    def checkpoint(last: dict[str, Any] | None) -> float:
        start = time.perf_counter()
        weights = learner.state_dict()
        loop_state = {"clock": clock.state_dict(), "loop": asdict(state)}
        files = {
            "learner.pt": lambda f: torch.save(weights, f),
            "rng.pt": lambda f: torch.save(capture_rng(), f),
            "state.json": json.dumps(loop_state, indent=1).encode(),
            "last_metrics.json": json.dumps(last).encode(),
        }
        save_checkpoint(ckpt_dir, files, step=state.step, version=clock.version, round=state.step,
                        keep_last=cfg.checkpoint.keep_last)
        return time.perf_counter() - start

    stopped_by = None
    checkpointed_at = state.step if resume else -1
    try:
        with stop_on_signals() as received:
            while clock.version < cfg.steps.max_steps and not received:
                record = run_step(cfg, state, clock, tasks, collector, sampler, tree_policy or default_tree_policy,
                                  inflight, learner, method, env_training, tokenizer, out)
                trained = record["trained"]
                due = trained and clock.version % cfg.checkpoint.every == 0
                final = clock.version >= cfg.steps.max_steps
                aborting = state.consecutive_skips >= cfg.steps.max_consecutive_skips
                record["time/checkpoint"] = 0.0
                if due or final or aborting or received:
                    record["time/checkpoint"] = checkpoint(record)
                    checkpointed_at = state.step
                record["time/step"] += record["time/checkpoint"]
                metrics.append(record)
                log(_summary(record))
                if aborting:
                    raise TrainError(
                        f"{state.consecutive_skips} consecutive steps skipped (steps.max_consecutive_skips="
                        f"{cfg.steps.max_consecutive_skips}): trainable datums per step {state.skipped_trainable}, "
                        f"steps.min_trainable_datums={cfg.steps.min_trainable_datums}; last step's counts: "
                        f"{ {k[7:]: v for k, v in record.items() if k.startswith('credit/')} }"
                    )
            if received:
                stopped_by = signal.Signals(received[0]).name
                if checkpointed_at != state.step:
                    checkpoint(None)
                log(f"{stopped_by}: checkpointed at step {state.step}, policy version {clock.version}; "
                    f"continue with: sera train --resume {out}")
    finally:
        asyncio.run(sampler.close())
    return RunResult(steps=state.step, version=clock.version, stopped_by=stopped_by)


def run_step(
    cfg: TrainConfig, state: LoopState, clock: StageClock, tasks: list[Task], collector: Collector,
    sampler: Policy, tree_policy: TreePolicy, inflight: InFlight, learner: TorchLearner, method: Any,
    env_training: Any, tokenizer: Any, out: Path,
) -> dict[str, Any]:
    """One round: sample, credit, maybe update; advances `state` and `clock`; returns its metrics."""
    t0 = time.perf_counter()
    stage, version, step = clock.stage, clock.version, state.step
    chosen, cursor = take_tasks(tasks, cfg.seed, state.cursor, cfg.rollout.batch_tasks)
    K = cfg.rollout.trees_per_task
    spec = collector.env

    # Sampling: K trees per task, at most `concurrency` at once.
    async def sample_all() -> list[list[RolloutTree]]:
        gate = asyncio.Semaphore(cfg.rollout.concurrency)

        async def one(task: Task, k: int) -> RolloutTree:
            seed = sample_seed(cfg.seed, f"{step}/{task.id}", k)
            policy = SeededPolicy(tree_policy(sampler, task, k), seed, inflight)
            async with gate:
                return await replace(collector, policy=policy).collect(
                    task, spec.root_env(task), stage, seed=seed, policy_version=version)

        flat = await asyncio.gather(*(one(task, k) for task in chosen for k in range(K)))
        return [list(flat[i * K:(i + 1) * K]) for i in range(len(chosen))]

    groups = asyncio.run(sample_all())
    t1 = time.perf_counter()
    folder = out / ROLLOUTS_DIR / f"step_{step:05d}"
    for task, trees in zip(chosen, groups):
        for k, tree in enumerate(trees):
            save_tree(folder / f"{task_file_name(task.id)}.{k}.json", tree)
    t2 = time.perf_counter()

    # Credit.
    batch = build_batch(groups, stage, method, env_training, tokenizer.decode)
    trainable = batch.counts["trainable_datums"]
    t3 = time.perf_counter()

    # Update, or skip (the clock stays; the next round samples new tasks with new seeds).
    record: dict[str, Any] = {"step": step, "policy_version": version, "stage": stage}
    if trainable >= cfg.steps.min_trainable_datums:
        assert inflight.count == 0, f"{inflight.count} sampler calls in flight during the update"
        stats = learner.train_step(batch.datums)
        clock.record_update(True)
        state.consecutive_skips, state.skipped_trainable = 0, []
        fb = stats.forward_backward
        record.update(trained=True, skip_reason=None, loss=fb.loss, grad_norm=stats.optim.grad_norm,
                      lr=stats.optim.lr, trained_tokens=fb.trained_tokens,
                      **{f"learner/{k}": v for k, v in stats.as_dict().items()})
    else:
        clock.record_update(False)
        state.consecutive_skips += 1
        state.skipped_trainable.append(trainable)
        record.update(trained=False, loss=None, grad_norm=None, lr=None, trained_tokens=0,
                      skip_reason=f"{trainable} trainable datums < steps.min_trainable_datums={cfg.steps.min_trainable_datums}")
    t4 = time.perf_counter()
    state.step += 1
    state.cursor = cursor

    trees = [t for g in groups for t in g]
    record.update({
        "tasks": [t.id for t in chosen],
        "trees": len(trees),
        "root_success": sum(bool(t.root_success) for t in trees) / len(trees),
        "datums": batch.counts["datums"],
        "trainable_datums": trainable,
        "consecutive_skips": state.consecutive_skips,
        "sampler_calls": inflight.calls,
        **{f"credit/{k}": v for k, v in sorted(batch.counts.items())},
        "time/sampling": t1 - t0, "time/save_trees": t2 - t1, "time/credit": t3 - t2, "time/update": t4 - t3,
        "time/step": t4 - t0,
    })
    return record


def _summary(r: dict[str, Any]) -> str:
    did = f"loss {r['loss']:.4g} grad_norm {r['grad_norm']:.3g}" if r["trained"] else f"skipped ({r['skip_reason']})"
    return (f"step {r['step']} v{r['policy_version']} {r['stage']}: success {r['root_success']:.2f}, "
            f"{r['trainable_datums']}/{r['datums']} trainable datums, {did}, {r['time/step']:.1f}s")
