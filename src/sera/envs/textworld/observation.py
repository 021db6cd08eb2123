"""Observation and inventory text of a TextWorld-Sync agent.

Everything shared that limits what an agent can do is printed, so contention is visible: who
holds a unique tool, how long a tool cools down, what the closed door hides, the counter, each
dish's progress and the shared budget. The valid actions come last, one per line.
"""

from __future__ import annotations

from sera.envs.textworld.actions import Rules, tool_wait, valid_actions, visible_items
from sera.envs.textworld.state import HEAT_TOOLS, ItemState, WorldState

_ON_CONTAINERS = ("counter", "shelf", "table")


def render_observation(rules: Rules, state: WorldState, agent: str) -> str:
    """What `agent` sees now, ending with "Valid Actions:" and one action per line."""
    here = state.locations[agent]
    seen = [_lying_text(i) for i in visible_items(rules, state, here)]
    lines = [
        f"You are agent {agent}, in the {here}.",
        f"You see: {', '.join(seen)}." if seen else "You see no food here.",
    ]
    door = rules.spec.door
    if door is not None:
        # `reference` rules: a gate opened from any room, hiding only the gated dishes' ingredients
        name = f"The door in the {door.room}" if rules.profile.real_door else "The door"
        if state.door_open:
            lines.append(f"{name} is open.")
        else:
            behind = [f"the {r}" for r in door.locks_rooms if r in rules.locked_rooms]
            behind += [f"the ingredients of {', '.join(door.locks_dishes)}"] if door.locks_dishes else []
            lines.append(f"{name} is closed; behind it: {'; '.join(behind) or 'nothing'}.")
    lines.append("Tools: " + "; ".join(_tool_text(rules, state, agent, t) for t in ("knife", *HEAT_TOOLS)) + ".")
    counter = [i.name for i in state.counter()]
    lines.append(f"Ready on the counter: {', '.join(counter) if counter else 'nothing'}.")
    for dish, names in rules.dishes.items():
        ready = sum(1 for n in names if state.items[n].is_ready)
        lines.append(
            f"{dish}: {ready}/{len(names)} ingredients ready; prepared: {_yes(dish in state.prepared)}; "
            f"eaten: {_yes(dish in state.eaten)}"
        )
    budget = rules.spec.shared_budget
    lines.append(f"Shared steps: {state.steps} used, {max(0, budget - state.steps)} remaining (budget {budget}).")
    if state.done:
        assert state.end_message is not None
        lines.append(f"{state.end_message[0].upper()}{state.end_message[1:]}.")
        lines.append("Valid Actions: none.")
    else:
        lines.append("Valid Actions:")
        lines += [f"- {a}" for a in valid_actions(rules, state, agent)]
    return "\n".join(lines)


def render_inventory(rules: Rules, state: WorldState, agent: str) -> str:
    """The shared inventory: each item's preparation so far and who took it, and the capacities."""
    held = state.inventory()
    caps = [f"{len(held)} item{'s' if len(held) != 1 else ''}"]
    if rules.team_capacity is not None:
        caps.append(f"shared capacity {rules.team_capacity}")
    if rules.agent_capacity is not None:
        caps.append(f"you hold {len(state.held_by(agent))}/{rules.agent_capacity}")
    head = f"Shared inventory ({'; '.join(caps)})"
    if not held:
        return f"{head}: empty."
    rows = [f"- {i.name} ({i.cook}, {i.cut}; taken by {'you' if i.holder == agent else i.holder})" for i in held]
    return "\n".join([f"{head}:", *rows])


def _tool_text(rules: Rules, state: WorldState, agent: str, tool: str) -> str:
    parts = []
    if tool in rules.exclusive:
        holder = state.tool_holder.get(tool)
        who = "free" if holder is None else "held by you" if holder == agent else f"held by agent {holder}"
        parts.append(f"unique, {who}")
    wait = tool_wait(rules, state, tool)
    parts.append(f"cooling down ({wait} more shared step{'s' if wait > 1 else ''})" if wait else "usable")
    return f"the {tool} is {', '.join(parts)}"


def _lying_text(item: ItemState) -> str:
    if not item.container:
        return item.name
    return f"{item.name} ({'on' if item.container in _ON_CONTAINERS else 'in'} the {item.container})"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
