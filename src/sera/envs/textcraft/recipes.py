"""The TextCraft-Synth recipe book: five material domains, tiers 0..12, one recipe per item.

The book is generated from a seed with the same sequence of random draws as the reference
generator (`synth_recipe_generator.py` of `platoon-textcraft` 0.3.0), so `build_recipe_book()`
with its defaults (seed 42, 25 items per domain and tier) is the world of the published
TextCraft-Synth tasks:

- 50 unique base items (10 per domain: `m0_ore`..`m9_ore`, `c0_ore`.., `raw_o0`.., `raw_a0`..,
  `raw_t0`..), tier 0, no recipe;
- 1,402 craftable items, per tier 1..12:
  125, 125, 120, 120, 120, 115, 115, 115, 110, 114, 114, 109
  (`max(1, 25 - tier // 3)` per domain and tier, times 5 domains, plus 4 cross-domain items
  at each of tiers 10, 11 and 12).

An item's `crafting_depth` is its tier *label*. Ingredients may skip tiers, so the longest real
recipe chain can be shorter than the label (the reference behaves the same way).

Every ingredient has a strictly lower tier than the item it makes, so the book is acyclic.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

MAX_TIER = 12
"""Highest tier of the world."""
MAX_INGREDIENTS = 6
"""No recipe has more distinct ingredients than this."""
PREFIXES_PER_DOMAIN = 10
"""Generic name prefixes per domain (`m0`..`m9`); larger tiers reuse them with a suffix."""


class Domain(Enum):
    """A material domain; the value is the letter that starts its item names."""

    METAL = "m"
    CRYSTAL = "c"
    ORGANIC = "o"
    ARCANE = "a"
    TECH = "t"


@dataclass(frozen=True)
class Recipe:
    """One way to craft an item: consume the ingredients once, get `result_count` items."""

    ingredients: dict[str, int]
    """Ingredient name -> amount consumed per craft (read-only by convention)."""
    result_count: int
    """Items produced per craft."""


@dataclass(frozen=True)
class TierRule:
    """How recipes of one tier are drawn."""

    min_ingredients: int
    """Distinct ingredients before the random extra (0..min(2, tier // 3))."""
    result_counts: tuple[int, int]
    """Inclusive range of `Recipe.result_count`."""


TIER_RULES: dict[int, TierRule] = {
    1: TierRule(1, (2, 4)),
    2: TierRule(2, (2, 3)),
    3: TierRule(2, (1, 2)),
    4: TierRule(2, (1, 2)),
    5: TierRule(2, (1, 2)),
    6: TierRule(2, (1, 1)),
    7: TierRule(2, (1, 1)),
    8: TierRule(3, (1, 1)),
    9: TierRule(3, (1, 1)),
    10: TierRule(3, (1, 1)),
    11: TierRule(3, (1, 1)),
    12: TierRule(4, (1, 1)),
}
"""Recipe shape per craftable tier: higher tiers take more ingredients and yield one item."""

_M, _C, _O, _A, _T = Domain.METAL, Domain.CRYSTAL, Domain.ORGANIC, Domain.ARCANE, Domain.TECH
CROSS_DOMAIN_ITEMS: tuple[tuple[str, int, tuple[Domain, ...]], ...] = (
    ("x10_mc", 10, (_M, _C)),
    ("x10_ot", 10, (_O, _T)),
    ("x10_am", 10, (_A, _M)),
    ("x10_ct", 10, (_C, _T)),
    ("x11_mct", 11, (_M, _C, _T)),
    ("x11_oam", 11, (_O, _A, _M)),
    ("x11_act", 11, (_A, _C, _T)),
    ("x11_tca", 11, (_T, _C, _A)),
    ("x12_mcat", 12, (_M, _C, _A, _T)),
    ("x12_oacm", 12, (_O, _A, _C, _M)),
    ("x12_tcoa", 12, (_T, _C, _O, _A)),
    ("x12_all", 12, tuple(Domain)),
)
"""(name, tier, domains): items made of one high-tier item from each listed domain."""


@dataclass(frozen=True, eq=False)
class RecipeBook:
    """All items of one generated world and their recipes. Immutable; compare by identity."""

    tiers: Mapping[str, int]
    """Every item -> its tier label (0 for base items), base items first, then generation order."""
    recipes: Mapping[str, tuple[Recipe, ...]]
    """Craftable item -> its recipes (exactly one in generated books)."""
    tier_items: Mapping[int, tuple[str, ...]]
    """Tier -> its items in generation order (domain items, then cross-domain items)."""
    domain_items: Mapping[tuple[Domain, int], tuple[str, ...]]
    """(domain, tier) -> that domain's items of the tier; cross-domain items belong to none."""
    seed: int = 0
    """Seed the book was generated from."""
    items_per_domain_tier: int = 0
    """Generation size parameter (25 for the published world)."""
    _base: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_base", frozenset(self.tier_items.get(0, ())))

    def knows(self, item: str) -> bool:
        """Whether the item exists in this world (base or craftable)."""
        return item in self.tiers

    def is_base(self, item: str) -> bool:
        """Whether the item is a base material (exists, has no recipe)."""
        return item in self._base

    def recipes_for(self, item: str) -> list[Recipe]:
        """The item's recipes; empty for base and unknown items."""
        return list(self.recipes.get(item, ()))

    def crafting_depth(self, item: str) -> int:
        """The item's tier label; 0 for base items and, as in the reference, unknown items."""
        return self.tiers.get(item, 0)

    def items(self) -> tuple[str, ...]:
        """Every item: base items, then craftable items in generation order."""
        return tuple(self.tiers)

    def base_items(self) -> tuple[str, ...]:
        """The unique base items, in order of first generation (`m0_ore` .. `raw_t9`)."""
        return self.tier_items.get(0, ())

    def items_at_tier(self, tier: int) -> tuple[str, ...]:
        """All items of a tier, in generation order."""
        return self.tier_items.get(tier, ())

    def items_in(self, domain: Domain, tier: int) -> tuple[str, ...]:
        """One domain's items of a tier, in generation order (unique names)."""
        return self.domain_items.get((domain, tier), ())


def base_item_name(domain: Domain, prefix: str) -> str:
    """`m3_ore` for metal and crystal, `raw_o3` for the other domains."""
    if domain in (Domain.METAL, Domain.CRYSTAL):
        return f"{prefix}_ore"
    return f"raw_{prefix}"


def craftable_item_name(prefix: str, tier: int) -> str:
    """`m3_i5` below tier 6, `m3_i7_7` from tier 6 on (before any collision suffix)."""
    return f"{prefix}_i{tier}" if tier < 6 else f"{prefix}_i{tier}_{tier}"


def build_recipe_book(seed: int = 42, items_per_domain_tier: int = 25) -> RecipeBook:
    """Generate a world. Same draws as the reference; seed 42 and 25 give the published one."""
    draft = _Draft(random.Random(seed))
    for domain in Domain:
        draft.add_domain(domain, items_per_domain_tier)
    draft.add_cross_domain_items()
    return draft.freeze(seed, items_per_domain_tier)


@functools.cache
def default_recipe_book() -> RecipeBook:
    """The published world (seed 42, 25 items per domain and tier), built once per process."""
    return build_recipe_book()


class _Draft:
    """A world under construction. Consumes `rng` in exactly the reference's order."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.tiers: dict[str, int] = {}
        self.recipes: dict[str, tuple[Recipe, ...]] = {}
        self.tier_items: dict[int, list[str]] = {tier: [] for tier in range(MAX_TIER + 1)}
        # Ingredient pools per (domain, tier). Tier 0 keeps the repeated base names (25 draws
        # over 10 names): the repeats weight the ingredient draws, so they must stay.
        self.pools: dict[tuple[Domain, int], list[str]] = {}

    def add_domain(self, domain: Domain, per_tier: int) -> None:
        prefixes = [f"{domain.value}{i}" for i in range(PREFIXES_PER_DOMAIN)]
        base_pool = self.pools.setdefault((domain, 0), [])
        for i in range(per_tier):
            name = base_item_name(domain, prefixes[i % PREFIXES_PER_DOMAIN])
            base_pool.append(name)
            if name not in self.tiers:
                self.tiers[name] = 0
                self.tier_items[0].append(name)
        for tier in range(1, MAX_TIER + 1):
            for i in range(max(1, per_tier - tier // 3)):
                name = craftable_item_name(prefixes[i % PREFIXES_PER_DOMAIN], tier)
                if name in self.tiers:  # prefixes repeat once i >= 10
                    name = f"{name}_{i}"
                recipe = self.draw_recipe(domain, tier)
                if recipe is not None:
                    self.add_craftable(name, tier, recipe)
                    self.pools.setdefault((domain, tier), []).append(name)

    def draw_recipe(self, domain: Domain, tier: int) -> Recipe | None:
        rng, rule = self.rng, TIER_RULES[tier]
        # (ingredient, tier distance): the two tiers below, plus one item from further down.
        candidates = [
            (item, tier - lower)
            for lower in range(max(0, tier - 2), tier)
            for item in self.pool(domain, lower)
        ]
        if tier >= 4:
            far_tier = rng.choice(range(max(0, tier - 4), tier - 2))
            far_pool = self.pool(domain, far_tier)
            if far_pool:
                candidates.append((rng.choice(far_pool), tier - far_tier))
        if not candidates:
            return None
        wanted = rule.min_ingredients + rng.randint(0, min(2, tier // 3))
        chosen = _weighted_draws(rng, candidates, min(wanted, len(candidates), MAX_INGREDIENTS))
        if not chosen:
            return None
        most = 2 if tier <= 4 else 1  # small amounts keep base requirements from exploding
        # A name drawn twice (repeated base names) keeps its first position and last amount.
        ingredients = {item: rng.randint(1, most) for item in chosen}
        return Recipe(ingredients, rng.randint(*rule.result_counts))

    def add_cross_domain_items(self) -> None:
        for name, tier, domains in CROSS_DOMAIN_ITEMS:
            ingredients: dict[str, int] = {}
            for domain in domains:
                for lower in range(max(1, tier - 3), tier):
                    pool = self.pool(domain, lower)
                    if pool:
                        item = self.rng.choice(pool)  # drawn before its amount
                        ingredients[item] = self.rng.randint(1, 2)
                        break
            if len(ingredients) >= 2:
                self.add_craftable(name, tier, Recipe(ingredients, 1))

    def pool(self, domain: Domain, tier: int) -> list[str]:
        return self.pools.get((domain, tier), [])

    def add_craftable(self, name: str, tier: int, recipe: Recipe) -> None:
        self.tiers[name] = tier
        self.recipes[name] = (recipe,)
        self.tier_items[tier].append(name)

    def freeze(self, seed: int, per_tier: int) -> RecipeBook:
        domain_items = {key: tuple(dict.fromkeys(names)) for key, names in self.pools.items() if names}
        return RecipeBook(
            tiers=dict(self.tiers),
            recipes=dict(self.recipes),
            tier_items={tier: tuple(names) for tier, names in self.tier_items.items()},
            domain_items=domain_items,
            seed=seed,
            items_per_domain_tier=per_tier,
        )


def _weighted_draws(rng: random.Random, candidates: list[tuple[str, int]], count: int) -> list[str]:
    """Draw `count` candidates without replacement, weight 1/(distance+1).

    Written as the reference's cumulative scan (same float sums, same `>=`), because any other
    sampling scheme would consume the random stream differently.
    """
    weights = [1.0 / (distance + 1) for _, distance in candidates]
    remaining = list(range(len(candidates)))
    chosen: list[str] = []
    for _ in range(count):
        if not remaining:
            break
        threshold = rng.random() * sum(weights[i] for i in remaining)
        running = 0.0
        for position, index in enumerate(remaining):
            running += weights[index]
            if running >= threshold:
                chosen.append(candidates[index][0])
                del remaining[position]
                break
    return chosen
