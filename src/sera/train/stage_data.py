"""Recorded trees -> training datums, one builder per stage (sera-spec §5.2, §6.2, §7.1-7.3).

Each builder takes the K root rollouts of ONE task (the LOO group) and returns datums with
baseline-subtracted advantages plus counters of everything it left out and why. `build_batch`
runs a builder over all tasks of a step and applies the depth weights over the whole batch.
Pure functions of the trees (and of a tokenizer's `decode` for launch spans): no model, no world.

- execution: every action token of every live agent; reward from `credit.execution`, baseline
  = the mean of the OTHER rollouts' root rewards (§7.2). Where the environment says so, the
  error steps of an agent that succeeded are left untrained; success is the agent's own success
  gate (see `succeeded`), not its reward.
- delegation: only launch statements / `<delegate>` blocks; reward `R · leaf coverage`, invalid
  launch attempts 0; root-balanced LOO (§6.2) over the events with a trainable span
  (`Method.launch_events`).
- rubric_generation: one datum per group with a valid rubric and mixed labels: the rubric
  completion; reward = ranking reward, LOO across the task's groups (§5.2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sera.credit import (
    depth_weights,
    execution_baselines,
    leaf_rewards,
    loo_advantages,
    rank_dispersion_reward,
    ranking_reward,
    root_balanced_loo,
)
from sera.credit.execution import child_label, execution_rewards
from sera.train.datums import Datum, MissingTokensError, delegation_datums, execution_datums, model_call_datum
from sera.train.spans import Decode
from sera.envs.registry import EnvTraining
from sera.train.method import Method
from sera.train.schedule import Stage
from sera.types import AgentNode, RolloutTree



@dataclass
class StageData:
    """Datums of one stage and what was left out."""

    datums: list[Datum] = field(default_factory=list)
    """Training datums (advantage set; depth weight set by `build_batch`)."""
    counts: Counter[str] = field(default_factory=Counter)
    """Counters: trees, trained agents, dropped agents by reason, groups by outcome, ..."""

    def extend(self, other: StageData) -> None:
        self.datums.extend(other.datums)
        self.counts.update(other.counts)


def _tree_key(tree: RolloutTree, index: int) -> str:
    return f"{tree.task_id}#{index}"


def _root_reward(tree: RolloutTree) -> float:
    return 1.0 if tree.root_success else 0.0


def _zero_variance(data: StageData, env: EnvTraining) -> StageData:
    advantages = {d.advantage for d in data.datums}
    if env.filter_zero_variance and len(advantages) <= 1 and data.datums:
        data.counts["zero_variance_tasks"] += 1
        data.counts["datums_filtered_zero_variance"] += len(data.datums)
        data.datums = []
    return data


def succeeded(tree: RolloutTree, node: AgentNode, reward: float, method: Method, env: EnvTraining) -> bool:
    """Whether an agent succeeded, for the error-step filter (the reference's `filter_success`).

    The root: its verified task success. A child scored by a rubric: the scorer's success gate
    (a child can pass the gate with a score below 1). A child rewarded by its label (RAO, or the
    `binary` fallback): its verifier or judge label. Where none of these exists, a reward of at
    least 1, as the reference falls back to the reward.
    """
    if node.parent_id is None:
        return bool(tree.root_success)
    if method.execution_credit == "rubric" and node.rubric_score is not None:
        gate = (node.rubric_assessment or {}).get("success")
        return bool(gate) if isinstance(gate, bool) else reward >= 1.0
    label = child_label(node, env.label_source)
    return label if label is not None else reward >= 1.0


def execution_stage(trees: Sequence[RolloutTree], method: Method, env: EnvTraining) -> StageData:
    """Execution datums of one task's rollouts."""
    data = StageData()
    results = [
        execution_rewards(
            t, credit=method.execution_credit, label_source=env.label_source,
            lam=method.rao_lambda, failure_policy=method.failure_policy,
        )
        for t in trees
    ]
    kept = [(i, t, r) for i, (t, r) in enumerate(zip(trees, results)) if r.skip_rollout is None]
    data.counts["rollouts_skipped"] += len(trees) - len(kept)
    baselines = execution_baselines([_root_reward(t) for _, t, _ in kept])
    for (index, tree, rewards), baseline in zip(kept, baselines):
        data.counts["trees"] += 1
        data.counts.update(f"dropped: {reason.split(':')[0]}" for reason in rewards.dropped.values())
        for node_id, reward in rewards.rewards.items():
            node = tree.nodes[node_id]
            drop_errors = env.drop_error_steps and succeeded(tree, node, reward, method, env)
            try:
                datums = execution_datums(
                    node, reward - baseline, trajectory_id=f"{_tree_key(tree, index)}/{node_id}",
                    drop_error_steps=drop_errors,
                )
            except MissingTokensError:
                data.counts["dropped: no token ids"] += 1
                continue
            data.counts["agents_trained"] += 1
            data.counts["agents_error_steps_untrained"] += drop_errors
            data.datums.extend(datums)
    return _zero_variance(data, env)


@dataclass(frozen=True)
class _LaunchEvent:
    """One delegation event of a rollout, with its datums built (advantage not yet set)."""

    node_id: str
    """The launching agent."""
    reward: float
    """Shaped reward: R · leaf coverage, or 0 for a launch attempt that launched nothing."""
    datums: list[Datum] | None
    """The launch-span datums; [] without a span that lines up with tokens; None without token ids."""


def _launch_events(tree: RolloutTree, key: str, env: EnvTraining, decode: Decode, counts: Counter[str]) -> list[_LaunchEvent]:
    coverage = leaf_rewards(tree, _root_reward(tree))
    raw = [(parent, step, reward) for (parent, step), reward in coverage.items()]
    for node in tree.live_nodes().values():  # launch attempts that launched nothing earn 0
        for step in node.steps:
            if not step.child_ids and env.protocol.is_launch_attempt(step.completion_text):
                raw.append((node.id, step.index, 0.0))
                counts["invalid_launch_attempts"] += 1
    events = []
    for node_id, step_index, reward in raw:
        node = tree.nodes[node_id]
        try:
            datums: list[Datum] | None = delegation_datums(
                node, step_index, 0.0, trajectory_id=f"{key}/{node_id}",
                decode=decode, launch_spans=env.protocol.launch_spans,
            )
        except MissingTokensError:
            datums = None
        events.append(_LaunchEvent(node_id, reward, datums))
    return events


def delegation_stage(trees: Sequence[RolloutTree], method: Method, env: EnvTraining, decode: Decode) -> StageData:
    """Launch-span datums of one task's rollouts (leaf coverage, root-balanced LOO).

    Under `launch_events="reference"` an event without a trainable span (no token ids, or no
    launch statement or `<delegate>` block that lines up with tokens) leaves the rollout's mean,
    as the reference drops such candidates before its LOO; under `"all"` it stays in the mean
    and only goes untrained.
    """
    data = StageData()
    per_tree: list[list[_LaunchEvent]] = []
    for index, tree in enumerate(trees):
        events = _launch_events(tree, _tree_key(tree, index), env, decode, data.counts)
        if method.launch_events == "reference":
            left_out = [e for e in events if not e.datums]
            data.counts["events_left_out_of_mean"] += len(left_out)
            events = [e for e in events if e.datums]
        per_tree.append(events)
    advantages = root_balanced_loo([[e.reward for e in events] for events in per_tree])
    for events, event_advantages in zip(per_tree, advantages):
        data.counts["trees"] += 1
        data.counts["trees_without_delegation"] += not events
        for event, advantage in zip(events, event_advantages):
            if event.datums is None:
                data.counts["events_without_token_ids"] += 1
                continue
            data.counts["events_trained" if event.datums else "events_without_span"] += 1
            data.datums.extend(d.with_advantage(advantage) for d in event.datums)
    return _zero_variance(data, env)


def rubric_stage(trees: Sequence[RolloutTree], method: Method) -> StageData:
    """Rubric-writing datums of one task's rollouts: one per mixed group, LOO across groups."""
    data = StageData()
    reward_of = ranking_reward if method.rubric_reward == "ranking" else rank_dispersion_reward
    mixed: list[tuple[str, object, float]] = []  # (tree key, group, group reward)
    for index, tree in enumerate(trees):
        for group in tree.fork_groups:
            data.counts["groups"] += 1
            if group.rubric is None or group.rubric_call is None:
                data.counts["groups_invalid_rubric"] += 1
                continue
            reward = reward_of([b.rubric_score for b in group.branches], [b.label for b in group.branches], method.margin)
            if reward is None:
                data.counts["groups_homogeneous_or_unlabelled"] += 1
                continue
            mixed.append((_tree_key(tree, index), group, reward))
    for (key, group, _), advantage in zip(mixed, loo_advantages([r for *_, r in mixed])):
        if group.rubric_call.external:  # type: ignore[attr-defined]
            data.counts["groups_external_rubric"] += 1
            continue
        try:
            data.datums.append(
                model_call_datum(
                    group.rubric_call, advantage, trajectory_id=f"{key}/{group.id}",  # type: ignore[attr-defined]
                    node_id=group.parent_id, depth=group.parent_depth + 1,  # type: ignore[attr-defined]
                )
            )
        except MissingTokensError:
            data.counts["groups_without_token_ids"] += 1
            continue
        data.counts["groups_trained"] += 1
    if len(mixed) < 2 and data.datums:  # one group: advantage 0, nothing to learn (§5.4)
        data.counts["datums_zero_advantage"] += len(data.datums)
    return data


def build_batch(
    task_groups: Sequence[Sequence[RolloutTree]],
    stage: Stage,
    method: Method,
    env: EnvTraining,
    decode: Decode | None = None,
) -> StageData:
    """Datums of one optimizer step: each task's K rollouts credited together, then the depth
    weights over the whole batch (§7.3)."""
    batch = StageData()
    seen: dict[str, int] = {}
    for index, trees in enumerate(task_groups):
        task_ids = sorted({t.task_id for t in trees})
        if len(task_ids) > 1:
            raise ValueError(f"group {index} mixes tasks {task_ids}: a group is the K rollouts of one task")
        for task_id in task_ids:
            if task_id in seen and seen[task_id] != index:
                raise ValueError(
                    f"task {task_id!r} is in groups {seen[task_id]} and {index}: a task's rollouts share one "
                    "LOO baseline, so put them in one group"
                )
            seen[task_id] = index
        if stage == "execution":
            batch.extend(execution_stage(trees, method, env))
        elif stage == "delegation":
            if decode is None:
                raise ValueError("the delegation stage needs a tokenizer's decode to map launch spans to tokens")
            batch.extend(delegation_stage(trees, method, env, decode))
        elif stage == "rubric_generation":
            batch.extend(rubric_stage(trees, method))
        else:
            raise ValueError(f"unknown stage {stage!r}")
    if method.depth_weighting and batch.datums:
        weights = depth_weights([d.depth for d in batch.datums], [d.trajectory_id for d in batch.datums])
        batch.datums = [d.with_weight(w) for d, w in zip(batch.datums, weights)]
    batch.counts["datums"] = len(batch.datums)
    batch.counts["trainable_datums"] = sum(1 for d in batch.datums if d.advantage != 0)
    return batch
