"""What one training step's trees and batch were: flat, `/`-separated metrics for `metrics.jsonl`.

Pure functions of recorded data (`RolloutTree`s and a `StageData`); no model, no world. Two
conventions, the same as the evaluation summary's (`sera.eval.summary`):

- **Behaviour** (success, tree shape, rubrics of children, leaf coverage, steps) is measured on
  the live tree (`RolloutTree.live_nodes`): an uncommitted counterfactual branch never happened
  as far as the root is concerned.
- **Branches and cost** are measured on everything recorded: fork-group metrics are about the
  branches themselves, and calls, tokens, clones and seconds count every branch, because they
  were spent.

A mean, share or extremum over nothing is left out rather than written as 0 (a step without
children has no `rubric/score_mean`); counts are always there, so a name always means one thing.
The names are listed in `docs/training.md` (section "Records").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from sera.counters import Counter, sum_counters
from sera.credit import leaf_coverage, ranking_diagnostics
from sera.train.stage_data import StageData
from sera.types import AgentNode, ModelCall, RolloutTree, Task

Metrics = dict[str, float | int]
"""Flat metric names to numbers."""

NO_DIFFICULTY = "none"
"""The `success/<difficulty>` key of tasks without a difficulty band."""

_COUNTER_NAMES: dict[str, str] = {
    Counter.POLICY_CALLS: "calls/act",
    Counter.PROMPT_TOKENS: "tokens/act/prompt",
    Counter.COMPLETION_TOKENS: "tokens/act/completion",
    Counter.VERIFIER_CALLS: "calls/verifier",
    Counter.JUDGE_CALLS: "calls/judge",
    Counter.JUDGE_PROMPT_TOKENS: "tokens/judge/prompt",
    Counter.JUDGE_COMPLETION_TOKENS: "tokens/judge/completion",
    Counter.WORLD_CLONES: "world_clones",
}
"""Tree counters shown under a role name; every other counter is `counters/<name>`."""

_FROM_CALL_RECORDS = frozenset({
    Counter.RUBRIC_CALLS, Counter.RUBRIC_COMPLETION_TOKENS, Counter.SCORE_CALLS, Counter.SCORE_COMPLETION_TOKENS,
})
"""Counters superseded by the `ModelCall` records (which also hold prompt tokens and say whether
an external model answered): `calls/rubric`, `calls/score`, ... come from the records."""


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _put(out: Metrics, name: str, value: float | int | None) -> None:
    """Set `name` unless `value` is None (a statistic over nothing)."""
    if value is not None:
        out[name] = value


def _check(groups: Sequence[Sequence[RolloutTree]], tasks: Sequence[Task]) -> None:
    if len(groups) != len(tasks):
        raise ValueError(f"{len(groups)} groups of trees for {len(tasks)} tasks: groups[i] must be the trees of tasks[i]")
    for index, (trees, task) in enumerate(zip(groups, tasks)):
        wrong = sorted({t.task_id for t in trees} - {task.id})
        if wrong:
            raise ValueError(f"groups[{index}] holds trees of {wrong}, not of tasks[{index}] = {task.id!r}")


# -- success -------------------------------------------------------------------------------------


def _label(tree: RolloutTree, node: AgentNode) -> bool | None:
    """The root: the task's verified success (None, e.g. a crashed rollout, is a failure, as in
    credit). A child: its verifier label, else its judge label, else None (unlabelled)."""
    if node.parent_id is None:
        return bool(tree.root_success)
    return node.verified_success if node.verified_success is not None else node.judged_success


def success_metrics(groups: Sequence[Sequence[RolloutTree]], tasks: Sequence[Task]) -> Metrics:
    """`trees`, `tree_errors`, `success`, `success/<difficulty>`, `tasks/mixed`, and by depth
    `success/depth/<d>` over `labelled/depth/<d>` live agents."""
    trees = [t for g in groups for t in g]
    out: Metrics = {"trees": len(trees), "tree_errors": sum(t.error is not None for t in trees)}
    _put(out, "success", _share(sum(bool(t.root_success) for t in trees), len(trees)))
    bands: dict[str, list[bool]] = {}
    for task, group in zip(tasks, groups):
        bands.setdefault(task.difficulty or NO_DIFFICULTY, []).extend(bool(t.root_success) for t in group)
    for band, outcomes in sorted(bands.items()):
        _put(out, f"success/{band}", _share(sum(outcomes), len(outcomes)))
    mixed = sum(len({bool(t.root_success) for t in g}) == 2 for g in groups)
    _put(out, "tasks/mixed", _share(mixed, len(groups)))
    by_depth: dict[int, list[bool]] = {}
    for tree in trees:
        for node in tree.live_nodes().values():
            label = _label(tree, node)
            if label is not None:
                by_depth.setdefault(node.depth, []).append(label)
    for depth, labels in sorted(by_depth.items()):
        out[f"labelled/depth/{depth}"] = len(labels)
        out[f"success/depth/{depth}"] = sum(labels) / len(labels)
    return out


# -- tree shape and steps ------------------------------------------------------------------------


def shape_metrics(trees: Sequence[RolloutTree]) -> Metrics:
    """Live agents per tree (`agents/mean`, `agents/max`), by depth over the step
    (`agents/depth/<d>`), deepest depth (`depth/mean`, `depth/max`), agents that stopped on an
    error (`agents/error`), and steps: `steps/total`, `steps/forced`, `steps/error`,
    `steps/invalid_action`."""
    out: Metrics = {}
    sizes, depths = [], []
    by_depth: dict[int, int] = {}
    steps = forced = errors = invalid = agent_errors = 0
    for tree in trees:
        live = tree.live_nodes()
        sizes.append(len(live))
        depths.append(max(n.depth for n in live.values()))
        for node in live.values():
            by_depth[node.depth] = by_depth.get(node.depth, 0) + 1
            agent_errors += node.error is not None
            for step in node.steps:
                steps += 1
                forced += step.forced is not None
                errors += step.error is not None
                invalid += step.action.kind == "invalid"
    _put(out, "agents/mean", _mean(sizes))
    if sizes:
        out["agents/max"] = max(sizes)
        out["depth/mean"] = sum(depths) / len(depths)
        out["depth/max"] = max(depths)
    out["agents/live"] = sum(sizes)
    out["agents/error"] = agent_errors
    out.update({f"agents/depth/{d}": n for d, n in sorted(by_depth.items())})
    out.update({"steps/total": steps, "steps/forced": forced, "steps/error": errors, "steps/invalid_action": invalid})
    return out


# -- rubrics -------------------------------------------------------------------------------------


def rubric_metrics(trees: Sequence[RolloutTree]) -> Metrics:
    """Frozen rubrics of live children (SERA execution): `rubric/children` (children a rubric was
    written for, or attempted), `rubric/valid` (share whose rubric parsed and was in the schema),
    `rubric/scored` (share of valid ones with a usable score), `rubric/score_mean` (mean score of
    scored children), `rubric/gate_pass` (share of scored children whose scorer passed the gate)."""
    attempted = valid = 0
    scores: list[float] = []
    gates: list[bool] = []
    for tree in trees:
        for node in tree.live_nodes().values():
            if node.parent_id is None or (node.rubric_call is None and node.rubric is None):
                continue
            attempted += 1
            if node.rubric is None:
                continue
            valid += 1
            if node.rubric_score is not None:
                scores.append(node.rubric_score)
                gate = (node.rubric_assessment or {}).get("success")
                if isinstance(gate, bool):
                    gates.append(gate)
    out: Metrics = {"rubric/children": attempted}
    _put(out, "rubric/valid", _share(valid, attempted))
    _put(out, "rubric/scored", _share(len(scores), valid))
    _put(out, "rubric/score_mean", _mean(scores))
    _put(out, "rubric/gate_pass", _share(sum(gates), len(gates)))
    return out


def fork_metrics(trees: Sequence[RolloutTree], margin: float = 0.2) -> Metrics:
    """Counterfactual groups (rubric training), every group and branch recorded:
    `fork/groups`, `fork/rubric_valid`, `fork/branches`, `fork/labelled`, `fork/branch_success`
    (share of labelled branches that succeeded), `fork/score_valid` (share of branches of groups
    with a rubric that got a score), `fork/branch_score_mean`, `fork/mixed` (share of groups with
    a rubric whose scored, labelled branches hold a success and a failure: the groups that rank);
    and the ranking the rubrics achieved over all (success, failure) branch pairs of a group,
    pooled over groups: `ranking/groups`, `ranking/pairs`, `ranking/pair_accuracy` (success
    scored strictly higher), `ranking/margin_satisfaction` (by at least `margin`),
    `ranking/mean_gap`."""
    groups = [g for t in trees for g in t.fork_groups]
    branches = [b for g in groups for b in g.branches]
    labelled = [b.label for b in branches if b.label is not None]
    with_rubric = [g for g in groups if g.rubric is not None]
    rubric_branches = [b for g in with_rubric for b in g.branches]
    scores = [b.rubric_score for b in branches if b.rubric_score is not None]
    out: Metrics = {"fork/groups": len(groups), "fork/branches": len(branches)}
    _put(out, "fork/rubric_valid", _share(len(with_rubric), len(groups)))
    _put(out, "fork/labelled", _share(len(labelled), len(branches)))
    _put(out, "fork/branch_success", _share(sum(labelled), len(labelled)))
    _put(out, "fork/score_valid", _share(sum(b.rubric_score is not None for b in rubric_branches), len(rubric_branches)))
    _put(out, "fork/branch_score_mean", _mean(scores))
    ranked = [
        d for g in with_rubric
        if (d := ranking_diagnostics([b.rubric_score for b in g.branches], [b.label for b in g.branches], margin))
    ]
    _put(out, "fork/mixed", _share(len(ranked), len(with_rubric)))
    pairs = sum(d.pairs for d in ranked)
    out["ranking/groups"] = len(ranked)
    out["ranking/pairs"] = pairs
    if pairs:
        out["ranking/pair_accuracy"] = sum(d.pairs * d.pairwise_accuracy for d in ranked) / pairs
        out["ranking/margin_satisfaction"] = sum(d.pairs * d.margin_satisfaction for d in ranked) / pairs
        out["ranking/mean_gap"] = sum(d.pairs * d.mean_gap for d in ranked) / pairs
    return out


def leaf_metrics(trees: Sequence[RolloutTree]) -> Metrics:
    """Leaf coverage of the delegation events of the live trees (`sera.credit.leaf_coverage`, what
    the delegation stage credits): `leaf_coverage/events`, `leaf_coverage/mean` over events,
    `leaf_coverage/trees_delegating` (share of trees with at least one event)."""
    per_tree = [list(leaf_coverage(t).values()) for t in trees]
    shares = [s for tree in per_tree for s in tree]
    out: Metrics = {"leaf_coverage/events": len(shares)}
    _put(out, "leaf_coverage/mean", _mean(shares))
    _put(out, "leaf_coverage/trees_delegating", _share(sum(bool(t) for t in per_tree), len(per_tree)))
    return out


# -- cost ----------------------------------------------------------------------------------------


def model_calls(tree: RolloutTree) -> Iterable[ModelCall]:
    """Every rubric-writing and scoring call recorded in `tree` (all nodes and fork groups)."""
    for node in tree.nodes.values():
        yield from (c for c in (node.rubric_call, node.score_call) if c is not None)
    for group in tree.fork_groups:
        if group.rubric_call is not None:
            yield group.rubric_call
        yield from (b.score_call for b in group.branches if b.score_call is not None)


def cost_metrics(trees: Sequence[RolloutTree]) -> Metrics:
    """What the step spent, branches included. Agent steps from the tree counters (`calls/act`,
    `tokens/act/{prompt,completion}`); rubric writing and scoring from the `ModelCall` records
    (`calls/rubric`, `calls/score`, `tokens/{rubric,score}/{prompt,completion}`, the same with
    `_external` for calls an external model answered); all policy tokens `tokens/policy/...`;
    `calls/verifier`, `calls/judge`, `tokens/judge/...`, `world_clones`; every other counter as
    `counters/<name>`. Wall time: `call_seconds/{rubric,score}[_external]` (summed over calls,
    which overlap when concurrent), `tree_seconds/{mean,max}`, and agent-seconds summed over agents
    (concurrent agents overlap): `agent_seconds/policy` (waiting for the policy) and
    `agent_seconds/env` (executing actions, steps that launched a child left out: their time
    includes the child's whole run)."""
    counters = sum_counters(t.counters for t in trees)
    out: Metrics = {name: counters.get(key, 0) for key, name in _COUNTER_NAMES.items()}
    out.update({f"counters/{k}": v for k, v in counters.items() if k not in _COUNTER_NAMES and k not in _FROM_CALL_RECORDS})
    for role in ("rubric", "score"):
        for external in (False, True):
            calls = [c for t in trees for c in model_calls(t) if c.role == role and c.external == external]
            key = role + ("_external" if external else "")
            out[f"calls/{key}"] = len(calls)
            out[f"tokens/{key}/prompt"] = sum(c.usage.prompt_tokens for c in calls)
            out[f"tokens/{key}/completion"] = sum(c.usage.completion_tokens for c in calls)
            out[f"call_seconds/{key}"] = sum(c.seconds for c in calls)
    for part in ("prompt", "completion"):
        out[f"tokens/policy/{part}"] = sum(int(out[f"tokens/{role}/{part}"]) for role in ("act", "rubric", "score"))
    walls = [t.wall_time_s for t in trees]
    _put(out, "tree_seconds/mean", _mean(walls))
    if walls:
        out["tree_seconds/max"] = max(walls)
    steps = [s for t in trees for n in t.nodes.values() for s in n.steps]
    out["agent_seconds/policy"] = sum(s.policy_s for s in steps)
    out["agent_seconds/env"] = sum(s.env_s for s in steps if not s.child_ids)
    return out


# -- the two entry points ------------------------------------------------------------------------


def tree_metrics(groups: list[list[RolloutTree]], tasks: list[Task], *, margin: float = 0.2) -> Metrics:
    """Everything above for one step: `groups[i]` are the K trees of `tasks[i]`; `margin` is the
    ranking margin (`rollout.margin`) for `ranking/margin_satisfaction`.

    Raises ValueError when the groups do not line up with the tasks."""
    _check(groups, tasks)
    trees = [t for g in groups for t in g]
    out = success_metrics(groups, tasks)
    for part in (shape_metrics(trees), rubric_metrics(trees), fork_metrics(trees, margin), leaf_metrics(trees),
                 cost_metrics(trees)):
        out.update(part)
    return out


def batch_metrics(batch: StageData) -> Metrics:
    """A step's datums (what the learner is given): `batch/datums`, `batch/trainable_datums`
    (advantage ≠ 0), `batch/tokens`, `batch/trained_tokens` (masked), `batch/gradient_tokens`
    (trained tokens of datums whose advantage × weight ≠ 0); over the datums `advantage/{mean,
    std,min,max}` (std: population), `advantage/nonzero` (share ≠ 0); `advantage/token_mean`,
    the mean of advantage × depth weight over trained tokens (what the token-mean loss weighs);
    `depth_weight/{min,max}`."""
    datums = batch.datums
    advantages = [d.advantage for d in datums]
    trained = sum(d.n_trainable for d in datums)
    out: Metrics = {
        "batch/datums": len(datums),
        "batch/trainable_datums": sum(a != 0 for a in advantages),
        "batch/tokens": sum(len(d.tokens) for d in datums),
        "batch/trained_tokens": trained,
        "batch/gradient_tokens": sum(d.n_trainable for d in datums if d.advantage * d.weight != 0),
    }
    if datums:
        out.update({
            "advantage/mean": sum(advantages) / len(advantages),
            "advantage/std": statistics.pstdev(advantages),
            "advantage/min": min(advantages),
            "advantage/max": max(advantages),
            "advantage/nonzero": sum(a != 0 for a in advantages) / len(advantages),
            "depth_weight/min": min(d.weight for d in datums),
            "depth_weight/max": max(d.weight for d in datums),
        })
    if trained:
        out["advantage/token_mean"] = math.fsum(d.advantage * d.weight * d.n_trainable for d in datums) / trained
    return out
