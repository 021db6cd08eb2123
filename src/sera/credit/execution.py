"""Execution reward of every agent of one tree: RAO's labels or SERA's rubric scores (§6.3, §4.6).

- Root: verified task success (1.0 or 0.0; a rollout that crashed counts as a failure).
- RAO child: its verified (TextCraft) or judged (TextWorld) success, plus
  `λ · mean(direct children's success)` (λ = 0 in the paper). No valid label -> dropped.
- SERA child: its rubric score. An invalid rubric or score is handled by `failure_policy`:
  `drop` the child (the paper), fall back to its `binary` label, or `skip_rollout` (the whole
  tree yields nothing). Every drop is returned with its reason so it can be counted.

We use the rubric score in both environments (design.md difference 1; the reference's
TextWorld code silently used the world's success flag, sera-spec §11.1 item 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sera.credit.rao import rao_reward
from sera.types import AgentNode, RolloutTree


@dataclass(frozen=True)
class TreeRewards:
    """Execution rewards of one tree's live agents."""

    rewards: dict[str, float] = field(default_factory=dict)
    """Reward per trainable agent id."""
    dropped: dict[str, str] = field(default_factory=dict)
    """Agents left out of the gradient, with the reason."""
    skip_rollout: str | None = None
    """Set when the whole tree must be left out (failure policy `skip_rollout`)."""


def child_label(node: AgentNode, source: Literal["verifier", "judge"]) -> bool | None:
    """A child's success label from the verifier or the judge."""
    return node.verified_success if source == "verifier" else node.judged_success


def _missing_score_reason(node: AgentNode) -> str:
    if node.skip_reason:
        return node.skip_reason
    if node.rubric_call is None and node.rubric is None:
        return "no rubric was written"
    if node.rubric is None:
        return f"invalid rubric: {node.rubric_call.error if node.rubric_call else 'unknown'}"
    if node.score_call is not None and node.score_call.error:
        return node.score_call.error
    return "no rubric score"


def execution_rewards(
    tree: RolloutTree,
    *,
    credit: Literal["rao", "rubric"],
    label_source: Literal["verifier", "judge"],
    lam: float = 0.0,
    failure_policy: Literal["drop", "binary", "skip_rollout"] = "drop",
) -> TreeRewards:
    """Rewards of every live agent of `tree` (uncommitted counterfactual branches excluded)."""
    nodes = tree.live_nodes()
    child_labels: dict[str, list[bool | None]] = {}
    for node in nodes.values():
        if node.parent_id is not None:
            child_labels.setdefault(node.parent_id, []).append(child_label(node, label_source))
    rewards: dict[str, float] = {}
    dropped: dict[str, str] = {}
    for node in nodes.values():
        if node.parent_id is None:
            rewards[node.id] = 1.0 if tree.root_success else 0.0
            continue
        if node.skip_gradient:
            dropped[node.id] = node.skip_reason or "marked skip_gradient"
            continue
        if credit == "rubric" and node.rubric_score is not None:
            rewards[node.id] = node.rubric_score
            continue
        if credit == "rubric" and failure_policy == "skip_rollout":
            return TreeRewards(skip_rollout=f"{node.id}: {_missing_score_reason(node)}")
        if credit == "rubric" and failure_policy == "drop":
            dropped[node.id] = _missing_score_reason(node)
            continue
        rao = rao_reward(child_label(node, label_source), child_labels.get(node.id, []), lam)
        if rao is None:
            dropped[node.id] = f"no {label_source} label"
        else:
            rewards[node.id] = rao
    return TreeRewards(rewards, dropped)
