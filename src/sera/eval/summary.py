"""Aggregate finished rollout trees into the results table written to `summary.json`.

Every count is over rollouts: with `--samples K` each task counts K times (once per sample).
Errors (`sera.eval.failures`) count as failures in the success rates and are listed by kind.

While a run is going its summary is **partial** (`complete` false): rollouts not finished yet
(`pending`) are left out of every count, so the rates are those of the rollouts finished so far.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from statistics import mean
from typing import Any

from pydantic import Field

from sera.counters import Counter as UsageCounter
from sera.counters import sum_counters
from sera.eval.best_of import BestOfReport, best_of_report
from sera.eval.failures import JUDGE_KINDS, Failure
from sera.stats import band_key
from sera.text_safety import clean_text
from sera.types import Record, RolloutTree, Task

SampleKey = tuple[str, int]
"""(task id, sample index): one rollout of an evaluation."""


class GroupResult(Record):
    """Success counts of one group of tasks (a difficulty, or all)."""

    tasks: int
    """Rollouts in the group: each task once per sample (a partial summary: those finished)."""
    successes: int
    """Rollouts whose root agent was verified successful."""
    errors: int
    """Rollouts that are errors, not results (`sera.eval.failures`; counted as failures)."""
    success_rate: float
    """successes / tasks (rollout-weighted)."""


class TreeStats(Record):
    """Shape of the recorded trees, as their roots experienced them (live nodes only)."""

    mean_nodes: float
    """Mean number of agents per tree."""
    max_nodes: int
    """Largest tree."""
    depth_distribution: dict[str, int]
    """Number of trees by their deepest agent depth."""
    agents_by_depth: dict[str, int]
    """Number of agents at each depth, over all trees."""
    mean_policy_calls: float
    """Mean policy calls per tree."""


class FailedRollout(Record):
    """One rollout counted as an error."""

    task_id: str
    """The task."""
    sample: int
    """The sample index."""
    kind: str
    """What failed (`sera.eval.failures`)."""
    infra: bool
    """The infrastructure's fault: retried when the evaluation is rerun."""
    message: str
    """One line saying what happened."""


class EvalSummary(Record):
    """Everything `summary.json` holds."""

    env: str
    """Environment name."""
    split: str
    """Task split evaluated."""
    policy: str
    """Policy description."""
    overall: GroupResult
    """All tasks."""
    by_difficulty: dict[str, GroupResult]
    """Per difficulty band."""
    by_family: dict[str, GroupResult] = Field(default_factory=dict)
    """Per task family (`misc["family"]`), for environments that have families."""
    trees: TreeStats
    """Tree statistics."""
    wall_time_s: float
    """Wall-clock seconds of the whole evaluation, summed over every invocation that ran it (a
    resumed run adds each one's; a merged run the shards')."""
    mean_rollout_s: float
    """Mean wall-clock seconds of one rollout."""
    counters: dict[str, int] = Field(default_factory=dict)
    """Summed usage counters of all trees."""
    samples: int = 1
    """Rollouts per task (`--samples`)."""
    seed: int | None = None
    """Base seed the rollouts' seeds were derived from (`sera.eval.seeds`)."""
    rules: str | None = None
    """Rules profile asked for (TextWorld-Sync); None: each task's own."""
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    """Error rollouts by kind."""
    infra_failures: int = 0
    """Error rollouts that are the infrastructure's fault (retried on rerun)."""
    infra_failure_rate: float = 0.0
    """infra_failures / rollouts."""
    judge_errors: int = 0
    """Error rollouts whose external judge failed (`judge_*` kinds; among `infra_failures`)."""
    complete: bool = True
    """False while the run is going (or after it was stopped): the summary is partial, rewritten as
    rollouts finish; True once every planned rollout has a result."""
    planned_rollouts: int = 0
    """Rollouts this summary's run covers: tasks x samples (0 in summaries written before it existed)."""
    finished_rollouts: int = 0
    """Rollouts with a result (a tree or a recorded failure); the counts above are over these."""
    sanitized_trees: int = 0
    """Trees that had strings escaped to be saved as JSON (`sanitized_strings` counts the strings)."""
    failed: list[FailedRollout] = Field(default_factory=list)
    """Every error rollout, in task order."""
    best_of: BestOfReport | None = None
    """Best-of-N selection (`--best-of N`): its settings, groups and the compute it added; None
    for a plain evaluation (N = 1)."""


def summarise(
    tasks: list[Task],
    trees: dict[SampleKey, RolloutTree],
    *,
    env: str,
    split: str,
    policy: str,
    wall_time_s: float,
    failures: dict[SampleKey, Failure] | None = None,
    samples: int = 1,
    seed: int | None = None,
    rules: str | None = None,
    best_of: dict[str, Any] | None = None,
    pending: Collection[SampleKey] = (),
) -> EvalSummary:
    """Aggregate `samples` rollouts of each task; a rollout with no tree or with a failure counts
    as a failure (and an error). `pending`: rollouts still running, left out of every count (a
    partial summary)."""
    failures = failures or {}
    pending = {key for key in pending if key not in trees and key not in failures}
    planned = [(t.id, k) for t in tasks for k in range(samples)]
    keys = [key for key in planned if key not in pending]
    missing = {key: Failure(kind="not_run", infra=True, message="no tree was recorded")
               for key in keys if key not in trees and key not in failures}
    errors_of = {**missing, **failures}

    def group(members: list[Task]) -> GroupResult:
        rollouts = [(t.id, k) for t in members for k in range(samples) if (t.id, k) not in pending]
        ok = sum(1 for key in rollouts if key in trees and trees[key].root_success and key not in errors_of)
        errors = sum(1 for key in rollouts if key in errors_of)
        return GroupResult(tasks=len(rollouts), successes=ok, errors=errors, success_rate=ok / len(rollouts) if rollouts else 0.0)

    bands = sorted({t.difficulty or "none" for t in tasks}, key=band_key)
    families = list(dict.fromkeys(_family(t) for t in tasks if _family(t) is not None))
    done = [trees[key] for key in keys if key in trees]
    failed = [
        FailedRollout(task_id=clean_text(task_id)[0], sample=k, kind=f.kind, infra=f.infra, message=f.message)
        for (task_id, k) in keys if (f := errors_of.get((task_id, k))) is not None
    ]
    infra = sum(f.infra for f in failed)
    return EvalSummary(
        env=env,
        split=split,
        policy=policy,
        overall=group(tasks),
        by_difficulty={b: group([t for t in tasks if (t.difficulty or "none") == b]) for b in bands},
        by_family={f: group([t for t in tasks if _family(t) == f]) for f in families},
        trees=_tree_stats(done),
        wall_time_s=wall_time_s,
        mean_rollout_s=mean(t.wall_time_s for t in done) if done else 0.0,
        counters=sum_counters(t.counters for t in done),
        samples=samples,
        seed=seed,
        rules=rules,
        errors_by_kind=dict(sorted(Counter(f.kind for f in failed).items())),
        infra_failures=infra,
        infra_failure_rate=infra / len(keys) if keys else 0.0,
        judge_errors=sum(f.kind in JUDGE_KINDS for f in failed),
        complete=not pending,
        planned_rollouts=len(planned),
        finished_rollouts=len(keys),
        sanitized_trees=sum(1 for t in done if t.counters.get(UsageCounter.SANITIZED_STRINGS.value)),
        failed=failed,
        best_of=best_of_report(best_of, done) if best_of is not None else None,
    )


def _tree_stats(trees: list[RolloutTree]) -> TreeStats:
    """Shape of the trees as their roots experienced them (uncommitted branches left out)."""
    if not trees:
        return TreeStats(mean_nodes=0, max_nodes=0, depth_distribution={}, agents_by_depth={}, mean_policy_calls=0)
    live = [t.live_nodes() for t in trees]
    depths = Counter(str(max(n.depth for n in nodes.values())) for nodes in live)
    agents = Counter(str(n.depth) for nodes in live for n in nodes.values())
    return TreeStats(
        mean_nodes=mean(len(nodes) for nodes in live),
        max_nodes=max(len(nodes) for nodes in live),
        depth_distribution=dict(sorted(depths.items())),
        agents_by_depth=dict(sorted(agents.items())),
        mean_policy_calls=mean(sum(len(n.steps) for n in nodes.values()) for nodes in live),
    )


def _family(task: Task) -> str | None:
    family = task.misc.get("family")
    return family if isinstance(family, str) else None
