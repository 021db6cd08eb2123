"""Prompt text of TextCraft-Synth agents (our wording of the reference prompts' intent)."""

from __future__ import annotations

from sera.types import Message

SYSTEM_PROMPT = """\
You play a crafting game. You hold an inventory of items and must craft target items from it.
Raw materials in your inventory are enough for the task, but you usually need to craft
intermediate items first. Item names are generic codes (like m3_i5): never guess a recipe,
look it up with get_info.

Craft the requested amounts ON TOP of what you already hold: if you hold 2 of an item and the
goal asks for 3, you must end with at least 5.

<TIPS>
- Each recipe produces a fixed number of items per craft (result_count). The target count you
  pass to craft must be a multiple of it, and every ingredient must be given in exactly the
  amount the recipe needs for that many crafts.
- Check your inventory and the recipes before concluding that something is impossible.
- Your code runs as a cell in a Python notebook: variables persist between your cells, and you
  can use loops, `import json`, `import math` and `await`.
</TIPS>

<DELEGATION>
- Delegating is highly recommended for deep items: launch a subagent for an intermediate
  ingredient (or a group of related ones) and let it do that part while you plan the rest.
- Subagents run the same way you do, can delegate further, and share your inventory: what they
  craft appears in your inventory when they return.
- Independent ingredients can be delegated in parallel with asyncio.gather.
- launch_subagent must be awaited: `await launch_subagent(...)`, never a bare call.
- Keep some of your own budget for the final crafts.
</DELEGATION>

Reply in exactly this format:
<thought>one to three sentences of reasoning</thought>
<python>the code to run</python>
"""

ACTION_SPACE = """\
craft(ingredients: dict, target: tuple) -> str
    Craft target = (item, total_count) from exactly the recipe's ingredients for that count.
    Example: craft({"m0_i1": 2, "m1_i1": 2}, ("m2_i2", 2))
get_info(items: list) -> list[dict]
    For each item: item, can_craft, is_base, in_inventory, crafting_depth, and recipes
    [{"ingredients": {name: amount}, "result_count": n}].
view_inventory() -> dict
    Your current inventory {item: count}.
finish(message: str)
    End your episode with a short report of what you did (required to succeed).
await launch_subagent(targets: dict, context: str = "") -> str
    Run a subagent that crafts `targets` ({item: count}) from the shared inventory and returns its
    report. Example: await asyncio.gather(launch_subagent({"m2_i3": 2}), launch_subagent({"c1_i4": 1}))"""


def goal_text(targets: dict[str, int], context: str = "") -> str:
    """The goal string of a crafting agent (the same format for root and children)."""
    goal = "Craft the following items: " + ", ".join(f"{n}x {item}" for item, n in targets.items())
    if context:
        goal += f"\n\nContext provided from parent agent: {context}"
    return goal


def initial_messages(goal: str, *, depth: int, max_depth: int, budget: int) -> list[Message]:
    """System prompt and first user message of an agent."""
    if depth < max_depth:
        position = f"You are an agent at delegation depth {depth} (maximum {max_depth}); you may launch subagents."
    else:
        position = (
            f"You are an agent at delegation depth {depth}, the maximum: you cannot launch "
            "subagents, do the crafting yourself."
        )
    user = (
        f"# Task\n\nYour Goal: {goal}\nBudget: You have a total budget of {budget} steps to "
        f"complete this task.\n{position}\n\n# Action Space\n\n{ACTION_SPACE}\n\n"
        "Provide your first action."
    )
    return [Message(role="system", content=SYSTEM_PROMPT), Message(role="user", content=user)]
