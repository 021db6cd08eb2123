"""The cookbook text (`read cookbook`): every dish, each ingredient's required preparation, and how
each preparation is done. It is readable (the reference returned nothing, §11.1 item 9), because
coarse (extreme) descriptions send the agent to it for the preparations.
"""

from __future__ import annotations

from sera.envs.textworld.actions import cook_command, cut_command
from sera.envs.textworld.spec import IngredientSpec, SyncTaskSpec

HOW_TO = (
    "How to prepare: cut with the knife ('chop', 'slice', 'dice' or 'mince <item>'; anywhere, while the item "
    "is in the inventory); cook in the kitchen: fried = 'cook <item> in stove', roasted = 'cook <item> in oven', "
    "grilled = 'cook <item> on grill'. An ingredient is ready, and goes to the counter by itself, as soon as it "
    "is exactly as listed. Any other cut or cooking spoils it, and cooking it a second time burns it: "
    "either fails the task. When all of a dish's ingredients are on the counter, 'prepare <dish>' then "
    "'eat <dish>' in the kitchen."
)
"""The general instructions printed under the recipes (`sync` rules)."""
HOW_TO_REFERENCE = (
    "How to prepare: cut with the knife ('chop', 'slice', 'dice' or 'mince <item>') and cook with a heat tool "
    "(fried = 'cook <item> in stove', roasted = 'cook <item> in oven', grilled = 'cook <item> on grill'), "
    "anywhere, while the item is in the shared inventory; only the required cut and cooking are offered. "
    "An ingredient is ready, and goes to the counter by itself, as soon as it is exactly as listed. When all "
    "of a dish's ingredients are on the counter, 'prepare <dish>' then 'eat <dish>', in any room."
)
"""The general instructions under `reference` rules (the authors' game)."""


def preparation_line(ing: IngredientSpec) -> str:
    """`red apple: roasted, sliced (slice it, then cook it in the oven)`-style line."""
    if not ing.requires_preparation:
        return f"{ing.name}: raw, uncut (just fetch it)"
    steps = []
    if ing.cut != "uncut":
        steps.append(f"'{cut_command(ing.name, ing.cut)}'")
    if ing.cook != "raw":
        steps.append(f"'{cook_command(ing.name, ing.cook)}'")
    return f"{ing.name}: {ing.cook}, {ing.cut} ({' and '.join(steps)})"


def cookbook_text(spec: SyncTaskSpec) -> str:
    """The full cookbook of a task."""
    lines = ["The cookbook:"]
    for dish in spec.dishes:
        lines.append(f"{dish.dish_id}:")
        lines += [f"- {preparation_line(ing)}" for ing in dish.ingredients]
    lines.append(HOW_TO_REFERENCE if spec.rules == "reference" else HOW_TO)
    return "\n".join(lines)
