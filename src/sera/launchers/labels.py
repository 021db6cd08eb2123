"""Verified labels of child agents: the programmatic verifier (TextCraft) or an external judge
(TextWorld, as in the paper). These labels are the only external supervision SERA spends, and
only on counterfactual branches (rubric training); RAO spends a judge call on every child.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from sera.counters import Counter
from sera.types import AgentNode, RolloutTree, Usage


@dataclass(frozen=True)
class Label:
    """A child's success label, or why it has none."""

    success: bool | None
    """The label; None when no valid label exists."""
    source: Literal["verifier", "judge"]
    """Where it came from."""
    error: str | None = None
    """Why there is no label."""
    reason: str | None = None
    """The judge's justification, when a judge answered."""
    usage: Usage = field(default_factory=Usage)
    """Tokens the judge call spent (none for the verifier or a cache hit)."""


class CounterSink(Protocol):
    def count(self, name: Counter, n: int = 1) -> None: ...


def count_labels(sink: CounterSink, labels: Iterable[Label]) -> None:
    """Count what `labels` cost: judge calls and tokens, or verifier checks."""
    for label in labels:
        if label.source == "judge":
            sink.count(Counter.JUDGE_CALLS)
            sink.count(Counter.JUDGE_PROMPT_TOKENS, label.usage.prompt_tokens)
            sink.count(Counter.JUDGE_COMPLETION_TOKENS, label.usage.completion_tokens)
        else:
            sink.count(Counter.VERIFIER_CALLS)


class Labeler(Protocol):
    external: bool
    """True when labelling costs external calls (then groups without a rubric are not labelled)."""

    async def label(self, node: AgentNode, parent_goal: str | None) -> Label: ...


class VerifierLabeler:
    """The environment's own check of the child's goal, recorded when the child ended (free)."""

    external = False

    async def label(self, node: AgentNode, parent_goal: str | None) -> Label:
        if node.verified_success is None:
            return Label(None, "verifier", "the environment cannot verify this goal")
        return Label(node.verified_success, "verifier")


class JudgeLabeler:
    """An external judge's binary verdict (`sera.judge.JudgeClient.judge_child`)."""

    external = True

    def __init__(self, client: Any) -> None:
        self.client = client

    async def label(self, node: AgentNode, parent_goal: str | None) -> Label:
        judgement = await self.client.judge_child(node.goal, node, _state_text(node), parent_goal=parent_goal)
        usage = Usage() if judgement.cached else judgement.usage
        if not judgement.valid:
            return Label(None, "judge", judgement.error or "invalid judgement", usage=usage)
        return Label(judgement.success, "judge", reason=judgement.reason, usage=usage)


def _state_text(node: AgentNode) -> str:
    state = node.final_state
    if "observation" in state:
        return f"Location: {state.get('location', '?')}\n{state['observation']}"
    return "\n".join(f"{key}: {value}" for key, value in state.items()) or "(no final state recorded)"


class _TreeCounters:
    def __init__(self, tree: RolloutTree) -> None:
        self.tree = tree

    def count(self, name: Counter, n: int = 1) -> None:
        self.tree.counters[name.value] = self.tree.counters.get(name.value, 0) + n


async def judge_children(tree: RolloutTree, labeler: Labeler) -> int:
    """Label every live non-root agent of `tree` in place (`judged_success`, `judge_reason`), for
    RAO's child rewards in environments without a verifier, and count the cost in the tree's
    counters; returns the number of labels asked for."""
    nodes = tree.live_nodes()
    children = [n for n in nodes.values() if n.parent_id is not None]
    labels = await asyncio.gather(
        *(labeler.label(n, nodes[n.parent_id].goal if n.parent_id in nodes else None) for n in children)
    )
    for node, label in zip(children, labels):
        node.judged_success = label.success
        node.judge_reason = label.reason if label.error is None else f"invalid: {label.error}"
    count_labels(_TreeCounters(tree), labels)
    return len(children)
