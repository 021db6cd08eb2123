"""Prompt text of TextCraft-Synth agents: the reference prompts' structure and information in our
own words (system prompt: role, a <TIPS> block with crafting and delegation strategies, the
CodeAct instruction; first user message: # Task with the budget, # Action Space as five numbered
function signatures, the first-action request). One line is ours: the agent's delegation depth
(docs/fidelity.md)."""

from __future__ import annotations

from sera.types import Message

SYSTEM_PROMPT = """\
You play a crafting game: combine ingredients from your inventory into target items. The raw
materials you hold are enough for the task, though you usually need to craft intermediate items
first.

Craft the requested amounts ON TOP of what you already hold: if you hold 2 of an item and the
goal asks for 3, you must end with at least 5.

<TIPS>
CRAFTING STRATEGY:
- A recipe yields a fixed number of items per craft (its result_count), so you can only craft
  multiples of it: a recipe that yields 2 gives 2, 4, 6, ...
- Ingredients scale with the number of crafts: a recipe needing 2 of an ingredient per craft
  needs 4 of it for two crafts.
- Check what you hold before deciding that something cannot be done.
- Confirm with your inventory and the recipe information that the ingredients are there.
- Do the arithmetic carefully: pass exactly the amounts the recipe needs for the count you ask for.

DELEGATION STRATEGY:
- Delegating the crafting of intermediate ingredients is highly recommended.
- Split the task into independent parts that can be solved separately.
- For a complex task, delegate recursively: subagents may launch subagents of their own.
- Delegate one group of related items at a time, not everything at once.
- Items that do not depend on each other can be delegated in parallel.
- Subagents share your inventory: what they craft is in your inventory as soon as they return.
- launch_subagent is async and must be awaited: `await launch_subagent({"item": 1})` or
  `await asyncio.gather(launch_subagent(...), launch_subagent(...))`; a bare
  `launch_subagent({"item": 1})` is an error.
</TIPS>

You act by writing code, over several steps. At each step, reason briefly (one to three
sentences) about your next move inside <thought></thought>, then write the code to run inside
<python></python>. Your code runs as a cell in a Jupyter notebook and you are shown its output.
"""

ACTION_SPACE = """\
Available Actions (python functions):

1. def craft(ingredients: dict, target: tuple[str, int]) -> str
   Craft an item from ingredients in your inventory.
   - ingredients: {item_name: count} to use up, exactly the recipe's amounts for this many crafts
   - target: (item_name, total_count); total_count must be a multiple of the recipe's result_count
   - Example: craft({"m0_i1": 2, "m1_i1": 2}, ("m2_i2", 2))

2. def get_info(items: list) -> list[dict]
   Recipe information for each item.
   - Returns: [{"item": str, "can_craft": bool, "is_base": bool, "in_inventory": int,
                "crafting_depth": int, "recipes": [...]}, ...]
   - crafting_depth: 0 for a base item, 1 for a direct craft, 2 or more when intermediates are needed
   - each recipe is {"ingredients": {item_name: count}, "result_count": int}
   - Example: get_info(["m2_i2", "m0_i1"])

3. def view_inventory() -> dict
   Your current inventory.
   - Returns: {item_name: count}
   - Example: inventory = view_inventory()

4. def finish(message: str) -> str
   End your episode with a short report of what you did (required to succeed).
   - Example: finish("Crafted all the requested items")

5. async def launch_subagent(targets: dict, context: str = "") -> str
   Run a subagent that crafts `targets` from the shared inventory.
   - targets: {item_name: count} to craft
   - context: optional notes for the subagent
   - One subagent: report = await launch_subagent({"m2_i3": 2})
   - In parallel: reports = await asyncio.gather(launch_subagent({"m2_i3": 2}), launch_subagent({"c1_i4": 1}))
   - Returns: the subagent's finish message and its budget use (a list with asyncio.gather)

Note: `asyncio` is already imported. Always await launch_subagent, directly or through asyncio.gather."""

FIRST_ACTION = (
    "Think step by step about what to do first, then reply with one <thought></thought> block "
    "followed by one <python></python> block."
)
"""The closing request of the first user message."""


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
        f"complete this task.\n{position}\n\n# Action Space\n\n{ACTION_SPACE}\n\n{FIRST_ACTION}"
    )
    return [Message(role="system", content=SYSTEM_PROMPT), Message(role="user", content=user)]
