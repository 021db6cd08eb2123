"""Aggregate finished rollout trees into the results table written to `summary.json`."""

from __future__ import annotations

from collections import Counter
from statistics import mean

from pydantic import Field

from sera.types import Record, RolloutTree, Task

DIFFICULTY_ORDER = ("easy", "medium", "hard", "extreme")


class GroupResult(Record):
    """Success counts of one group of tasks (a difficulty, or all)."""

    tasks: int
    """Tasks in the group."""
    successes: int
    """Tasks whose root agent was verified successful."""
    errors: int
    """Tasks whose rollout failed outright (counted as failures)."""
    success_rate: float
    """successes / tasks (task-weighted)."""


class TreeStats(Record):
    """Shape of the recorded trees."""

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
    """Wall-clock seconds of the whole evaluation (this invocation)."""
    mean_rollout_s: float
    """Mean wall-clock seconds of one rollout."""
    counters: dict[str, int] = Field(default_factory=dict)
    """Summed usage counters of all trees."""


def summarise(
    tasks: list[Task], trees: dict[str, RolloutTree], *, env: str, split: str, policy: str, wall_time_s: float
) -> EvalSummary:
    """Aggregate; a task with no tree or a failed tree counts as a failure."""
    def group(members: list[Task]) -> GroupResult:
        ok = sum(1 for t in members if t.id in trees and trees[t.id].root_success)
        errors = sum(1 for t in members if t.id not in trees or trees[t.id].error)
        return GroupResult(tasks=len(members), successes=ok, errors=errors, success_rate=ok / len(members) if members else 0.0)

    bands = sorted({t.difficulty or "none" for t in tasks}, key=_band_key)
    families = list(dict.fromkeys(_family(t) for t in tasks if _family(t) is not None))
    done = list(trees.values())
    counters: Counter[str] = Counter()
    for tree in done:
        counters.update(tree.counters)
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
        counters=dict(counters),
    )


def _tree_stats(trees: list[RolloutTree]) -> TreeStats:
    if not trees:
        return TreeStats(mean_nodes=0, max_nodes=0, depth_distribution={}, agents_by_depth={}, mean_policy_calls=0)
    depths = Counter(str(t.depth()) for t in trees)
    agents = Counter(str(n.depth) for t in trees for n in t.nodes.values())
    return TreeStats(
        mean_nodes=mean(len(t.nodes) for t in trees),
        max_nodes=max(len(t.nodes) for t in trees),
        depth_distribution=dict(sorted(depths.items())),
        agents_by_depth=dict(sorted(agents.items())),
        mean_policy_calls=mean(sum(len(n.steps) for n in t.nodes.values()) for t in trees),
    )


def _band_key(band: str) -> tuple[int, str]:
    return (DIFFICULTY_ORDER.index(band) if band in DIFFICULTY_ORDER else len(DIFFICULTY_ORDER), band)


def _family(task: Task) -> str | None:
    family = task.misc.get("family")
    return family if isinstance(family, str) else None
