"""`sera train`: the synchronous RL loop (trainer-design §3.1-3.4, §3.9).

One step = one round = one stage:

    stage  = clock.stage                               # a function of the policy version
    tasks  = cursor.take(batch_tasks)                  # seeded permutation of the training split
    trees  = K rollouts per task, `concurrency` at once (`sample_round`)
             drop+refill: zero-variance tasks are replaced by new ones, `max_refill_waves` times
    batch  = build_batch(trees per task, stage, ...)   # credit, depth weights
    if trainable datums < min_trainable_datums: skip   # the clock does not advance
    else:  learner.train_step(batch.datums)            # one optimizer step; version += 1
           sync.sync(learner, version)                 # the sampler serves it; canary
           evaluate every `eval.every` versions
    checkpoint (every N updates, at the end, on SIGTERM/SIGINT), one metrics line

The sampler comes from a backend (`sera.serving`, opened from `sampler.backend` by
`sera.train.sampler_setup`): in process, a `TransformersSampler` over the learner's own
`nn.Module` (no copy, a canary after each update); or a vLLM server serving the policy as a
hot-loaded LoRA adapter (`sera.serving.vllm_backend`). It
must be idle during the update, unless `steps.max_offpolicy_versions` ≥ 1 lets the next round be
sampled then from the sampler's own copy of the weights (`sera.train.lookahead`); it is idle
during every sync. A round with an infrastructure failure (a sampler call that
failed on the server's side) is never trained: the backend recovers and the round is sampled
again with the same seeds, once (`sera.train.infra`). A failed sync after an update checkpoints
the update and stops the run. Seeds come from (run seed, step, task id, k) and the prompt
(`sera.train.sampling`), so a resumed run samples what an uninterrupted one would have on worlds
whose trees do not depend on timing.

Counters: `step` counts rounds, trained or skipped (seeds, cursor, metrics lines, rollout
folders); `version` counts optimizer updates (stage, `max_steps`, checkpoint and eval cadence).
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import signal
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from sera.checkpoints.store import capture_rng, load_latest, restore_rng, save_checkpoint
from sera.envs.registry import EnvSpec, EnvTraining, get_env
from sera.eval.names import task_file_name
from sera.eval.seeds import sample_seed
from sera.eval.store import save_tree
from sera.serving.backends import SamplerBackend
from sera.sandbox.config import ensure_workers
from sera.serving.errors import InfraFailure
from sera.serving.weight_sync import SyncError
from sera.train.collect import Collector
from sera.train.config import TrainConfig
from sera.train.infra import sample_cleanly
from sera.train.learner import TorchLearner
from sera.train.lookahead import Lookahead, may_sample_ahead, metrics as lookahead_metrics
from sera.train.method import Method
from sera.train.metrics import METRICS_FILE, MetricsSink
from sera.train.progress import Progress
from sera.train.ray_rollouts import RayRollouts
from sera.train.run_dir import (
    CKPT_DIR, CONFIG_FILE, EVAL_DIR, ROLLOUTS_DIR, RESUMABLE_KEYS, NoLearningSignal, TrainError, prepare_run, trim_past,
)
from sera.train.sampler_setup import open_backend, serving_base_if_needed
from sera.train.sampling import InFlight, SeededPolicy, TreePolicy, default_tree_policy
from sera.train.schedule import StageClock
from sera.train.sharded_learner import ShardedLearner
from sera.train.signals import stop_on_signals
from sera.train.sinks import open_sinks
from sera.train.step_metrics import batch_metrics, tree_metrics
from sera.train.setup import (
    eval_tasks, load_model, make_collector, make_judge, make_train_learner, runtime_config, training_tasks,
)
from sera.train.stage_data import build_batch
from sera.types import RolloutTree, Task

__all__ = ["CKPT_DIR", "CONFIG_FILE", "RESUMABLE_KEYS", "NoLearningSignal", "RunResult", "TrainError", "run_train"]


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


def take_tasks(tasks: list[Task], seed: int, cursor: int, n: int, exclude: set[str] = frozenset()) -> tuple[list[Task], int]:
    """The next `n` tasks of the stream from `cursor` not in `exclude` and distinct, and the cursor
    after them. Across an epoch boundary (or in a refill wave) a task can come up again: the
    repeat is passed over (one task's trees form one LOO group), so the stream stays a function
    of the cursor."""
    if n + len(exclude) > len(tasks):
        raise TrainError(f"a round needs {n + len(exclude)} distinct tasks (rollout.batch_tasks and refills) "
                         f"but the training split has only {len(tasks)}")
    chosen: list[Task] = []
    taken = set(exclude)
    while len(chosen) < n:
        task = task_at(tasks, seed, cursor)
        cursor += 1
        if task.id not in taken:
            chosen.append(task)
            taken.add(task.id)
    return chosen, cursor


# -- one round's sampling ---------------------------------------------------------------------------


@dataclass
class Round:
    """The trees of one round and how they were drawn."""

    tasks: list[Task]
    """Every task sampled this round, in order (refills after the first draw)."""
    groups: list[list[RolloutTree]]
    """The K trees of each task, aligned with `tasks`."""
    usable: list[bool]
    """Aligned with `tasks`: the group has a trainable datum on its own."""
    waves: int = 0
    """Refill waves drawn after the first."""
    cursor: int = 0
    """The task cursor after this round."""


class TreeSampler:
    """Samples the K trees of tasks for one round with the collector, `concurrency` at once."""

    def __init__(self, cfg: TrainConfig, collector: Collector, policy: Any, tree_policy: TreePolicy,
                 inflight: InFlight) -> None:
        self.cfg, self.collector, self.policy, self.tree_policy, self.inflight = cfg, collector, policy, tree_policy, inflight

    def sample(self, tasks: list[Task], step: int, stage: str, version: int) -> list[list[RolloutTree]]:
        K, spec = self.cfg.rollout.trees_per_task, self.collector.env

        async def sample_all() -> list[RolloutTree]:
            gate = asyncio.Semaphore(self.cfg.rollout.concurrency)

            async def one(task: Task, k: int) -> RolloutTree:
                seed = sample_seed(self.cfg.seed, f"{step}/{task.id}", k)
                policy = SeededPolicy(self.tree_policy(self.policy, task, k), seed, self.inflight, version)
                async with gate:
                    return await replace(self.collector, policy=policy).collect(
                        task, spec.root_env(task), stage, seed=seed, policy_version=version)

            return await asyncio.gather(*(one(task, k) for task in tasks for k in range(K)))

        flat = asyncio.run(sample_all())
        return [list(flat[i * K:(i + 1) * K]) for i in range(len(tasks))]


def open_sampling(cfg: TrainConfig, out: Path, spec: EnvSpec, learner: Any, tokenizer: Any, inflight: InFlight,
                  base_dir: Path | None, tree_policy: TreePolicy) -> tuple[SamplerBackend, TreeSampler | RayRollouts]:
    """Where the run samples: Ray rollout workers (`ray.address`), which are their own backend
    (in front of the run's vLLM server with `sampler.backend: vllm`), else the config's backend
    (in process or vLLM) and a `TreeSampler` over its policy."""
    # A round's trees keep their sandbox workers while the model samples (and one more round
    # samples ahead during the update with steps.max_offpolicy_versions).
    ensure_workers(max(1, cfg.rollout.concurrency) * (1 + cfg.steps.max_offpolicy_versions))
    if cfg.ray.address is not None:
        server = open_backend(cfg, out, learner, tokenizer, inflight, base_dir) if cfg.sampler.backend == "vllm" else None
        try:
            rollouts = RayRollouts(cfg, tree_policy, inflight, server=server, tokenizer=tokenizer)  # type: ignore[arg-type]
        except BaseException:
            if server is not None:
                server.close()
            raise
        return rollouts, rollouts
    backend = open_backend(cfg, out, learner, tokenizer, inflight, base_dir)
    collector = make_collector(cfg, spec, backend.policy, make_judge(cfg))
    return backend, TreeSampler(cfg, collector, backend.policy, tree_policy, inflight)


def sample_round(cfg: TrainConfig, state: LoopState, tasks: list[Task], sampler: TreeSampler, stage: str, version: int,
                 method: Method, env: EnvTraining, decode: Callable[..., str]) -> Round:
    """The first draw of `batch_tasks` tasks and, when zero-variance tasks are dropped and refilled,
    up to `steps.max_refill_waves` waves replacing the unusable ones with new tasks."""
    chosen, cursor = take_tasks(tasks, cfg.seed, state.cursor, cfg.rollout.batch_tasks)
    rnd = Round(tasks=[], groups=[], usable=[], cursor=cursor)
    while True:
        groups = sampler.sample(chosen, state.step, stage, version)
        rnd.tasks += chosen
        rnd.groups += groups
        rnd.usable += [build_batch([g], stage, method, env, decode).counts["trainable_datums"] > 0 for g in groups]
        missing = cfg.rollout.batch_tasks - sum(rnd.usable)
        if not env.filter_zero_variance or missing <= 0 or rnd.waves >= cfg.steps.max_refill_waves:
            return rnd
        rnd.waves += 1
        chosen, rnd.cursor = take_tasks(tasks, cfg.seed, rnd.cursor, missing, exclude={t.id for t in rnd.tasks})


# -- the loop -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """How `run_train` ended."""

    steps: int
    """Rounds done in total (this invocation and earlier ones)."""
    version: int
    """Optimizer updates done in total."""
    stopped_by: str | None
    """Why the run stopped before `max_steps`: a signal name, or `deadline` (the `deadline`
    argument of `run_train` left no time for another step); None when it reached `max_steps`."""


@dataclass
class Trainer:
    """The parts of a run; `step()` does one round."""

    cfg: TrainConfig
    """The resolved config."""
    out: Path
    """The run directory."""
    spec: EnvSpec
    """The environment."""
    method: Method
    """Credit rules and schedule (`cfg.resolved_method()`)."""
    env_training: EnvTraining
    """The environment's credit settings, with `steps.zero_variance` applied."""
    tasks: list[Task]
    """The training tasks the cursor walks."""
    learner: TorchLearner | ShardedLearner
    """The learner (in process, its module is also the sampler's unless the sampler has a copy)."""
    tokenizer: Any
    """The model's tokenizer (credit decodes launch spans with it)."""
    sampler: TreeSampler | RayRollouts
    """Samples a round's trees (in this process, or on Ray workers)."""
    backend: SamplerBackend
    """Where rounds are sampled: brings the sampler to the new weights after an update (with the
    canary) and recovers it after an infrastructure failure."""
    clock: StageClock
    """Stage by policy version."""
    state: LoopState
    """Step, cursor and skip counters."""
    inflight: InFlight
    """Sampler calls in flight (0 during an update, unless a round is being sampled ahead)."""
    evaluator: Callable[[int], dict[str, Any]] | None
    """Periodic evaluation of a version, returning its metrics; None when `eval.every` is 0."""
    lookahead: Lookahead[tuple[Round, Any]] | None = None
    """The round sampled during the update (`steps.max_offpolicy_versions` ≥ 1); None: on-policy."""

    def step(self) -> dict[str, Any]:
        """One round: sample, credit, maybe update, sync and evaluate; advances `state` and
        `clock`; returns its metrics line (without the checkpoint time)."""
        cfg, state, clock = self.cfg, self.state, self.clock
        t0 = time.perf_counter()
        stage, version, step = clock.stage, clock.version, state.step
        ahead = self.lookahead.take(step, state.cursor, stage, version) if self.lookahead is not None else None
        if ahead is None:
            (rnd, clean), sampled_by = self._sample(state, stage, version), version
        else:
            (rnd, clean), sampled_by = ahead
        t1 = time.perf_counter()
        folder = self.out / ROLLOUTS_DIR / f"step_{step:05d}"
        for task, trees in zip(rnd.tasks, rnd.groups):
            for k, tree in enumerate(trees):
                save_tree(folder / f"{task_file_name(task.id)}.{k}.json", tree)
        t2 = time.perf_counter()

        # Credit over every group: the dropped ones add no datum, and their counts are recorded.
        batch = build_batch(rnd.groups, stage, self.method, self.env_training, self.tokenizer.decode)
        trainable = batch.counts["trainable_datums"]
        t3 = time.perf_counter()

        record: dict[str, Any] = {"step": step, "policy_version": version, "stage": stage,
                                  "infra/resampled_rounds": clean.resampled, "infra/restarts": clean.restarts,
                                  **lookahead_metrics(self.lookahead, ahead is not None, version - sampled_by),
                                  "offpolicy/datum_lag_max": max((version - d.policy_version for d in batch.datums
                                                                  if d.policy_version is not None), default=0)}
        if clean.first_failure is not None:
            record["infra/failure"] = clean.first_failure  # why the first sampling was discarded
        timing = {"sampling": t1 - t0, "save_trees": t2 - t1, "credit": t3 - t2, "update": 0.0, "wait_ahead": 0.0,
                  "sync": 0.0, "eval": 0.0}
        if trainable >= cfg.steps.min_trainable_datums:
            if not self._sample_ahead(rnd.cursor):
                busy = self.inflight.count
                if busy:
                    raise RuntimeError(f"{busy} sampler calls in flight during the update")
                self.backend.before_update()
            t4 = time.perf_counter()
            stats = self.learner.train_step(batch.datums)
            timing["update"] = time.perf_counter() - t4
            if self.lookahead is not None:
                t6 = time.perf_counter()
                self.lookahead.wait()  # the sync needs an idle sampler
                timing["wait_ahead"] = time.perf_counter() - t6
            clock.record_update(True)
            state.consecutive_skips, state.skipped_trainable = 0, []
            fb = stats.forward_backward
            record.update(trained=True, skip_reason=None, loss=fb.loss, grad_norm=stats.optim.grad_norm,
                          lr=stats.optim.lr, trained_tokens=fb.trained_tokens,
                          **{f"learner/{k}": v for k, v in stats.as_dict().items()})
            t5 = time.perf_counter()
            try:
                report = self.backend.sync(self.learner, clock.version)
            except SyncError as exc:  # the run checkpoints this update and stops (`run_train`)
                record["sync/error"] = " ".join(str(exc).split())
                report = None
            timing["sync"] = time.perf_counter() - t5
            if report is not None:
                record.update(report.as_metrics())
            if report is not None and self.evaluator is not None and cfg.eval.every and clock.version % cfg.eval.every == 0:
                t5 = time.perf_counter()
                record.update(self.evaluator(clock.version))
                timing["eval"] = time.perf_counter() - t5
        else:
            clock.record_update(False)
            state.consecutive_skips += 1
            state.skipped_trainable.append(trainable)
            record.update(trained=False, loss=None, grad_norm=None, lr=None, trained_tokens=0,
                          skip_reason=f"{trainable} trainable datums < steps.min_trainable_datums={cfg.steps.min_trainable_datums}")
        state.step += 1
        state.cursor = rnd.cursor

        trees = [t for g in rnd.groups for t in g]
        record.update({
            "tasks": [t.id for t in rnd.tasks],
            "trees": len(trees),
            "root_success": sum(bool(t.root_success) for t in trees) / len(trees),
            "datums": batch.counts["datums"],
            "trainable_datums": trainable,
            "consecutive_skips": state.consecutive_skips,
            "sampler_calls": self.inflight.calls,
            "refill/waves": rnd.waves,
            "refill/tasks_drawn": len(rnd.tasks),
            "refill/usable_groups": sum(rnd.usable),
            **{f"credit/{k}": v for k, v in sorted(batch.counts.items())},
            **tree_metrics(rnd.groups, rnd.tasks, margin=cfg.rollout.margin),
            **batch_metrics(batch),
            **{f"time/{k}": v for k, v in timing.items()},
            "time/step": time.perf_counter() - t0,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        })
        return record

    def _sample(self, state: LoopState, stage: str, version: int) -> tuple[Round, Any]:
        """Round `state.step` from `state.cursor`, sampled by `version` (an infrastructure failure
        is resampled once, `sample_cleanly`)."""
        return sample_cleanly(
            lambda: sample_round(self.cfg, state, self.tasks, self.sampler, stage, version, self.method,
                                 self.env_training, self.tokenizer.decode),
            lambda r: r.groups, lambda: self.inflight.failures, self.backend, state.step)

    def _sample_ahead(self, cursor: int) -> bool:
        """Before this step's update: start sampling the next round (from `cursor`) with the
        current weights when `steps.max_offpolicy_versions` allows it, the round will be run
        (not past `max_steps`) and its stage is the same whether or not this update lands."""
        clock = self.clock
        if self.lookahead is None or not may_sample_ahead(clock.schedule, clock.version, self.cfg.steps.max_steps):
            return False
        nxt = replace(self.state, step=self.state.step + 1, cursor=cursor)
        stage, version = clock.stage, clock.version
        self.lookahead.start(nxt.step, cursor, stage, version, lambda: self._sample(nxt, stage, version))
        return True

    def checkpoint(self, last: dict[str, Any] | None) -> float:
        """Save the learner, RNGs, clock, cursor and the step's metrics line; returns seconds."""
        start = time.perf_counter()
        weights = self.learner.state_dict()
        loop_state = {"clock": self.clock.state_dict(), "loop": asdict(self.state)}
        files = {
            "learner.pt": lambda f: torch.save(weights, f),
            "rng.pt": lambda f: torch.save(capture_rng(), f),
            "state.json": json.dumps(loop_state, indent=1).encode(),
            "last_metrics.json": json.dumps(last).encode(),
        }
        save_checkpoint(self.out / CKPT_DIR, files, step=self.state.step, version=self.clock.version,
                        round=self.state.step, keep_last=self.cfg.checkpoint.keep_last)
        return time.perf_counter() - start

    def restore(self, log: Callable[[str], None], *, allow_fallback: bool = False) -> None:
        """Continue from the newest complete checkpoint (or from scratch when there is none),
        dropping what later steps left; a corrupt newest one is an error unless `allow_fallback`
        (then the newest older one that validates is used, and said)."""
        ckpt = load_latest(self.out / CKPT_DIR, allow_fallback=allow_fallback)
        if ckpt is not None and ckpt.fell_back_from:
            log(f"the newest checkpoint is unusable ({ckpt.fell_back_from}); falling back to {ckpt.path.name}")
        if ckpt is None:
            trim_past(self.out, 0, 0)
            return
        self.learner.load_state_dict(torch.load(ckpt.file("learner.pt"), weights_only=True))
        restore_rng(torch.load(ckpt.file("rng.pt"), weights_only=True))
        saved = ckpt.read_json("state.json")
        self.clock.load_state_dict(saved["clock"])
        self.state = LoopState(**saved["loop"])
        trim_past(self.out, self.state.step, self.clock.version)
        MetricsSink(self.out / METRICS_FILE).ensure_last(ckpt.read_json("last_metrics.json"))
        log(f"resumed {self.out} at step {self.state.step}, policy version {self.clock.version} ({ckpt.path.name})")


def make_evaluator(cfg: TrainConfig, spec: EnvSpec, policy: Any, out: Path) -> Callable[[int], dict[str, Any]]:
    """Periodic evaluation through the evaluation harness: `eval.split` (first `eval.limit`
    tasks) at `eval.temperature`, one rollout per task, saved under `eval/v<version>/`."""
    from sera.eval.harness import evaluate

    tasks = eval_tasks(cfg, spec)
    config = runtime_config(cfg, spec, temperature=cfg.eval.temperature)

    def run(version: int) -> dict[str, Any]:
        summary = asyncio.run(evaluate(
            tasks, policy, spec.root_env, out / EVAL_DIR / f"v{version:06d}", env_name=spec.name,
            split=cfg.eval.split, policy_name=f"{cfg.model.name}@v{version}", config=config,
            concurrency=cfg.rollout.concurrency, show_progress=False, seed=cfg.seed,
        ))
        line = {"eval/success": summary.overall.success_rate, "eval/tasks": summary.overall.tasks,
                "eval/errors": summary.overall.errors}
        line.update({f"eval/success/{band}": g.success_rate for band, g in summary.by_difficulty.items()})
        return line

    return run


def run_train(
    cfg: TrainConfig | None, out: str | Path, *, resume: bool = False, tree_policy: TreePolicy | None = None,
    log: Callable[[str], None] = print, allow_fallback: bool = False, init_from: str | Path | None = None,
    deadline: float | None = None,
) -> RunResult:
    """Train `cfg` into `out` (or resume the run there, with `cfg` None or a config that differs
    only in `RESUMABLE_KEYS`; `allow_fallback`: resume from an older checkpoint when the newest
    is corrupt). `init_from`: a `sera sft` (or `sera train`) run directory whose newest
    checkpoint's weights start the run, with a fresh optimizer (recorded in `init_from.json`;
    a resumed run re-reads that same checkpoint, not the init run's newest, while it has no
    checkpoint of its own, and always with LoRA, whose checkpoints hold only the adapter). `deadline`: a `time.monotonic()` instant; no step starts
    past it, or when the mean step time so far would end past it, and the run checkpoints and
    returns with `stopped_by="deadline"`. The sampler backend (`sampler.backend`; a vLLM server it
    started) is closed on every way out, exceptions and signals included."""
    from sera.train.sft import INIT_FILE, load_init, reload_init

    out = Path(out)
    init = None
    if init_from is not None and not resume:
        assert cfg is not None
        init = load_init(init_from, cfg)  # before the run directory exists: a bad folder leaves nothing behind
    cfg = prepare_run(out, cfg, resume=resume)
    if init is not None:
        (out / INIT_FILE).write_text(json.dumps(init[2], indent=1), encoding="utf-8")
        log(f"weights from {init[2]['identity']} in {init[2]['path']}; fresh optimizer")
    elif resume and (out / INIT_FILE).is_file() and (
            cfg.model.finetune == "lora" or not (out / CKPT_DIR / "latest").is_file()):
        init = reload_init(out, cfg)
    spec = get_env(cfg.environment.name)
    env_training = spec.training
    if cfg.steps.zero_variance is not None:
        env_training = replace(env_training, filter_zero_variance=cfg.steps.zero_variance == "drop_refill")
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model, tokenizer = load_model(cfg) if init is None else init[:2]
    base_dir = serving_base_if_needed(cfg, out, model, tokenizer, init is not None)  # before LoRA goes into `model`
    learner = make_train_learner(cfg, model, tokenizer)
    inflight = InFlight()
    stopped_by = None
    with stop_on_signals() as received, closing(learner):  # from here on a signal only stops the loop
        backend, sampler = open_sampling(cfg, out, spec, learner, tokenizer, inflight, base_dir,
                                         tree_policy or default_tree_policy)
        lookahead = None
        try:
            if cfg.steps.max_offpolicy_versions:
                if not backend.samples_during_update:
                    raise TrainError(
                        f"steps.max_offpolicy_versions={cfg.steps.max_offpolicy_versions} samples the next round while "
                        "the learner steps, but this in-process sampler reads the learner's own weights: set "
                        "sampler.weights: copy (or bf16_copy), use sampler.backend: vllm or --ray, or set it to 0")
                lookahead = Lookahead(cfg.steps.max_offpolicy_versions)
            trainer = Trainer(
                cfg=cfg, out=out, spec=spec, method=cfg.resolved_method(), env_training=env_training,
                tasks=training_tasks(cfg, spec), learner=learner, tokenizer=tokenizer, sampler=sampler,
                backend=backend, clock=StageClock(cfg.resolved_method().stage_schedule), state=LoopState(),
                inflight=inflight,
                evaluator=make_evaluator(cfg, spec, backend.policy, out) if cfg.eval.every else None,
                lookahead=lookahead,
            )
            stopped_by = _train(trainer, cfg, out, resume, allow_fallback, deadline, log, received)
        finally:
            try:
                if lookahead is not None:
                    lookahead.close()  # a round still ahead is dropped before its sampler goes
            finally:
                backend.close()
    return RunResult(steps=trainer.state.step, version=trainer.clock.version, stopped_by=stopped_by)


def _train(trainer: Trainer, cfg: TrainConfig, out: Path, resume: bool, allow_fallback: bool, deadline: float | None,
           log: Callable[[str], None], received: list[int]) -> str | None:
    """`run_train`'s loop over steps, with checkpoints, metrics and the ways it stops; returns `stopped_by`."""
    metrics = MetricsSink(out / METRICS_FILE)
    progress = Progress(cfg.steps.max_steps)
    if progress.interactive:
        log = progress.log  # printing would break the live line
    if resume:
        trainer.restore(log, allow_fallback=allow_fallback)
    sinks = open_sinks(out, tensorboard=cfg.logging.tensorboard, wandb_project=cfg.logging.wandb_project,
                       config=cfg.model_dump(mode="json"), resume_from=trainer.state.step if resume else None)
    stopped_by = None
    clock = trainer.clock
    checkpointed_at = trainer.state.step if resume else -1
    try:
        # The sampler serves the learner's weights before the first round (vLLM: adapter v<version>),
        # and the canary catches one that disagrees with the learner from the start.
        try:
            trainer.backend.sync(trainer.learner, clock.version)
        except SyncError as exc:
            raise TrainError(f"the sampler does not serve policy version {clock.version}: {exc}") from exc
        step_seconds: list[float] = []
        while clock.version < cfg.steps.max_steps and not received:
            expected = sum(step_seconds) / len(step_seconds) if step_seconds else 0.0
            if deadline is not None and time.monotonic() + expected > deadline:
                stopped_by = "deadline"
                break
            started = time.monotonic()
            try:
                record = trainer.step()
            except InfraFailure:  # nothing of the round was trained: keep what the run completed
                if checkpointed_at != trainer.state.step:
                    trainer.checkpoint(None)
                raise
            due = record["trained"] and clock.version % cfg.checkpoint.every == 0
            final = clock.version >= cfg.steps.max_steps
            aborting = trainer.state.consecutive_skips >= cfg.steps.max_consecutive_skips
            sync_failed = record.get("sync/error")
            record["time/checkpoint"] = 0.0
            if due or final or aborting or received or sync_failed:
                record["time/checkpoint"] = trainer.checkpoint(record)
                checkpointed_at = trainer.state.step
            record["time/step"] += record["time/checkpoint"]
            metrics.append(record)
            for sink in sinks:
                sink.write(record["step"], record)
            progress.update(record)
            step_seconds.append(time.monotonic() - started)
            if sync_failed:
                raise TrainError(f"weight sync after the update to policy version {clock.version} failed: {sync_failed}; "
                                 f"the update is checkpointed (step {trainer.state.step}): fix the cause, then "
                                 f"sera train --resume {out}")
            if aborting:
                raise NoLearningSignal(
                    f"{trainer.state.consecutive_skips} consecutive steps skipped (steps.max_consecutive_skips="
                    f"{cfg.steps.max_consecutive_skips}): trainable datums per step {trainer.state.skipped_trainable}, "
                    f"steps.min_trainable_datums={cfg.steps.min_trainable_datums}; last step's counts: "
                    f"{ {k[7:]: v for k, v in record.items() if k.startswith('credit/')} }",
                    steps=trainer.state.step, version=clock.version,
                )
        if received:
            stopped_by = signal.Signals(received[0]).name
            if checkpointed_at != trainer.state.step:
                trainer.checkpoint(None)
            log(f"{stopped_by}: checkpointed at step {trainer.state.step}, policy version {clock.version}; "
                f"continue with: sera train --resume {out}")
        elif stopped_by == "deadline":
            if checkpointed_at != trainer.state.step:
                trainer.checkpoint(None)
            log(f"deadline: no time for another step; checkpointed at step {trainer.state.step}, "
                f"policy version {clock.version}")
    finally:
        for sink in sinks:
            sink.close()
        progress.close()
    return stopped_by
