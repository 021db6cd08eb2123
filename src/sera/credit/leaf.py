"""Leaf-coverage credit for delegation decisions (the "D" objective, §6.1/6.2).

A delegation event (all children launched by one parent step) is credited with the share of
the rollout's leaves that it produced: `w_e = |∪_{c ∈ children(e)} leaves(c)| / |leaves(root)|`,
and its shaped reward is `s_e = R_root · w_e`. Children's own success is ignored (the
reference's success gate is off in every recipe). Counted on the live tree (`RolloutTree.live_nodes`):
uncommitted counterfactual branches are not part of what the root experienced.
"""

from __future__ import annotations

import math

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
    events = tree.delegation_events()
    if not events:
        return {}
    total = len(tree.leaves())
    return {
        (event.parent_id, event.parent_step): len(
            {leaf.id for child in event.child_ids for leaf in tree.leaves_under(child)}
        ) / total
        for event in events
    }


def leaf_rewards(tree: RolloutTree, root_reward: float) -> dict[EventKey, float]:
    """Shaped reward of every delegation event: `s_e = root_reward · coverage(e)` (§6.2 step 2).

    `root_reward` is the rollout's verified task success R_r (0 or 1 in the paper's recipes).
    """
    if not math.isfinite(root_reward):
        raise ValueError(f"root_reward must be finite, got {root_reward!r}")
    return {key: root_reward * share for key, share in leaf_coverage(tree).items()}
