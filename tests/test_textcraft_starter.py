"""The starter tier of TextCraft-Synth: 1-3 tier-1 crafts per task, from the published world,
disjoint from the published splits and between its own train and val, solvable by the expert."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from sera.envs.registry import get_env
from sera.envs.selection import TaskSelection, select_tasks
from sera.envs.textcraft.oracle import TextCraftOracle
from sera.envs.textcraft.recipes import default_recipe_book
from sera.envs.textcraft.starter import STARTER_TASKS, starter_tasks
from sera.envs.textcraft.task_file import load_tasks, write_tasks
from sera.envs.textcraft.tasks import load_split
from sera.eval.harness import evaluate
from sera.train.config import ConfigError, load_config

BOOK = default_recipe_book()


def _targets(tasks) -> set[str]:
    return {item for t in tasks for item in t.misc["target_items"]}


@pytest.mark.parametrize("split", ["starter-train", "starter-val"])
def test_starter_tasks_are_one_to_three_tier_one_crafts(split: str) -> None:
    tasks = starter_tasks(split)
    assert len(tasks) == STARTER_TASKS[split]
    assert [t.id for t in tasks] == [f"textcraft_synth.{split}.{i}" for i in range(len(tasks))]
    assert {t.difficulty for t in tasks} == {"starter"}
    assert all(BOOK.crafting_depth(item) == 1 for item in _targets(tasks))
    crafts = Counter(t.misc["num_craft_steps"] for t in tasks)
    assert set(crafts) == {1, 2, 3}, crafts
    assert len({tuple(sorted(t.misc["target_items"].items())) for t in tasks}) == len(tasks), "no task twice"
    assert starter_tasks(split) == tasks, "generation is deterministic"


def test_starter_splits_are_disjoint_from_each_other_and_from_the_published_ones() -> None:
    train, val = starter_tasks("starter-train"), starter_tasks("starter-val")
    assert not _targets(train) & _targets(val), "a val target is never a train target"
    published = load_split("train") + load_split("val")
    assert not (_targets(train) | _targets(val)) & _targets(published), "no published task has a tier-1 target"
    assert min(BOOK.crafting_depth(item) for item in _targets(published)) == 2


def test_the_environment_selects_starter_splits_and_task_files_keep_the_label(tmp_path) -> None:
    spec = get_env("textcraft-synth")
    assert {"starter-train", "starter-val"} <= set(spec.splits)
    chosen = select_tasks(spec, TaskSelection(split="starter-val", difficulty="starter", limit=5))
    assert [t.id for t in chosen] == [t.id for t in starter_tasks("starter-val")[:5]]
    path = tmp_path / "starter.jsonl"
    write_tasks(chosen, path)
    assert load_tasks(path) == chosen
    cfg = load_config("configs/main/textcraft-cpu.yaml", overrides=["environment.split=starter-train",
                                                                    "environment.difficulty=starter"])
    assert cfg.environment.split == "starter-train"
    with pytest.raises(ConfigError, match="difficulty"):
        load_config("configs/main/textcraft-cpu.yaml", overrides=["environment.difficulty=beginner"])


def test_the_expert_solves_starter_tasks_through_the_runtime(tmp_path) -> None:
    spec = get_env("textcraft-synth")
    sample = starter_tasks("starter-val")[:12]
    summary = asyncio.run(evaluate(sample, TextCraftOracle(), spec.root_env, tmp_path, env_name=spec.name,
                                   split="starter-val", policy_name="oracle", concurrency=6))
    assert summary.overall.successes == len(sample), summary.failed
