"""TextWorld-Sync world speed next to TextWorldExpress CookingWorld, measured in one run.

Prints one JSON object:
- ours: world steps/s on a hard-difficulty hand-built kitchen (5 dishes x 4 ingredients, 11 rooms,
  15 distractors, a door, every tool on a 1-step cooldown, agent capacity 1) walked by 3
  agents round-robin, each following a scripted plan for its dishes (a refused step, e.g. a tool
  on cooldown, is retried and counts as a step); a finished world is reset by cloning a pristine
  one. Each step returns the full observation with the valid actions. Also `clone()` cost (us)
  on mid-episode worlds.
- TextWorldExpress CookingWorld (single agent, JVM): steps/s of random valid actions
  (numLocations=11, numIngredients=5, includeDoors=1; numDistractorItems=10, the engine's maximum:
  it rejects 15), and its clone-by-replay cost (reset + replay 20 actions), the only way to fork it.
Usage: python benchmarks/textworld_world.py [--seconds S]   (whole run < 60 s at the default)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import time
from pathlib import Path

from sera.envs.textworld.spec import ROOMS, DishSpec, DistractorSpec, DoorSpec, IngredientSpec, SyncTaskSpec, ToolSpec
from sera.envs.textworld.world import SyncWorld

CUT_VERB = {"chopped": "chop", "sliced": "slice", "diced": "dice", "minced": "mince"}
COOK_CMD = {"fried": "cook {} in stove", "roasted": "cook {} in oven", "grilled": "cook {} on grill"}


def hard_spec() -> SyncTaskSpec:
    """5 dishes x 4 ingredients from the train fold (most-work preparation), 15 distractors."""
    origin = importlib.util.find_spec("textworld_express").origin
    data = json.loads((Path(origin).parent / "cooking_world.json").read_text())
    preps = data["FOOD_PREPARATIONS_SPLITS"]["train"]
    foods = sorted(preps)
    work = lambda p: (p[0] != "raw") + (p[1] != "uncut")  # noqa: E731
    rng = random.Random(0)
    rng.shuffle(foods)
    dishes = []
    for d in range(5):
        ingredients = []
        for name in foods[d * 4:(d + 1) * 4]:
            cook, cut = max(preps[name], key=work)
            source = _source(data, name)
            ingredients.append(IngredientSpec(name=name, dish_id=f"dish_{d + 1}", cook=cook, cut=cut, source=source))
        dishes.append(DishSpec(dish_id=f"dish_{d + 1}", ingredients=ingredients))
    every_food = set(data["FOODS_COMPACT"]) | {f for fold in data["FOOD_PREPARATIONS_SPLITS"].values() for f in fold}
    extra_foods = sorted(every_food - set(foods[:20]))[:15]
    distractors = [DistractorSpec(name=f, source=ROOMS[4 + i % 7]) for i, f in enumerate(extra_foods)]
    return SyncTaskSpec(
        task_id="bench_hard", split="bench", fold="train", family="fork_join", difficulty="hard", seed=0,
        rooms=list(ROOMS), dishes=dishes, distractors=distractors,
        door=DoorSpec(room="kitchen", locks_rooms=["supermarket"], locks_dishes=[]),
        tools=[ToolSpec(name=t, cooldown_steps=1) for t in ("knife", "stove", "oven", "grill")],
        agent_inventory_capacity=1, shared_budget=400, description_view="structured",
        descriptions={"structured": "bench"},
    )


def _source(data: dict, name: str) -> str:
    """The food's first candidate source; foods missing from FOODS_COMPACT (e.g. `red apple`, listed
    there under its base name) are looked up by their last word, else put on the pantry shelf."""
    compact = data["FOODS_COMPACT"]
    entry = compact.get(name) or compact.get(name.split()[-1])
    return entry["locations"][0] if entry else "pantry.shelf"


def dish_plan(spec: SyncTaskSpec, dish: DishSpec) -> list[str]:
    """One agent's actions for one dish, one ingredient at a time (capacity 1), from the kitchen."""
    plan = []
    for ing in dish.ingredients:
        room = ing.room
        if room != "kitchen":
            plan.append(f"go to {room}")
        plan.append(f"take {ing.name}")
        if ing.cut != "uncut":
            plan.append(f"{CUT_VERB[ing.cut]} {ing.name}")
        if room != "kitchen":
            plan.append("go to kitchen")
        if ing.cook != "raw":
            plan.append(COOK_CMD[ing.cook].format(ing.name))
    return plan + [f"prepare {dish.dish_id}", f"eat {dish.dish_id}"]


def bench_ours(spec: SyncTaskSpec, seconds: float) -> dict:
    pristine = SyncWorld(spec)
    agents = ["n0", "n1", "n2"]
    for a in agents:
        pristine.add_agent(a)
    plans_by_agent = {a: [] for a in agents}
    plans_by_agent["n0"].append("open door")
    for i, dish in enumerate(spec.dishes):
        plans_by_agent[agents[i % 3]] += dish_plan(spec, dish)
    steps = episodes = successes = refused = 0
    mid_worlds = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        world, cursor = pristine.clone(), {a: 0 for a in agents}
        while not world.done and any(cursor[a] < len(plans_by_agent[a]) for a in agents):
            for a in agents:
                if cursor[a] < len(plans_by_agent[a]) and not world.done:
                    result = world.step(a, plans_by_agent[a][cursor[a]])
                    steps += 1
                    if result.accepted:
                        cursor[a] += 1
                    else:
                        refused += 1  # a tool cooling down after a sibling's use: retry next turn
            if len(mid_worlds) < 50 and world.steps_used % 7 == 3:
                mid_worlds.append(world.clone())
        episodes += 1
        successes += world.success
    elapsed = time.perf_counter() - start
    reps = 2000
    t0 = time.perf_counter()
    for _ in range(reps):
        for w in mid_worlds:
            w.clone()
    clone_us = (time.perf_counter() - t0) / (reps * len(mid_worlds)) * 1e6
    return {
        "steps_per_s": round(steps / elapsed),
        "clone_us": round(clone_us, 2),
        "episodes": episodes,
        "episode_success_rate": round(successes / episodes, 3),
        "refused_step_fraction": round(refused / steps, 3),
        "steps_per_episode": round(steps / episodes, 1),
        "clone_samples": len(mid_worlds),
    }


def bench_twx(seconds: float) -> dict:
    from textworld_express import TextWorldExpressEnv

    env = TextWorldExpressEnv(envStepLimit=100)
    env.load(
        gameName="cookingworld",
        gameParams="numLocations=11,numIngredients=5,numDistractorItems=10,includeDoors=1,limitInventorySize=0",
    )
    rng = random.Random(0)
    _, infos = env.reset(seed=1, gameFold="train", generateGoldPath=True)
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, done, infos = env.step(rng.choice(infos["validActions"]))
        steps += 1
        if done:
            _, infos = env.reset(seed=1, gameFold="train", generateGoldPath=True)
    step_rate = steps / (time.perf_counter() - start)
    # Clone by replay: the engine cannot copy a state, so a fork = reset + replay of the history.
    _, infos = env.reset(seed=1, gameFold="train", generateGoldPath=True)
    history = []
    for _ in range(20):
        action = rng.choice(infos["validActions"])
        history.append(action)
        _, _, done, infos = env.step(action)
    replays, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds / 2 or replays < 3:
        env.reset(seed=1, gameFold="train", generateGoldPath=True)
        for action in history:
            env.step(action)
        replays += 1
    replay_us = (time.perf_counter() - t0) / replays * 1e6
    env.close()
    return {"steps_per_s": round(step_rate), "clone_by_replay_us": round(replay_us), "replays": replays}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0, help="time per throughput measurement")
    args = parser.parse_args()
    t0 = time.perf_counter()
    ours = bench_ours(hard_spec(), args.seconds)
    twx = bench_twx(args.seconds)
    print(json.dumps({
        "textworld_sync": ours,
        "textworld_express_cookingworld": twx,
        "steps_per_s_ratio_ours_over_twx": round(ours["steps_per_s"] / twx["steps_per_s"], 2),
        "clone_speedup_twx_replay_over_our_clone": round(twx["clone_by_replay_us"] / ours["clone_us"]),
        "wall_s": round(time.perf_counter() - t0, 1),
    }, indent=2))


if __name__ == "__main__":
    main()
