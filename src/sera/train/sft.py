"""`sera sft`: supervised warm start on the scripted expert's demonstrations.

Demonstrations are rollouts of the environment's scripted expert (`EnvSpec.oracle`) on training
tasks, run through `TokenizingPolicy` with the trained model's tokenizer so that every reply
carries the token ids the model would have produced. With `sft.rubric_demos`, rubric prompts go
to the scripted rubric writer and scorer (`sera.rubric.scripted`) through the frozen-rubric
launcher, so each delegated child also gets the parent's rubric-writing call and its scoring call.
Only trees whose root the verifier passed are kept. Datums come from the RL code path:

- every live agent (root and children, acting and delegating replies alike) through
  `execution_datums` with advantage 1: the trained tokens are exactly the expert's completions,
  prompts and observations are context (prefix-merged turns, `sera.train.datums`); error steps
  are left untrained where the environment says so (TextCraft);
- a child's rubric-writing call (`model_call_datum`, stage `rubric_generation`) when its rubric
  parsed, and its scoring call (stage `rubric_scoring`) when the assessment parsed and its
  success gate agrees with the child's verified outcome.

Training: `sft.epochs` passes over the datums in seeded shuffled batches of `sft.batch_datums`,
one `learner.train_step(batch, "sft")` each (token-mean NLL over the trained tokens, the RL
losses' normalisation). Held-out NLL (nats per trained token) on demonstrations of
`sft.val_tasks` tasks of the held-out split, before training and after each epoch.

The run directory has the layout of `sera train`: `config.yaml`, `metrics.jsonl`,
`checkpoints/` (each with `learner.pt` = `TorchLearner.state_dict()`), plus `demos/{train,val}/`
with the demonstration trees, so `sera eval --policy hf --model OUT` loads it and
`sera train --init-from OUT` starts RL from its weights (`load_init`).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from sera.envs.registry import EnvSpec, EnvTraining, get_env
from sera.envs.selection import TaskSelection, select_tasks
from sera.eval.names import task_file_name
from sera.eval.store import save_tree
from sera.launchers.frozen_rubric import FrozenRubricLauncher
from sera.launchers.rubric_calls import SCORE_SAMPLING, WRITE_SAMPLING, PolicyRubricScorer, PolicyRubricWriter
from sera.runtime.delegation import PlainLauncher
from sera.runtime.rollout import run_rollout
from sera.rubric.scripted import RubricOracle
from sera.policy.checkpoint_model import INIT_RECORD
from sera.policy.tokenizing_policy import TokenizingPolicy
from sera.train.batching import microbatches
from sera.train.config import TrainConfig
from sera.train.datums import Datum, MissingTokensError, execution_datums, model_call_datum
from sera.train.learner import TorchLearner
from sera.train.metrics import METRICS_FILE, MetricsSink
from sera.train.run_dir import CKPT_DIR, TrainError, prepare_run
from sera.train.sft_epochs import SftPosition, restore, train_epochs
from sera.train.signals import stop_on_signals
from sera.train.setup import load_model, make_learner, runtime_config, training_tasks
from sera.types import RolloutTree, Task

DEMOS_DIR = "demos"
"""Demonstration trees of the run: `demos/train/<task>.json`, `demos/val/<task>.json`."""
INIT_FILE = INIT_RECORD
"""In a `sera train --init-from` run directory: which SFT checkpoint the weights came from."""


class SftError(TrainError):
    """SFT cannot run (no successful demonstration); the message is one line."""


class InitFromError(ValueError):
    """`--init-from` names no usable checkpoint; the message is one line naming the file."""


# -- demonstrations ------------------------------------------------------------------------------


@dataclass
class Demonstrations:
    """Datums built from the expert's verified-successful trees, and what was left out."""

    datums: list[Datum] = field(default_factory=list)
    """Training datums (advantage 1, weight 1)."""
    trees: list[RolloutTree] = field(default_factory=list)
    """Every tree collected, successful or not."""
    counts: Counter[str] = field(default_factory=Counter)
    """trees, successful_trees, agents, rubric_calls, score_calls and the reasons for leaving things out."""

    @property
    def trained_tokens(self) -> int:
        return sum(d.n_trainable for d in self.datums)

    def by_stage(self) -> dict[str, int]:
        """Datums per stage (`execution`, `rubric_generation`, `rubric_scoring`)."""
        return dict(Counter(d.stage for d in self.datums))


def expert_policy(spec: EnvSpec, task: Task, tokenizer: Any, *, rubric_demos: bool, expert: str = "default") -> Any:
    """The scripted expert `expert` for `task` (with the scripted rubric writer/scorer), with token ids."""
    agent = spec.oracle([task]) if expert == "default" else spec.experts[expert]([task])
    return TokenizingPolicy(RubricOracle(agent) if rubric_demos else agent, tokenizer)


def sft_runtime(cfg: TrainConfig, spec: EnvSpec) -> Any:
    """The rollout budgets of demonstrations: the run's, with `sft.max_calls_per_agent` if set."""
    runtime = runtime_config(cfg, spec)
    if cfg.sft.max_calls_per_agent is not None:
        runtime = replace(runtime, max_calls_per_agent=cfg.sft.max_calls_per_agent)
    return runtime


async def collect_trees(cfg: TrainConfig, spec: EnvSpec, tasks: Sequence[Task], tokenizer: Any) -> list[RolloutTree]:
    """One expert rollout per task (at most `rollout.concurrency` at once), in task order."""
    runtime = sft_runtime(cfg, spec)
    gate = asyncio.Semaphore(max(1, cfg.rollout.concurrency))
    rubric = cfg.sft.rubric_demos

    async def one(index: int, task: Task) -> RolloutTree:
        policy = expert_policy(spec, task, tokenizer, rubric_demos=rubric, expert=cfg.sft.expert)
        launcher = (FrozenRubricLauncher(
            PolicyRubricWriter(policy, replace(WRITE_SAMPLING, max_tokens=cfg.rollout.rubric_max_tokens)),
            PolicyRubricScorer(policy, replace(SCORE_SAMPLING, max_tokens=cfg.rollout.scorer_max_tokens)),
        ) if rubric else PlainLauncher())
        async with gate:
            return await run_rollout(task, policy, spec.root_env(task), runtime, seed=cfg.seed + index,
                                     launcher=launcher)

    return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))


def tree_datums(tree: RolloutTree, env: EnvTraining, *, key: str, counts: Counter[str]) -> list[Datum]:
    """The datums of one verified-successful tree (see the module docstring); [] otherwise."""
    counts["trees"] += 1
    if not tree.root_success:
        counts["trees_failed"] += 1
        return []
    counts["successful_trees"] += 1
    datums: list[Datum] = []
    for node_id, node in tree.nodes.items():
        if node.skip_gradient:
            counts["agents_skipped"] += 1
            continue
        if node.parent_id is not None and node.verified_success is False:
            counts["children_failed"] += 1  # a child the expert left unfinished is no demonstration
            continue
        try:
            datums += execution_datums(node, 1.0, trajectory_id=f"{key}/{node_id}", drop_error_steps=env.drop_error_steps)
        except MissingTokensError:
            counts["agents_without_token_ids"] += 1
            continue
        counts["agents"] += 1
        if node.parent_id is None:
            continue
        parent = tree.nodes[node.parent_id]
        calls = []
        if node.rubric_call is not None and node.rubric is not None and not node.rubric_call.external:
            calls.append((node.rubric_call, "rubric_generation", "rubric_calls"))
        if node.score_call is not None and node.rubric_score is not None and not node.score_call.external:
            gate = (node.rubric_assessment or {}).get("success")
            if node.verified_success is None:
                counts["score_calls_unverified"] += 1  # no verifier to check the scorer against
            elif isinstance(gate, bool) and gate == node.verified_success:
                calls.append((node.score_call, "rubric_scoring", "score_calls"))
            else:
                counts["score_calls_disagreeing"] += 1
        for call, stage, counter in calls:
            try:
                datums.append(model_call_datum(call, 1.0, trajectory_id=f"{key}/{node_id}/{stage}", node_id=node_id,
                                               depth=parent.depth, stage=stage))
            except MissingTokensError:
                counts[f"{counter}_without_token_ids"] += 1
                continue
            counts[counter] += 1
    return datums


def demonstrations(cfg: TrainConfig, spec: EnvSpec, tasks: Sequence[Task], tokenizer: Any) -> Demonstrations:
    """Collect the expert's trees on `tasks` and turn the successful ones into datums."""
    demos = Demonstrations()
    demos.trees = asyncio.run(collect_trees(cfg, spec, tasks, tokenizer))
    for tree in demos.trees:
        demos.datums += tree_datums(tree, spec.training, key=tree.task_id, counts=demos.counts)
        count_long_replies(tree, cfg.rollout.max_tokens, demos.counts)
    return demos


def count_long_replies(tree: RolloutTree, max_tokens: int, counts: Counter[str]) -> None:
    """Count the agents' demonstrated replies (`replies`) and those longer than the RL and
    evaluation budget per call (`replies_over_max_tokens`): a policy that imitates one of those is
    cut off mid-reply when it samples, so its code cell cannot run."""
    if not tree.root_success:
        return
    for node in tree.nodes.values():
        for step in node.steps:
            if step.completion_token_ids is None:
                continue
            counts["replies"] += 1
            if len(step.completion_token_ids) > max_tokens:
                counts["replies_over_max_tokens"] += 1


def long_reply_warning(counts: Counter[str], max_tokens: int) -> str | None:
    """The warning line when demonstrated replies exceed the sampling budget (`count_long_replies`)."""
    if not counts["replies_over_max_tokens"]:
        return None
    return (f"warning: {counts['replies_over_max_tokens']} of {counts['replies']} demonstrated agent replies are longer "
            f"than rollout.max_tokens={max_tokens}: a policy that imitates them is cut off mid-reply in RL and "
            "evaluation; raise rollout.max_tokens")


# -- held-out NLL --------------------------------------------------------------------------------


def heldout_nll(learner: TorchLearner, datums: Sequence[Datum]) -> tuple[float, int]:
    """`(nats per trained token, trained tokens)` of `datums` under the learner's weights (no grad,
    eval mode, the learner's autocast and masked head)."""
    batches = microbatches(datums, learner.config.max_tokens_per_microbatch, pad_id=learner.config.pad_id)
    total, count = 0.0, 0
    was = learner.model.training
    learner.model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                logprobs = learner.token_logprobs(batch)
                total -= float(logprobs.double().sum())
                count += int(logprobs.numel())
    finally:
        learner.model.train(was)
    return (total / count if count else math.nan), count


# -- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SftResult:
    """How `run_sft` ended."""

    steps: int
    """Optimizer steps taken."""
    nll_before: float
    """Held-out NLL before training (nats/token)."""
    nll_after: float
    """Held-out NLL after the last epoch."""
    train_datums: int
    """Demonstration datums trained on."""
    val_datums: int
    """Held-out demonstration datums."""
    checkpoint: Path
    """The newest checkpoint directory."""
    stopped_by: str | None = None
    """The signal (`SIGINT`, `SIGTERM`) that stopped the run before its last epoch; None: finished."""


def val_split(cfg: TrainConfig, spec: EnvSpec) -> str:
    """`sft.val_split`, else `val`, else `dev`, else the environment's last split."""
    if cfg.sft.val_split is not None:
        return cfg.sft.val_split
    return next((s for s in ("val", "dev") if s in spec.splits), spec.splits[-1])


def sft_tasks(cfg: TrainConfig, spec: EnvSpec) -> tuple[list[Task], list[Task]]:
    """`(train, val)`: a seeded sample of `sft.train_tasks` training tasks (`sft.split` and
    `sft.difficulty` where set, else RL's), and the first `sft.val_tasks` tasks of the held-out
    split in the same difficulty band."""
    e, s = cfg.environment, cfg.sft
    band = s.difficulty if s.difficulty is not None else e.difficulty
    if s.split is None and s.difficulty is None:
        pool = training_tasks(cfg, spec)
    else:
        pool = select_tasks(spec, TaskSelection(split=s.split or e.split, tasks_file=None if s.split else e.tasks_file,
                                                difficulty=band, rules=e.rules))
    train = random.Random(cfg.seed).sample(pool, min(s.train_tasks, len(pool)))
    val = select_tasks(spec, TaskSelection(split=val_split(cfg, spec), difficulty=band, limit=s.val_tasks, rules=e.rules))
    return train, val


def _save_trees(folder: Path, trees: Sequence[RolloutTree]) -> None:
    for tree in trees:
        save_tree(folder / f"{task_file_name(tree.task_id)}.json", tree)


def run_sft(cfg: TrainConfig | None, out: str | Path, *, resume: bool = False,
            log: Callable[[str], None] = print) -> SftResult:
    """Demonstrations, then `sft.epochs` epochs of SFT into the run directory `out`.

    `resume`: continue the run in `out` from its newest checkpoint (`cfg` None: its saved config;
    else one that differs only in `RESUMABLE_KEYS`); the demonstrations are collected again (the
    expert is scripted and seeded: the same datums). SIGINT/SIGTERM stop the run at the next batch
    boundary with a checkpoint (`SftResult.stopped_by`)."""
    out = Path(out)
    if resume:
        cfg = prepare_run(out, cfg, resume=True)  # a refused config costs no demonstrations
    assert cfg is not None
    spec = get_env(cfg.environment.name)
    train_tasks, val_tasks = sft_tasks(cfg, spec)
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_model(cfg)
    t0 = time.perf_counter()
    train = demonstrations(cfg, spec, train_tasks, tokenizer)
    val = demonstrations(cfg, spec, val_tasks, tokenizer)
    demo_seconds = time.perf_counter() - t0
    if not train.datums:
        raise SftError(
            f"no successful demonstration: the scripted expert of {spec.name} solved "
            f"{train.counts['successful_trees']} of {len(train_tasks)} training tasks within "
            f"{sft_runtime(cfg, spec).max_calls_per_agent} calls per agent (raise sft.max_calls_per_agent "
            f"or rollout.max_depth, or pick other tasks); counts: {dict(train.counts)}")
    if not val.datums:
        log(f"warning: no successful demonstration on the {len(val_tasks)} held-out tasks: held-out NLL is nan")
    if not resume:
        cfg = prepare_run(out, cfg, resume=False)
    _save_trees(out / DEMOS_DIR / "train", train.trees)
    _save_trees(out / DEMOS_DIR / "val", val.trees)
    learner = make_learner(cfg, model, tokenizer, lr=cfg.sft.lr, eps=cfg.sft.eps)
    if cfg.model.fsdp_processes > 1:
        log(f"model.fsdp_processes={cfg.model.fsdp_processes} is sera train's: SFT trains in this one process")
    metrics = MetricsSink(out / METRICS_FILE)
    log(f"demonstrations ({demo_seconds:.1f}s): train {train.counts['successful_trees']}/{len(train_tasks)} tasks "
        f"solved, {len(train.datums)} datums {train.by_stage()}, {train.trained_tokens} trained tokens; "
        f"val {val.counts['successful_trees']}/{len(val_tasks)}, {len(val.datums)} datums, {val.trained_tokens} tokens")
    if warning := long_reply_warning(train.counts, cfg.rollout.max_tokens):
        log(warning)

    position = restore(out, learner, metrics) if resume else None
    restored = position is not None
    if restored:
        log(f"resumed {out} at epoch {position.epoch}" + (" (done)" if position.epoch_done else f", batch {position.batch}")
            + f", step {learner.steps}")
    else:
        nll, val_tokens = heldout_nll(learner, val.datums)
        metrics.append({"kind": "eval", "epoch": 0, "step": 0, "loss": None, "heldout_nll": nll, "heldout_tokens": val_tokens,
                        "train_datums": len(train.datums), "train_trained_tokens": train.trained_tokens,
                        "demos/train": dict(train.counts), "demos/val": dict(val.counts), "time/demonstrations": demo_seconds})
        log(f"epoch 0: held-out NLL {nll:.4f} nats/token over {val_tokens} tokens")
        position = SftPosition(epoch=1, batch=0, epoch_done=False, nll_before=nll, nll=nll)
    with stop_on_signals() as received:
        ended = train_epochs(cfg, out, learner, train.datums, val.datums, position, metrics, received, heldout_nll, log,
                             restored=restored)
    done = ended.position
    if ended.stopped_by:
        log(f"{ended.stopped_by}: checkpointed at epoch {done.epoch}, batch {done.batch}, step {learner.steps}; "
            f"continue with: sera sft --resume --out {out}")
    else:
        log(f"held-out NLL {done.nll_before:.4f} -> {done.nll:.4f} nats/token; checkpoint {ended.checkpoint}")
    return SftResult(steps=learner.steps, nll_before=done.nll_before, nll_after=done.nll, train_datums=len(train.datums),
                     val_datums=len(val.datums), checkpoint=ended.checkpoint, stopped_by=ended.stopped_by)


# -- sera train --init-from ----------------------------------------------------------------------


def _same_model(a: str, b: str) -> bool:
    if a == b:
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def load_init(path: str | Path, cfg: TrainConfig) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """`(model, tokenizer, record)`: the base model of `cfg` with the weights of the newest
    checkpoint in the `sera sft` (or `sera train`) run directory `path` applied (a LoRA adapter
    merged). Only weights: the optimizer state is not read. `InitFromError` (one line, naming the
    file) for a folder without a checkpoint or with weights of another model."""
    from sera.policy.checkpoint_model import CheckpointModelError, load_trained, resolve

    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise InitFromError(f"--init-from {path}: no such directory")
    try:
        source = resolve(str(folder))
    except CheckpointModelError as exc:
        raise InitFromError(f"--init-from {exc}".replace("--init-from --model ", "--init-from ")) from None
    if source is None or source.kind != "train":
        raise InitFromError(f"--init-from {path}: {folder / CKPT_DIR} holds no checkpoint (expected the run "
                            f"directory of sera sft or sera train, with config.yaml and checkpoints/)")
    learner_file = source.path / "learner.pt"
    if not _same_model(source.base, cfg.model.name):
        raise InitFromError(f"--init-from {path}: {learner_file} holds weights of model {source.base!r} "
                            f"(its {source.config}), but this run trains model.name={cfg.model.name!r}")
    try:
        model, tokenizer = load_trained(source, merge=True)
    except CheckpointModelError as exc:
        raise InitFromError(f"--init-from {path}: {exc}") from None
    except RuntimeError as exc:  # a tensor of another shape
        first = str(exc).strip().splitlines()
        raise InitFromError(f"--init-from {path}: {learner_file}: the weights do not fit model "
                            f"{cfg.model.name!r}: {first[-1].strip() if first else type(exc).__name__}") from None
    record = {"path": str(folder.resolve()), "checkpoint": str(source.path), "identity": source.identity,
              "base": source.base}
    return model, tokenizer, record


def reload_init(run: Path, cfg: TrainConfig) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """`load_init` for resuming `run`: exactly the checkpoint its `INIT_FILE` records (the init run
    may have written newer ones since), which must still hold the same weights; `TrainError`
    (one line) when the record is unreadable or that checkpoint is gone or changed."""
    from sera.policy.checkpoint_model import read_init_record

    try:
        checkpoint, identity = read_init_record(run / INIT_FILE)
    except ValueError as exc:
        raise TrainError(f"resuming {run}: {exc}; it names the checkpoint whose weights the run started from") from None
    try:
        init = load_init(checkpoint, cfg)
    except InitFromError as exc:
        raise TrainError(f"resuming {run}: the checkpoint it started from ({checkpoint}, its {INIT_FILE}) cannot "
                         f"be loaded: {str(exc).removeprefix(f'--init-from {checkpoint}: ')}") from None
    if init[2]["identity"] != identity:
        raise TrainError(f"resuming {run}: it started from {identity} in {checkpoint} (its {INIT_FILE}), which is now "
                         f"{init[2]['identity']}; the run's weights fit the former only")
    return init


__all__ = [
    "DEMOS_DIR",
    "INIT_FILE",
    "Demonstrations",
    "InitFromError",
    "SftError",
    "SftResult",
    "collect_trees",
    "demonstrations",
    "expert_policy",
    "heldout_nll",
    "load_init",
    "reload_init",
    "run_sft",
    "sft_tasks",
    "tree_datums",
]
