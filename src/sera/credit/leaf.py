"""Leaf-coverage credit for delegation decisions (the "D" objective, §6.1/6.2).

A delegation event (all children launched by one parent step) is credited with the share of
the rollout's leaves that it produced: `w_e = |∪_{c ∈ children(e)} leaves(c)| / |leaves(root)|`,
and its shaped reward is `s_e = R_root · w_e`. Children's own success is ignored (the
reference's success gate is off in every recipe). Counted on the live tree (`live_nodes`):
uncommitted counterfactual branches are not part of what the root experienced.
"""

from __future__ import annotations

import math

from sera.credit.live import live_nodes
from sera.types import RolloutTree

EventKey = tuple[str, int]
"""(parent node id, index of the delegating parent step)."""


def leaf_coverage(tree: RolloutTree) -> dict[EventKey, float]:
    """Leaf share of every delegation event of the live tree (§6.2 step 2).

    `coverage(e) = |∪_{c ∈ children(e)} leaves_under(c)| / |leaves(live tree)|`, where a node
    without children is its own leaf (so a lone root is one leaf and there is no event: `{}`).
    Keys are `(parent_id, parent_step)`, in event order (first child's creation order).
    Raises ValueError for a child without `fork_step` or whose parent is missing.
    """
    nodes = live_nodes(tree)
    children: dict[str, list[str]] = {node_id: [] for node_id in nodes}
    events: dict[EventKey, list[str]] = {}
    for node in nodes.values():
        if node.parent_id is None:
            continue
        if node.parent_id not in nodes:
            raise ValueError(f"node {node.id!r}: parent {node.parent_id!r} is not in the tree")
        if node.fork_step is None:
            raise ValueError(f"node {node.id!r} has parent {node.parent_id!r} but no fork_step")
        children[node.parent_id].append(node.id)
        events.setdefault((node.parent_id, node.fork_step), []).append(node.id)
    if not events:
        return {}

    memo: dict[str, frozenset[str]] = {}

    def leaves_under(node_id: str) -> frozenset[str]:
        if node_id not in memo:
            kids = children[node_id]
            memo[node_id] = (
                frozenset([node_id]) if not kids else frozenset().union(*map(leaves_under, kids))
            )
        return memo[node_id]

    total = sum(1 for kids in children.values() if not kids)
    return {
        key: len(frozenset().union(*map(leaves_under, child_ids))) / total
        for key, child_ids in events.items()
    }


def leaf_rewards(tree: RolloutTree, root_reward: float) -> dict[EventKey, float]:
    """Shaped reward of every delegation event: `s_e = root_reward · coverage(e)` (§6.2 step 2).

    `root_reward` is the rollout's verified task success R_r (0 or 1 in the paper's recipes).
    """
    if not math.isfinite(root_reward):
        raise ValueError(f"root_reward must be finite, got {root_reward!r}")
    return {key: root_reward * share for key, share in leaf_coverage(tree).items()}
