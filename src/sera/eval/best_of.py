"""What best-of-N selection cost an evaluation, read from its recorded trees (`summary.json`
key `best_of`).

Every number is a pure function of the trees: a candidate that was not committed, and all it
launched, is in `RolloutTree.nodes` but not in `live_nodes()`; the rubric and scoring calls are
on the `best_of` fork groups. `committed` is the agent compute of the live trees, what the same
trajectories would have cost without selection; `extra` is what selection added on top (the
discarded candidates' agent calls plus rubric writing and scoring by the policy). The compute of
a real N = 1 run differs (its children sample at the evaluation's temperature), so compare runs
side by side for Table 4; this block says where a best-of-N run's compute went.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import Field

from sera.counters import Counter as UsageCounter
from sera.types import AgentNode, ModelCall, Record, RolloutTree


class Compute(Record):
    """Model calls and their tokens."""

    calls: int = 0
    """Model calls."""
    prompt_tokens: int = 0
    """Prompt tokens of those calls."""
    completion_tokens: int = 0
    """Completion tokens of those calls."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def plus(self, other: Compute) -> Compute:
        return Compute(calls=self.calls + other.calls, prompt_tokens=self.prompt_tokens + other.prompt_tokens,
                       completion_tokens=self.completion_tokens + other.completion_tokens)


class BestOfReport(Record):
    """Best-of-N settings, what the selection did, and what it spent."""

    settings: dict[str, Any]
    """`BestOf.record()`: n, selector, max_forks, temperature (and the judge model)."""
    groups: int = 0
    """Delegations resolved by selection."""
    candidates: int = 0
    """Candidate subtrees run."""
    skipped_cap: int = 0
    """Launches that ran as one plain child because the task's fork cap was reached."""
    world_clones: int = 0
    """World copies made (N candidates plus one merge base per group; the `world_clones` counter)."""
    committed_not_first: int = 0
    """Groups whose committed candidate is not the first (where selection changed the tree)."""
    selections: dict[str, int] = Field(default_factory=dict)
    """Groups by why their candidate was committed (`best`, `tie`, `no_rubric`, `no_valid_score`,
    `first`, `random`, `error`, `cancelled`)."""
    committed: Compute = Field(default_factory=Compute)
    """Agent policy calls of the live (committed) trees."""
    discarded: Compute = Field(default_factory=Compute)
    """Agent policy calls of candidates that were not committed, and of everything they launched."""
    rubric: Compute = Field(default_factory=Compute)
    """Rubric writing by the policy."""
    score: Compute = Field(default_factory=Compute)
    """Candidate scoring by the policy."""
    judge: Compute = Field(default_factory=Compute)
    """Rubric writing and scoring by the external model (`judge` selector)."""
    extra: Compute = Field(default_factory=Compute)
    """Policy compute selection added: discarded + rubric + score."""
    extra_calls_ratio: float = 0.0
    """(committed + extra) / committed policy calls: this run's policy calls relative to its
    committed trees alone."""
    extra_tokens_ratio: float = 0.0
    """The same ratio for tokens (prompt + completion)."""


def _agent_compute(nodes: Iterable[AgentNode]) -> Compute:
    steps = [s for n in nodes for s in n.steps if s.forced is None]  # a forced step made no call
    return Compute(calls=len(steps), prompt_tokens=sum(s.usage.prompt_tokens for s in steps),
                   completion_tokens=sum(s.usage.completion_tokens for s in steps))


def _call_compute(calls: Iterable[ModelCall | None]) -> Compute:
    made = [c for c in calls if c is not None]
    return Compute(calls=len(made), prompt_tokens=sum(c.usage.prompt_tokens for c in made),
                   completion_tokens=sum(c.usage.completion_tokens for c in made))


def best_of_report(settings: dict[str, Any], trees: Iterable[RolloutTree]) -> BestOfReport:
    """Aggregate the best-of-N groups and compute of `trees` (finished rollouts)."""
    report = BestOfReport(settings=settings)
    reasons: Counter[str] = Counter()
    rubric_calls: list[ModelCall | None] = []
    score_calls: list[ModelCall | None] = []
    for tree in trees:
        live = tree.live_nodes()
        report.committed = report.committed.plus(_agent_compute(live.values()))
        report.discarded = report.discarded.plus(_agent_compute(n for i, n in tree.nodes.items() if i not in live))
        report.skipped_cap += tree.counters.get(UsageCounter.BEST_OF_SKIPPED_CAP.value, 0)
        report.candidates += tree.counters.get(UsageCounter.BEST_OF_CANDIDATES.value, 0)
        report.world_clones += tree.counters.get(UsageCounter.WORLD_CLONES.value, 0)
        for group in tree.fork_groups:
            if group.kind != "best_of":
                continue
            report.groups += 1
            report.committed_not_first += group.committed_branch not in (None, 0)
            reasons[(group.selection or "cancelled").split(":", 1)[0]] += 1
            rubric_calls.append(group.rubric_call)
            score_calls.extend(b.score_call for b in group.branches)
    external = [c for c in rubric_calls + score_calls if c is not None and c.external]
    report.rubric = _call_compute(c for c in rubric_calls if c is not None and not c.external)
    report.score = _call_compute(c for c in score_calls if c is not None and not c.external)
    report.judge = _call_compute(external)
    report.extra = report.discarded.plus(report.rubric).plus(report.score)
    report.selections = dict(sorted(reasons.items()))
    base = report.committed
    report.extra_calls_ratio = (base.calls + report.extra.calls) / base.calls if base.calls else 0.0
    report.extra_tokens_ratio = (base.tokens + report.extra.tokens) / base.tokens if base.tokens else 0.0
    return report


def describe(report: BestOfReport) -> list[str]:
    """The console lines of a best-of-N report: what selection did and what it added."""
    s, extra, base = report.settings, report.extra, report.committed
    lines = [
        f"best-of-{s['n']} ({s['selector']}, candidates at temperature {s['temperature']:g}, fork cap "
        f"{s['max_forks']}): {report.groups} groups, {report.candidates} candidates, {report.world_clones} world "
        f"clones, {report.skipped_cap} launches past the cap; committed not the first in {report.committed_not_first}",
        f"  selections: {', '.join(f'{k}: {v}' for k, v in report.selections.items()) or 'none'}",
        f"  extra compute over the committed trees (N = 1 for the same trajectories): "
        f"+{extra.calls} policy calls ({_percent(extra.calls, base.calls)}; discarded candidates {report.discarded.calls}, "
        f"rubric {report.rubric.calls}, score {report.score.calls}), +{extra.tokens} tokens "
        f"({_percent(extra.tokens, base.tokens)}) over {base.calls} calls / {base.tokens} tokens",
    ]
    if report.judge.calls:
        lines.append(f"  external judge: {report.judge.calls} calls, {report.judge.prompt_tokens} prompt + "
                     f"{report.judge.completion_tokens} completion tokens")
    return lines


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:+.0f}%" if whole else "n/a"
