"""Generate TextCraft-Synth tasks: the published train and val sets, draw for draw.

The procedure and its random draws follow the reference generator (`synth_tasks.py` of
`platoon-textcraft` 0.3.0, `create_synth_datasets` with its defaults), using our own
`random.Random` instances instead of global state:

1. Split the craftable items of every tier: shuffle with `Random(seed)`, first 80% are train
   targets, the rest val targets (no target item is shared between the splits).
2. Per split (train, then val, from the same random stream) and per difficulty, ask for
   `int(requested * share)` tasks and make at most 30 attempts per requested task. An attempt
   draws one target and a count; repeated (item, count) pairs are dropped. The defaults ask
   for 10,000 / 1,000 tasks, more than exist, so every difficulty is exhausted: each target
   item appears once per possible count. That is how the published 2,522 / 632 rows arise
   (asking for 2,522 / 632 instead runs out of attempts first and gives other tasks).
3. The inventory holds each base material the target needs, counted as if every craft made
   one item (a generous over-estimate), plus a random 0..max(1, need // 2) spare, plus 1..3
   draws of distractor base items (1..5 units each, skipped when already present).
4. Tasks are planned with `plan_by_tiers` (the gold trajectory), then each split is shuffled
   with `Random(seed + 1)` and numbered `textcraft_synth.{split}.{i}`.

One input is not a parameter of the reference: distractors are drawn from `list(set_of_base
items)`, whose order depends on the generating process's string-hash seed. We recovered the
order used for the published files from the files themselves (`PUBLISHED_DISTRACTOR_ORDER`);
any other order gives equally valid but different tasks.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sera.envs.textcraft.recipes import RecipeBook, build_recipe_book, default_recipe_book
from sera.envs.textcraft.solver import plan_by_tiers
from sera.types import Task

Split = Literal["train", "val"]
SPLITS: tuple[Split, ...] = ("train", "val")
ENV_NAME = "textcraft-synth"
"""`Task.env` of every TextCraft-Synth task."""


@dataclass(frozen=True)
class DifficultyBand:
    """Which targets a difficulty draws."""

    min_tier: int
    """Lowest target tier."""
    max_tier: int
    """Highest target tier."""
    max_targets: int
    """Targets per task are drawn from 1..max_targets (1 in the published data)."""
    max_count: int
    """Each target's count is drawn from 1..max_count."""


DIFFICULTY_BANDS: dict[str, DifficultyBand] = {
    "easy": DifficultyBand(2, 3, 1, 3),
    "medium": DifficultyBand(4, 6, 1, 3),
    "hard": DifficultyBand(7, 9, 1, 2),
    "extreme": DifficultyBand(10, 12, 1, 2),
}
"""Difficulty -> target band, in generation order."""

# fmt: off
PUBLISHED_DISTRACTOR_ORDER: tuple[str, ...] = (
    "c2_ore", "raw_t7", "c5_ore", "raw_o3", "raw_t6", "m9_ore", "raw_a0", "m4_ore", "raw_o6",
    "raw_a9", "raw_t0", "raw_t9", "m2_ore", "c0_ore", "c9_ore", "raw_o5", "raw_o8", "raw_o0",
    "raw_t5", "raw_t8", "raw_a8", "raw_a2", "raw_o9", "c1_ore", "c7_ore", "c8_ore", "c6_ore",
    "raw_a1", "m5_ore", "raw_a7", "raw_o1", "raw_o7", "raw_o2", "raw_t1", "m8_ore", "m7_ore",
    "m1_ore", "m0_ore", "raw_t2", "raw_a6", "raw_a4", "raw_t4", "raw_t3", "raw_a3", "m3_ore",
    "raw_a5", "raw_o4", "m6_ore", "c4_ore", "c3_ore",
)
# fmt: on
"""The 50 base items in the order the published files' generator iterated its base-item set
(a Python set of strings: the order followed that process's hash seed). Recovered by replaying
the generator against the published rows: each distractor draw picks an index into this
sequence, and the row shows which item (if any) was added, with which count."""


@dataclass(frozen=True)
class GenerationConfig:
    """Parameters of `generate_splits`; the defaults reproduce the published files."""

    seed: int = 42
    """Seeds the recipe book, the item split and the sampling; `seed + 1` shuffles the rows."""
    requested: Mapping[str, int] = field(default_factory=lambda: {"train": 10_000, "val": 1_000})
    """Tasks asked for per split (more than exist: generation stops when attempts run out)."""
    mix: Mapping[str, float] = field(
        default_factory=lambda: {"easy": 0.25, "medium": 0.35, "hard": 0.25, "extreme": 0.15}
    )
    """Share of each difficulty; rounding leftovers go to medium."""
    val_item_fraction: float = 0.2
    """Share of each tier's items held out as val targets."""
    items_per_domain_tier: int = 25
    """Recipe-book size parameter."""
    attempts_per_task: int = 30
    """Attempts allowed per requested task."""
    max_steps: int = 75
    """Step budget written into every task."""
    distractor_order: tuple[str, ...] | None = None
    """Base items to draw distractors from; None: the published order when the book's base
    items are those 50, else the book's base items in generation order."""


def generate_tasks(split: Split, seed: int = 42) -> list[Task]:
    """One split: the published data set for seed 42 (both splits are made; ~3 s).

    As in the reference, `seed` also seeds the recipe book: tasks from another seed belong to
    `build_recipe_book(seed)`, not to the default world the environment uses.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return generate_splits(GenerationConfig(seed=seed))[split]


def generate_splits(config: GenerationConfig | None = None) -> dict[Split, list[Task]]:
    """Both splits; they share one random stream, so val can only be made after train."""
    config = config or GenerationConfig()
    with gc_paused():
        return _generate(config)


def _generate(config: GenerationConfig) -> dict[Split, list[Task]]:
    book = _book_for(config)
    rng = random.Random(config.seed)
    target_pools = _split_target_items(book, rng, config.val_item_fraction)
    distractors = _distractor_order(book, config)
    drafts = {
        split: _sample_split(book, rng, target_pools[split], _quotas(config, split), distractors, config)
        for split in SPLITS
    }
    shuffler = random.Random(config.seed + 1)
    tasks: dict[Split, list[Task]] = {}
    for split in SPLITS:
        shuffler.shuffle(drafts[split])
        tasks[split] = [
            _to_task(draft, f"textcraft_synth.{split}.{i}", config.max_steps)
            for i, draft in enumerate(drafts[split])
        ]
    return tasks


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small acyclic objects.

    Generating or loading the splits allocates about a million dicts and lists; the collector
    would rescan them again and again for cycles that do not exist (a third of the run time).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True)
class _Draft:
    """A task before shuffling gives it an id."""

    difficulty: str
    targets: dict[str, int]
    inventory: dict[str, int]
    gold: list[dict[str, Any]]
    max_depth: int


def _book_for(config: GenerationConfig) -> RecipeBook:
    if (config.seed, config.items_per_domain_tier) == (42, 25):
        return default_recipe_book()
    return build_recipe_book(config.seed, config.items_per_domain_tier)


def _split_target_items(
    book: RecipeBook, rng: random.Random, val_fraction: float
) -> dict[Split, dict[int, list[str]]]:
    pools: dict[Split, dict[int, list[str]]] = {"train": {}, "val": {}}
    for tier in range(1, 13):
        items = list(book.items_at_tier(tier))
        if not items:
            continue
        rng.shuffle(items)
        cut = int(len(items) * (1 - val_fraction))
        pools["train"][tier], pools["val"][tier] = items[:cut], items[cut:]
    return pools


def _distractor_order(book: RecipeBook, config: GenerationConfig) -> tuple[str, ...]:
    if config.distractor_order is not None:
        return config.distractor_order
    if set(PUBLISHED_DISTRACTOR_ORDER) == set(book.base_items()):
        return PUBLISHED_DISTRACTOR_ORDER
    return book.base_items()


def _quotas(config: GenerationConfig, split: Split) -> dict[str, int]:
    total = config.requested[split]
    quotas = {difficulty: int(total * share) for difficulty, share in config.mix.items()}
    quotas["medium"] = quotas.get("medium", 0) + total - sum(quotas.values())
    return quotas


def _sample_split(
    book: RecipeBook,
    rng: random.Random,
    target_pool: Mapping[int, list[str]],
    quotas: Mapping[str, int],
    distractors: Sequence[str],
    config: GenerationConfig,
) -> list[_Draft]:
    drafts: list[_Draft] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for difficulty, quota in quotas.items():
        band = DIFFICULTY_BANDS[difficulty]
        candidates = [
            item for tier in range(band.min_tier, band.max_tier + 1) for item in target_pool.get(tier, [])
        ]
        if not candidates:
            continue  # the reference's attempts would all fail before drawing anything
        made = 0
        for _ in range(quota * config.attempts_per_task):
            if made == quota:
                break
            draft = _attempt(book, rng, difficulty, band, candidates, distractors, seen)
            if draft is not None:
                drafts.append(draft)
                made += 1
    return drafts


def _attempt(
    book: RecipeBook,
    rng: random.Random,
    difficulty: str,
    band: DifficultyBand,
    candidates: list[str],
    distractors: Sequence[str],
    seen: set[tuple[tuple[str, int], ...]],
) -> _Draft | None:
    """One attempt; every random draw below is one of the reference's, in its order."""
    wanted = rng.randint(1, band.max_targets)
    chosen = rng.sample(candidates, min(wanted, len(candidates)))
    targets = {item: rng.randint(1, band.max_count) for item in chosen}
    key = tuple(sorted(targets.items()))
    if key in seen:
        return None
    needed = _base_needs(book, targets)
    if not needed:
        return None
    inventory = {base: amount + rng.randint(0, max(1, amount // 2)) for base, amount in needed.items()}
    for _ in range(rng.randint(1, 3)):
        extra = rng.choice(distractors)
        if extra not in inventory:
            inventory[extra] = rng.randint(1, 5)
    plan = plan_by_tiers(book, targets, inventory)
    if plan is None:
        return None
    seen.add(key)
    return _Draft(
        difficulty=difficulty,
        targets=targets,
        inventory=inventory,
        gold=[step.to_json() for step in plan],
        max_depth=max(book.crafting_depth(item) for item in targets),
    )


def _base_needs(book: RecipeBook, targets: Mapping[str, int]) -> dict[str, int]:
    """Base materials for the targets, as if every craft made one item (an over-estimate)."""
    needs: dict[str, int] = {}
    for item, count in targets.items():
        for base, per_unit in _base_per_unit(book, item):
            needs[base] = needs.get(base, 0) + per_unit * count
    return needs


@functools.lru_cache(maxsize=1 << 14)
def _base_per_unit(book: RecipeBook, item: str) -> tuple[tuple[str, int], ...]:
    """Base materials per unit of `item`, ignoring result counts, in first-visit order."""
    if book.is_base(item):
        return ((item, 1),)
    recipes = book.recipes_for(item)
    if not recipes:
        return ()
    totals: dict[str, int] = {}
    for name, amount in recipes[0].ingredients.items():
        for base, per_unit in _base_per_unit(book, name):
            totals[base] = totals.get(base, 0) + per_unit * amount
    return tuple(totals.items())


def _to_task(draft: _Draft, task_id: str, max_steps: int) -> Task:
    goal = "Craft the following items: " + ", ".join(f"{n}x {item}" for item, n in draft.targets.items())
    return Task(
        id=task_id,
        goal=goal,
        env=ENV_NAME,
        difficulty=draft.difficulty,
        max_steps=max_steps,
        misc={
            "target_items": draft.targets,
            "initial_inventory": draft.inventory,
            "gold_trajectory": draft.gold,
            "difficulty": draft.difficulty,
            "max_depth": draft.max_depth,
            "num_craft_steps": len(draft.gold),
        },
    )
