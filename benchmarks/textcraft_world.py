"""TextCraft-Synth world speed: tool calls per second, and clone cost vs copy.deepcopy.

Prints one JSON object. The clone figures are measured side by side in this run on the same
states (the 632 val worlds after replaying their gold trajectories): our clone, `copy.deepcopy`
of the world (what a generic clone copies: the recipe book comes along), and `copy.deepcopy` of
the inventory alone.
Usage: python benchmarks/textcraft_world.py [--repeats N]
"""

from __future__ import annotations

import argparse
import copy
import json
import time

from sera.envs.textcraft.recipes import default_recipe_book
from sera.envs.textcraft.tasks import load_split
from sera.envs.textcraft.world import CraftingWorld


def _rate(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20_000)
    args = parser.parse_args()
    book = default_recipe_book()
    tasks = load_split("val")
    worlds = [CraftingWorld(book, t.misc["initial_inventory"]) for t in tasks]

    # Replay every gold trajectory: the craft tool on real inputs (gold target = number of crafts).
    crafts = 0
    start = time.perf_counter()
    for task, world in zip(tasks, worlds):
        for step in task.misc["gold_trajectory"]:
            result = world.craft(step["ingredients"], (step["target"][0], step["result_count"]))
            assert result.startswith("Successfully"), result
            crafts += 1
    craft_rate = crafts / (time.perf_counter() - start)

    world = worlds[len(worlds) // 2]
    items = list(world.inventory)[:5]
    info_rate = _rate(lambda: world.get_info(items), args.repeats)
    view_rate = _rate(world.view_inventory, args.repeats)

    clone_rate = _rate(lambda: [w.clone() for w in worlds], max(1, args.repeats // len(worlds)))
    deep_rate = _rate(lambda: [copy.deepcopy(w) for w in worlds], max(1, args.repeats // len(worlds) // 2000))
    deep_inv_rate = _rate(lambda: [copy.deepcopy(w.inventory) for w in worlds], max(1, args.repeats // len(worlds) // 20))
    per_clone_us = 1e6 / (clone_rate * len(worlds))
    per_deep_us = 1e6 / (deep_rate * len(worlds))
    per_deep_inv_us = 1e6 / (deep_inv_rate * len(worlds))
    print(json.dumps({
        "craft_calls_per_s": round(craft_rate),
        "get_info_5_items_calls_per_s": round(info_rate),
        "view_inventory_calls_per_s": round(view_rate),
        "clone_us": round(per_clone_us, 2),
        "deepcopy_us": round(per_deep_us, 2),
        "deepcopy_over_clone": round(per_deep_us / per_clone_us, 1),
        "deepcopy_inventory_only_us": round(per_deep_inv_us, 2),
        "deepcopy_inventory_only_over_clone": round(per_deep_inv_us / per_clone_us, 1),
        "mean_inventory_entries": round(sum(len(w.inventory) for w in worlds) / len(worlds), 1),
        "states": len(worlds),
        "crafts_replayed": crafts,
    }, indent=2))


if __name__ == "__main__":
    main()
