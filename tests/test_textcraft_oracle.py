"""The scripted TextCraft-Synth expert: its plans solve every published task; through the full
runtime it solves tasks of every difficulty with parallel, nested delegation."""

import asyncio
import json
from collections import Counter

import pytest

from sera.envs.registry import get_env
from sera.envs.textcraft.oracle import (
    TextCraftOracle,
    launch_groups,
    parse_overlaps,
    parse_recipe_lines,
    parse_targets,
    plan,
)
from sera.envs.textcraft.recipes import default_recipe_book
from sera.envs.textcraft.tasks import load_split
from sera.envs.textcraft.world import CraftingWorld
from sera.eval.harness import evaluate
from sera.runtime import RuntimeConfig
from sera.eval.store import tree_path
from sera.types import Message, RolloutTree

BOOK = default_recipe_book()
ORACLE = TextCraftOracle()
RECIPES = {
    item: (BOOK.crafting_depth(item), BOOK.recipes_for(item)[0].result_count, dict(BOOK.recipes_for(item)[0].ingredients))
    for item in BOOK.items() if BOOK.recipes_for(item)
}


def _solve(world: CraftingWorld, targets: dict[str, int], depth: int, max_depth: int = 3) -> int:
    """The oracle's decisions, run sequentially on the world; returns the agents used."""
    delegated = ORACLE.choose_delegations(targets, RECIPES) if depth < max_depth else []
    children, crafts = plan(targets, RECIPES, set(delegated))
    start = world.snapshot()
    agents = 1 + sum(_solve(world, {item: n}, depth + 1) for item, n in children.items())
    for item, ingredients, total in crafts:
        result = world.craft(ingredients, (item, total))
        assert result.startswith("Successfully"), result
    for item, n in targets.items():
        assert world.inventory.get(item, 0) - start.get(item, 0) >= n
    return agents


@pytest.mark.parametrize("split", ["val", "train"])
def test_oracle_plans_solve_every_published_task(split):
    tasks = load_split(split)
    sizes = [_solve(CraftingWorld(BOOK, t.misc["initial_inventory"]), t.misc["target_items"], 0) for t in tasks]
    assert len(sizes) == {"val": 632, "train": 2522}[split]
    assert max(sizes) <= 40, "1 + 3 + 9 + 27 agents at most"


def test_plan_crafts_ingredients_before_what_they_make():
    target = next(iter(BOOK.items_at_tier(6)))
    children, crafts = plan({target: 2}, RECIPES, delegated=set())
    assert children == {} and crafts[-1][0] == target and crafts[-1][2] >= 2
    made: set[str] = set()
    for item, ingredients, _ in crafts:
        assert all(i in made or i not in RECIPES for i in ingredients), f"{item} crafted before an ingredient"
        made.add(item)


def test_only_delegations_with_disjoint_recipe_trees_run_in_parallel():
    overlaps = parse_overlaps("OVERLAP a b\nOVERLAP b c\nnoise")
    assert overlaps == {frozenset("ab"), frozenset("bc")}
    assert launch_groups(["a", "b", "c"], overlaps) == [["a", "c"], ["b"]]
    assert launch_groups(["a", "b", "c"], set()) == [["a", "b", "c"]]


def test_oracle_reads_goal_and_recipe_lines():
    assert parse_targets("Your Goal: Craft the following items: 2x m0_i1, 1x c3_i4\n\nContext provided from parent agent: 9x zz") == {"m0_i1": 2, "c3_i4": 1}
    assert parse_recipe_lines("x\nR m0_i2 2 3 m0_ore*1 m0_i1*2\nTREE DONE") == {"m0_i2": (2, 3, {"m0_ore": 1, "m0_i1": 2})}
    with pytest.raises(ValueError, match="no 'Craft the following items:' goal"):
        ORACLE.reply([Message(role="system", content=""), Message(role="user", content="cook dinner")])


def test_oracle_through_the_full_runtime(tmp_path):
    """Three tasks per difficulty, run concurrently through the sandboxed runtime."""
    tasks = load_split("val")
    sample = [t for band in ("easy", "medium", "hard", "extreme") for t in [x for x in tasks if x.difficulty == band][:3]]
    spec = get_env("textcraft-synth")
    summary = asyncio.run(evaluate(
        sample, spec.oracle(sample), spec.root_env, tmp_path, env_name=spec.name, split="val",
        policy_name="oracle", concurrency=6, show_progress=False,
    ))
    assert summary.overall.successes == len(sample) == 12
    assert {k: v.successes for k, v in summary.by_difficulty.items()} == {"easy": 3, "medium": 3, "hard": 3, "extreme": 3}
    stored = json.loads((tmp_path / "summary.json").read_text())
    assert stored["overall"]["success_rate"] == 1.0

    trees = [RolloutTree.from_json(tree_path(tmp_path, t.id).read_text()) for t in sample]
    assert max(t.depth() for t in trees) == 3, "delegation reaches the maximum depth"
    parallel = [e for t in trees for e in t.delegation_events() if len(e.child_ids) >= 2]
    assert parallel, "some delegations launch several children at once"
    depth3 = [(t, n) for t in trees for n in t.nodes.values() if n.depth == 3]
    assert depth3 and not any(t.children(n.id) for t, n in depth3), "depth-3 agents cannot delegate"
    for tree in trees:
        for node in tree.nodes.values():
            assert node.verified_success is True, (tree.task_id, node.id, node.error)
            assert len(node.steps) <= 20 and node.error is None
    calls = Counter(len(n.steps) for t in trees for n in t.nodes.values())
    assert set(calls) <= {3, 4}, calls

    # Resume: a second run over the same folder redoes nothing and reports the same.
    again = asyncio.run(evaluate(
        sample, spec.oracle(sample), spec.root_env, tmp_path, env_name=spec.name, split="val",
        policy_name="oracle", config=RuntimeConfig(), show_progress=False,
    ))
    assert again.overall.successes == 12 and again.counters == summary.counters
