"""The tree as the root experienced it: uncommitted counterfactual branches removed.

A rubric-training rollout runs B branches from one delegation point but commits only one of
them back to the parent (§5.1). The other branches are training material for the rubric
writer; they never happened as far as the parent is concerned, so leaf coverage (§6.1/6.2) and
anything else that describes the rollout's structure must not count them.
"""

from __future__ import annotations

from sera.types import AgentNode, RolloutTree


def live_nodes(tree: RolloutTree) -> dict[str, AgentNode]:
    """Nodes of `tree` minus uncommitted branches and everything below them.

    A node is a branch when `fork_group_id` is set; it survives only when its group's
    `committed_branch == branch_index` (a group with `committed_branch=None` keeps no branch).
    A dropped node takes all its descendants with it. Creation order is kept. Trees without
    fork groups come back whole.

    Raises ValueError when a node names a fork group the tree does not have, or has only one of
    `fork_group_id` / `branch_index`.
    """
    committed = {group.id: group.committed_branch for group in tree.fork_groups}
    dropped: set[str] = set()
    for node in tree.nodes.values():
        if node.fork_group_id is None and node.branch_index is None:
            continue
        if node.fork_group_id is None or node.branch_index is None:
            raise ValueError(
                f"node {node.id!r}: fork_group_id={node.fork_group_id!r} and "
                f"branch_index={node.branch_index!r} must be set together"
            )
        if node.fork_group_id not in committed:
            raise ValueError(
                f"node {node.id!r}: fork_group_id {node.fork_group_id!r} is not among the "
                f"tree's fork groups {sorted(committed)}"
            )
        if committed[node.fork_group_id] != node.branch_index:
            dropped.add(node.id)
    if not dropped:
        return dict(tree.nodes)
    return {
        node_id: node
        for node_id, node in tree.nodes.items()
        if not _has_dropped_ancestor_or_self(tree, node_id, dropped)
    }


def _has_dropped_ancestor_or_self(tree: RolloutTree, node_id: str, dropped: set[str]) -> bool:
    """True when `node_id` or any ancestor of it is in `dropped` (walks parent links)."""
    seen: set[str] = set()
    current: str | None = node_id
    while current is not None:
        if current in dropped:
            return True
        if current in seen:
            raise ValueError(f"node {node_id!r}: parent links form a cycle through {current!r}")
        seen.add(current)
        parent = tree.nodes.get(current)
        if parent is None:
            raise ValueError(f"node {node_id!r}: ancestor {current!r} is not in the tree")
        current = parent.parent_id
    return False
