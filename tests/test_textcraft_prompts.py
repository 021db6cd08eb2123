"""TextCraft prompt layout: the reference's sections and numbered action space (our wording)."""

from sera.envs.textcraft.prompts import goal_text, initial_messages


def test_first_messages_have_the_reference_layout():
    system, user = initial_messages(goal_text({"m2_i3": 2}), depth=0, max_depth=3, budget=20)
    assert system.role == "system" and user.role == "user"
    tips = system.content.split("<TIPS>")[1].split("</TIPS>")[0]
    crafting, delegation = tips.split("DELEGATION STRATEGY:")
    assert "CRAFTING STRATEGY:" in crafting
    assert sum(line.startswith("- ") for line in crafting.splitlines()) == 5
    assert sum(line.startswith("- ") for line in delegation.splitlines()) == 7
    assert "<thought></thought>" in system.content.split("</TIPS>")[1] and "Jupyter" in system.content
    text = user.content
    assert text.startswith("# Task\n\nYour Goal: Craft the following items: 2x m2_i3\nBudget: You have a total budget of 20 steps")
    space = text.split("# Action Space\n\n")[1]
    signatures = [line for line in space.splitlines() if line[:2] in {"1.", "2.", "3.", "4.", "5."}]
    assert [s.split("(")[0] for s in signatures] == [
        "1. def craft", "2. def get_info", "3. def view_inventory", "4. def finish", "5. async def launch_subagent"]
    assert "craft(ingredients: dict, target: tuple[str, int]) -> str" in signatures[0]
    assert "`asyncio` is already imported" in space
    assert text.rstrip().endswith("followed by one <python></python> block.")
    assert "delegation depth 0 (maximum 3)" in text
    _, last = initial_messages(goal_text({"m2_i3": 2}), depth=3, max_depth=3, budget=20)
    assert "you cannot launch subagents" in last.content
