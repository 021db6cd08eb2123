"""The starter tier of TextCraft-Synth: 1-3 crafts per task, below the published "easy".

Not part of the paper's data. A 135M model on a 2-core CPU cannot yet finish an easy task (a
depth-2 or depth-3 recipe tree, ~6 crafts), so RL there sees no success to reinforce; this tier
is the curriculum step below it (`docs/curriculum.md`). It is made from the published world
itself, so nothing about the game changes:

- the same recipe book (seed 42) and the same item split: the first draws of the published
  generator's stream (`Random(42)`) divide every tier's items 80/20 into train and val targets,
  exactly as for the published splits, so a starter-val target is never a starter-train one;
- targets are **tier-1 items** (crafted directly from base materials), which no published
  task has as a target (the published bands start at tier 2): the starter splits share no
  task with the published ones;
- 1..3 distinct targets, each wanted 1..3 times: one `craft` per target, so 1-3 crafts; the
  inventory is drawn by the published generator's own rule (each needed base material, a
  random spare, 1..3 distractors), from its own stream (`Random(seed + STREAM)`), so the
  published splits and their generation are untouched.

Splits `starter-train` and `starter-val`, difficulty `starter`, ids `textcraft_synth.starter-train.<i>`.
"""

from __future__ import annotations

import random

from sera.envs.textcraft.recipes import default_recipe_book
from sera.envs.textcraft.task_generator import (
    PUBLISHED_DISTRACTOR_ORDER,
    DifficultyBand,
    GenerationConfig,
    _attempt,
    _split_target_items,
    _to_task,
    gc_paused,
)
from sera.types import Task

STARTER = "starter"
"""The difficulty label of starter tasks."""
STARTER_SPLITS: dict[str, str] = {"starter-train": "train", "starter-val": "val"}
"""Starter split -> the published item pool its targets come from."""
STARTER_BAND = DifficultyBand(min_tier=1, max_tier=1, max_targets=3, max_count=3)
"""Tier-1 targets, 1..3 of them, each 1..3 times."""
STARTER_TASKS: dict[str, int] = {"starter-train": 400, "starter-val": 128}
"""Tasks per starter split (fewer when the (targets, counts) combinations run out)."""
STREAM = 1_000_003
"""Offset of the starter draws' seed from the world's: a stream of its own."""


def is_starter_split(split: str) -> bool:
    return split in STARTER_SPLITS


def _generate(split: str, seed: int) -> list[Task]:
    config = GenerationConfig(seed=seed)
    book = default_recipe_book()
    pools = _split_target_items(book, random.Random(seed), config.val_item_fraction)
    candidates = list(pools[STARTER_SPLITS[split]][1])  # type: ignore[index]
    # One stream per split, so each split's tasks do not depend on the other's size.
    rng = random.Random(seed + STREAM + list(STARTER_SPLITS).index(split))
    wanted, seen, drafts = STARTER_TASKS[split], set(), []  # type: ignore[var-annotated]
    for _ in range(wanted * config.attempts_per_task):
        if len(drafts) == wanted:
            break
        draft = _attempt(book, rng, STARTER, STARTER_BAND, candidates, PUBLISHED_DISTRACTOR_ORDER, seen)
        if draft is not None:
            drafts.append(draft)
    return [_to_task(d, f"textcraft_synth.{split}.{i}", config.max_steps) for i, d in enumerate(drafts)]


def starter_tasks(split: str, seed: int = 42) -> list[Task]:
    """The tasks of a starter split, generated afresh."""
    if split not in STARTER_SPLITS:
        raise ValueError(f"unknown starter split {split!r}; expected one of {', '.join(STARTER_SPLITS)}")
    with gc_paused():
        return _generate(split, seed)
