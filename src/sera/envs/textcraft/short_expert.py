"""A TextCraft-Synth expert whose replies a small model can imitate (`sft.expert: short`).

The default expert (`oracle.TextCraftOracle`) explores across two cells, delegates, and writes
a crafting plan whose quantities it computed itself: a 135M model imitating eight of its trees
never finished an easy task. This one writes three short, regular replies and never delegates:

1. **plan**: one fixed cell whose only task-specific line is `want = {...}`, copied from the
   goal. It walks `get_info` down each target's recipe tree and *prints* the crafting calls,
   bottom-up, with every quantity already worked out (`print(craft({...}, ("item", n)))`);
2. **craft**: the printed lines, copied verbatim, one tool call per line;
3. **finish**.

So the model never does arithmetic in prose: it copies the goal into the template, then copies
printed lines. The plan crafts each target's tree from base materials, rounding crafts up to
the recipe's result count; the published inventories budget base materials as if every craft
made one item, which bounds that consumption. Version `EXPERT_VERSION` is recorded by the SFT
report; change it when the replies change.
"""

from __future__ import annotations

import json

from sera.envs.textcraft.oracle import parse_targets
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message

EXPERT_VERSION = "short-v1"
"""The reply format's version (the SFT run's config and report name it)."""
CRAFT_CALL = "print(craft("
"""How each line the plan cell prints (and the craft cell runs) begins."""

_PLAN = '''want = {want}
def plan(item, count):
    recipe = get_info([item])[0]["recipes"]
    if not recipe:
        return
    crafts = -(-count // recipe[0]["result_count"])
    for part, qty in recipe[0]["ingredients"].items():
        plan(part, qty * crafts)
    ingredients = {{part: qty * crafts for part, qty in recipe[0]["ingredients"].items()}}
    print(f"print(craft({{ingredients}}, ({{item!r}}, {{crafts * recipe[0]['result_count']}})))")
for item, count in want.items():
    plan(item, count)'''


class TextCraftShortExpert:
    """The short, regular scripted expert (module docstring); a `Policy`."""

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        return Completion(text=self.reply(messages), finish_reason="stop")

    def reply(self, messages: list[Message]) -> str:
        """The next reply for this conversation."""
        targets = parse_targets(messages[1].content)
        outputs = [m.content for m in messages[2:] if m.role == "user"]
        if not outputs:
            return _reply("Print the crafting calls for my targets.", _PLAN.format(want=json.dumps(targets)))
        if len(outputs) == 1:
            calls = [line.strip() for line in outputs[0].splitlines() if line.strip().startswith(CRAFT_CALL)]
            if calls:
                return _reply("Run the printed crafting calls.", "\n".join(calls))
        summary = ", ".join(f"{n}x {item}" for item, n in targets.items())
        return _reply("Done.", f"finish({json.dumps('Crafted ' + summary + '.')})")


def _reply(thought: str, code: str) -> str:
    return f"<thought>{thought}</thought>\n<python>\n{code}\n</python>"
