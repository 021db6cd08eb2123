"""Leaf coverage (§6.1/6.2) and the live tree (uncommitted counterfactual branches removed)."""

from __future__ import annotations

import pytest

from sera.credit import leaf_coverage, leaf_rewards
from sera.types import Action, AgentNode, ForkBranch, ForkGroup, RolloutTree, Step


def build(*specs: tuple, fork_groups: tuple[ForkGroup, ...] = ()) -> RolloutTree:
    """A tree from `(id, parent_id, fork_step, **node fields)` tuples, in creation order.

    Each parent gets steps up to its highest fork step, and the launching step lists its
    children, as the runtime records them.
    """
    nodes: dict[str, dict] = {}
    for node_id, parent, fork_step, *extra in specs:
        depth = 0 if parent is None else nodes[parent]["depth"] + 1
        nodes[node_id] = {"id": node_id, "parent_id": parent, "fork_step": fork_step,
                          "depth": depth, "goal": f"goal of {node_id}", "budget": 20, "steps": [],
                          **(extra[0] if extra else {})}
        if parent is not None:
            steps = nodes[parent]["steps"]
            while len(steps) <= fork_step:
                steps.append(Step(index=len(steps), prompt_len=2, completion_text="...",
                                  action=Action(kind="code", body="..."), observation="ok"))
            steps[fork_step].child_ids.append(node_id)
    return RolloutTree(task_id="t", env="test", root_id=specs[0][0],
                       nodes={k: AgentNode(**v) for k, v in nodes.items()},
                       fork_groups=list(fork_groups))


def branch(group: str, index: int) -> dict:
    return {"fork_group_id": group, "branch_index": index}


def group(committed: int | None, n: int = 3) -> ForkGroup:
    return ForkGroup(id="g", parent_id="root", parent_step=0, child_goal="goal of b",
                     branches=[ForkBranch(index=i, node_id=f"b{i}") for i in range(n)],
                     committed_branch=committed)


def forked_tree(committed: int | None) -> RolloutTree:
    """Root step 0 forks b0..b2; b0 has one child, b1 two; root step 1 launches c."""
    return build(("root", None, None),
                 ("b0", "root", 0, branch("g", 0)), ("b1", "root", 0, branch("g", 1)),
                 ("b2", "root", 0, branch("g", 2)), ("b0x", "b0", 0), ("b1x", "b1", 0),
                 ("b1y", "b1", 0), ("c", "root", 1), fork_groups=(group(committed),))


def test_lone_root_has_no_delegation_event():
    assert leaf_coverage(build(("root", None, None))) == {}


def test_single_child_covers_every_leaf():
    assert leaf_coverage(build(("root", None, None), ("a", "root", 0))) == {("root", 0): 1.0}


def test_parallel_grandchildren_form_one_event():
    # root step 0 launches a and b; a step 1 launches a1 and a2 in one step; b is a leaf.
    tree = build(("root", None, None), ("a", "root", 0), ("b", "root", 0),
                 ("a1", "a", 1), ("a2", "a", 1))
    assert leaf_coverage(tree) == {("root", 0): pytest.approx(3 / 3), ("a", 1): pytest.approx(2 / 3)}


def test_nested_parallel_delegations_in_one_step():
    # Leaves: a1x, a1y, a2, b1 (4). a1's event sits inside a's, inside root's.
    tree = build(("root", None, None), ("a", "root", 0), ("b", "root", 0), ("a1", "a", 0),
                 ("a2", "a", 0), ("a1x", "a1", 0), ("a1y", "a1", 0), ("b1", "b", 2))
    coverage = leaf_coverage(tree)
    assert list(coverage) == [("root", 0), ("a", 0), ("a1", 0), ("b", 2)]
    assert list(coverage.values()) == pytest.approx([4 / 4, 3 / 4, 2 / 4, 1 / 4])


def test_two_sequential_events_of_the_root_are_credited_separately():
    # root step 0 -> a (3 children); root step 2 -> b, c. Leaves a1..a3, b, c (5).
    tree = build(("root", None, None), ("a", "root", 0), ("b", "root", 2), ("c", "root", 2),
                 ("a1", "a", 0), ("a2", "a", 0), ("a3", "a", 0))
    coverage = leaf_coverage(tree)
    assert list(coverage) == [("root", 0), ("root", 2), ("a", 0)]
    assert list(coverage.values()) == pytest.approx([3 / 5, 2 / 5, 3 / 5])


def test_only_the_committed_branch_counts():
    # Live: root, b1 (b1x, b1y), c -> leaves b1x, b1y, c. Counting every branch would give
    # 5 leaves and root-step-0 coverage 4/5.
    coverage = leaf_coverage(forked_tree(committed=1))
    assert coverage == {("root", 0): pytest.approx(2 / 3), ("b1", 0): pytest.approx(2 / 3),
                        ("root", 1): pytest.approx(1 / 3)}


def test_group_without_committed_branch_leaves_no_event():
    assert leaf_coverage(forked_tree(committed=None)) == {("root", 1): 1.0}


def test_leaf_rewards_scale_coverage_by_root_reward():
    tree = build(("root", None, None), ("a", "root", 0), ("b", "root", 1), ("a1", "a", 0),
                 ("a2", "a", 0))
    assert leaf_rewards(tree, 1.0) == {("root", 0): pytest.approx(2 / 3), ("a", 0): pytest.approx(2 / 3),
                                       ("root", 1): pytest.approx(1 / 3)}
    assert set(leaf_rewards(tree, 0.0).values()) == {0.0}
    with pytest.raises(ValueError, match="root_reward"):
        leaf_rewards(tree, float("nan"))


def test_live_nodes_keeps_trees_without_forks_whole():
    tree = build(("root", None, None), ("a", "root", 0), ("a1", "a", 0))
    assert list(tree.live_nodes()) == ["root", "a", "a1"]


def test_live_nodes_drops_uncommitted_branches_with_descendants():
    assert list(forked_tree(committed=1).live_nodes()) == ["root", "b1", "b1x", "b1y", "c"]
    assert list(forked_tree(committed=0).live_nodes()) == ["root", "b0", "b0x", "c"]
    assert list(forked_tree(committed=None).live_nodes()) == ["root", "c"]


def test_live_nodes_rejects_inconsistent_branch_fields():
    unknown_group = build(("root", None, None), ("b0", "root", 0, branch("nope", 0)))
    with pytest.raises(ValueError, match="'nope'"):
        unknown_group.live_nodes()
    half_set = build(("root", None, None), ("b0", "root", 0, {"fork_group_id": "g"}),
                     fork_groups=(group(0, n=1),))
    with pytest.raises(ValueError, match="must be set together"):
        half_set.live_nodes()


def test_child_without_fork_step_is_an_error():
    tree = build(("root", None, None), ("a", "root", 0))
    tree.nodes["a"].fork_step = None
    with pytest.raises(ValueError, match="'a'.*fork_step"):
        leaf_coverage(tree)


def test_tree_structure_answers_for_the_live_tree():
    # committed branch b1 (with b1x, b1y) survives; b0 and b0x were never part of the root's run.
    tree = forked_tree(committed=1)
    assert "b0" in tree.nodes and "b0x" in tree.nodes
    assert [n.id for n in tree.leaves()] == ["b1x", "b1y", "c"]
    assert [n.id for n in tree.children("root")] == ["b1", "c"]
    assert [n.id for n in tree.descendants("root")] == ["b1", "c", "b1x", "b1y"]
    assert [n.id for n in tree.leaves_under("root")] == ["b1x", "b1y", "c"]
    assert [(e.parent_id, e.parent_step, e.child_ids) for e in tree.delegation_events()] == [
        ("root", 0, ["b1"]), ("b1", 0, ["b1x", "b1y"]), ("root", 1, ["c"])
    ]
    # leaf coverage is computed from these same answers
    assert len(tree.leaves()) == 3 and leaf_coverage(tree)[("b1", 0)] == pytest.approx(2 / 3)
