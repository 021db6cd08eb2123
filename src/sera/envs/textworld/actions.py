"""Commands of TextWorld-Sync: parsing, preconditions (with the precise reason), the valid list.

One function decides whether a command may run: `check` walks the command's preconditions in
order and returns the first one that fails, worded for the agent ("the knife is held by agent
n2"). The valid list is the candidate commands for which `check` returns None, so the list and
the acceptance rule cannot drift apart. Typed commands are matched after lower-casing and
collapsing whitespace; nothing else is forgiven (articles, plurals and synonyms are errors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sera.envs.textworld.rules import RulesProfile, rules_profile
from sera.envs.textworld.spec import SyncTaskSpec
from sera.envs.textworld.state import COOK_TOOLS, CUT_VERBS, DIRECTIONS, HEAT_TOOLS, ItemState, WorldState

LOOKUPS: dict[str, str] = {
    "look around": "look",
    "look": "look",
    "inventory": "inventory",
    "check inventory": "inventory",
    "view inventory": "inventory",
    "i": "inventory",
    "read cookbook": "cookbook",
}
"""Free lookups (and their aliases) -> lookup kind; they cost no shared step."""
LOOKUP_ACTIONS: tuple[str, ...] = ("look around", "inventory", "read cookbook")
"""The lookups as listed among the valid actions."""
SUPPORTED_COOKING: tuple[str, ...] = ("raw", *COOK_TOOLS.values())
"""Expected cookings the world can produce (CookingWorld's food database uses only these)."""

_COOK_RE = re.compile(r"^cook (.+) (?:in (stove|oven)|on (grill))$")


@dataclass(frozen=True, slots=True)
class Command:
    """A typed command, parsed into its verb and argument (no state involved)."""

    verb: str
    """look, inventory, cookbook, go, move, open_door, take, drop, take_tool, put_tool, claim,
    release, cut, cook, cook_no_tool, prepare, eat, wait, or unknown."""
    arg: str = ""
    """Room, direction, item, tool or dish the command names."""
    detail: str = ""
    """Cut verb (chop/slice/dice/mince) or heat tool (stove/oven/grill)."""
    text: str = ""
    """The normalised command."""

    @property
    def is_lookup(self) -> bool:
        """True for the free lookups."""
        return self.verb in ("look", "inventory", "cookbook")


@dataclass(frozen=True, slots=True)
class Rules:
    """The immutable facts of one task that the commands need, compiled once per world."""

    spec: SyncTaskSpec
    """The task."""
    profile: RulesProfile
    """The rules profile it is played under (`spec.rules`)."""
    agent_capacity: int | None
    """Unready items one agent may hold (None = no limit), as the profile reads the spec."""
    team_capacity: int | None
    """Unready items all agents together may hold (None = no limit)."""
    rooms: tuple[str, ...]
    """Rooms of the task, in order."""
    locked_rooms: frozenset[str]
    """Rooms behind the door (enterable only once it is open; none under `reference`)."""
    locked_dishes: frozenset[str]
    """Dishes whose ingredients are hidden while the door is closed."""
    exclusive: frozenset[str]
    """Tools that must be held (knife) or claimed (heat tools) before use (none under `reference`)."""
    cooldown: dict[str, int]
    """Tool -> blocked shared steps after each use."""
    dishes: dict[str, tuple[str, ...]]
    """Dish id -> its ingredient names, in task order."""
    fixed_commands: tuple[Command, ...]
    """Lookups, every `go to`, every `move`, `open door` (built once; `check` filters them)."""
    tool_commands: tuple[Command, ...]
    """Take/put and claim/release of the exclusive tools."""
    meal_commands: tuple[Command, ...]
    """`prepare` and `eat` of every dish."""
    item_commands: dict[str, tuple[Command, Command, tuple[Command, ...]]]
    """Item -> (take, drop, its four cuts and three cookings)."""

    @classmethod
    def from_spec(cls, spec: SyncTaskSpec) -> Rules:
        """Compile a spec; unsupported cookings are rejected naming the task and ingredient."""
        for dish in spec.dishes:
            for ing in dish.ingredients:
                if ing.cook not in SUPPORTED_COOKING:
                    raise ValueError(
                        f"task {spec.task_id}: ingredient {ing.name!r} of {dish.dish_id} must be {ing.cook}, "
                        f"but TextWorld-Sync only supports cookings {SUPPORTED_COOKING} (CookingWorld's food "
                        "database uses no baked/boiled preparation, and the oven/stove already mean roasted/fried)"
                    )
        door = spec.door
        profile = rules_profile(spec.rules)
        exclusive = profile.exclusive_tools(spec)
        agent_cap, team_cap = profile.capacities(spec)
        fixed = [Command(LOOKUPS[a], text=a) for a in LOOKUP_ACTIONS]
        fixed += [Command("go", room, text=go_command(room)) for room in spec.rooms]
        fixed += [Command("move", d, text=f"move {d}") for d in DIRECTIONS]
        fixed += [Command("open_door", text=OPEN_DOOR)] if door is not None else []
        tools = []
        for tool in ("knife", *HEAT_TOOLS):
            if tool in exclusive:
                verbs = ("take_tool", "put_tool") if tool == "knife" else ("claim", "release")
                tools += [Command(verbs[0], tool, text=take_tool_command(tool)),
                          Command(verbs[1], tool, text=put_tool_command(tool))]
        names = [i.name for d in spec.dishes for i in d.ingredients] + [x.name for x in spec.distractors]
        return cls(
            spec=spec,
            profile=profile,
            agent_capacity=agent_cap,
            team_capacity=team_cap,
            rooms=tuple(spec.rooms),
            locked_rooms=profile.locked_rooms(spec),
            locked_dishes=frozenset(door.locks_dishes) if door else frozenset(),
            exclusive=exclusive,
            cooldown={t.name: t.cooldown_steps for t in spec.tools},
            dishes={d.dish_id: tuple(i.name for i in d.ingredients) for d in spec.dishes},
            fixed_commands=tuple(fixed),
            tool_commands=tuple(tools),
            meal_commands=tuple(
                Command(verb, d.dish_id, text=meal_command(verb, d.dish_id))
                for d in spec.dishes
                for verb in ("prepare", "eat")
            ),
            item_commands={
                n: (
                    Command("take", n, text=take_command(n)),
                    Command("drop", n, text=f"drop {n}"),
                    tuple(Command("cut", n, v, f"{v} {n}") for v in CUT_VERBS)
                    + tuple(Command("cook", n, t, cook_text(n, t)) for t in HEAT_TOOLS),
                )
                for n in names
            },
        )


WAIT = "wait"
"""An idle shared step (changes nothing): lets an agent sit out a tool's cooldown."""
OPEN_DOOR = "open door"
"""Opens the task's door."""
_WAIT = Command("wait", text=WAIT)


def normalise(text: str) -> str:
    """Lower-case, trimmed, single-spaced."""
    return " ".join(text.lower().split())


def go_command(room: str) -> str:
    """`go to pantry`."""
    return f"go to {room}"


def take_command(item: str) -> str:
    """`take red apple` (a food; the knife is `take_tool_command`)."""
    return f"take {item}"


def meal_command(verb: str, dish_id: str) -> str:
    """`prepare dish_1` or `eat dish_1`."""
    return f"{verb} {dish_id}"


def take_tool_command(tool: str) -> str:
    """How an agent gets hold of an exclusive tool: `take knife`, or `claim stove` for a heat
    tool (a station, which is claimed where it stands rather than carried)."""
    return f"take {tool}" if tool == "knife" else claim_command(tool)


def put_tool_command(tool: str) -> str:
    """How an agent gives an exclusive tool back: `put knife`, or `release stove`."""
    return f"put {tool}" if tool == "knife" else release_command(tool)


def claim_command(station: str) -> str:
    """`claim stove` (heat tools only)."""
    return f"claim {station}"


def release_command(station: str) -> str:
    """`release stove` (heat tools only)."""
    return f"release {station}"


def cook_text(item: str, tool: str) -> str:
    """The canonical cooking command."""
    return f"cook {item} {'on' if tool == 'grill' else 'in'} {tool}"


def cut_command(item: str, cut: str) -> str:
    """The command that gives `item` the cut `cut` (`slice red apple`)."""
    for verb, result in CUT_VERBS.items():
        if result == cut:
            return f"{verb} {item}"
    raise ValueError(f"no command cuts {item!r} {cut!r}; cuts: {', '.join(CUT_VERBS.values())}")


def cook_command(item: str, cooking: str) -> str:
    """The command that gives `item` the cooking `cooking` (`cook red apple in oven`)."""
    for tool, result in COOK_TOOLS.items():
        if result == cooking:
            return cook_text(item, tool)
    raise ValueError(f"ingredient {item!r} must be {cooking}, which no TextWorld-Sync tool produces")


def parse(text: str) -> Command:
    """Parse a typed command; never raises (garbage becomes verb `unknown`)."""
    cmd = normalise(text)
    if cmd in LOOKUPS:
        return Command(LOOKUPS[cmd], text=cmd)
    if cmd in (OPEN_DOOR, WAIT):
        return Command(cmd.replace(" ", "_"), text=cmd)
    head, _, rest = cmd.partition(" ")
    if not rest:
        return Command("unknown", text=cmd)
    if head == "go" and rest.startswith("to "):
        return Command("go", rest[3:], text=cmd)
    if head == "cook":
        match = _COOK_RE.match(cmd)
        if match:
            tool = match.group(2) or match.group(3)
            return Command("cook", match.group(1), tool, cook_text(match.group(1), tool))
        return Command("cook_no_tool", rest, text=cmd)
    if head in CUT_VERBS:
        return Command("cut", rest, head, cmd)
    if head == "take" and rest == "knife":
        return Command("take_tool", rest, text=cmd)
    if head in ("move", "take", "drop", "claim", "release", "prepare", "eat"):
        return Command(head, rest, text=cmd)
    if head == "put":
        return Command("put_tool", rest, text=cmd)
    return Command("unknown", text=cmd)


def _lying_here(item: ItemState, room: str) -> bool:
    return item.place == "room" and item.room == room


def _hidden(rules: Rules, state: WorldState, item: ItemState) -> bool:
    return not state.door_open and item.dish_id in rules.locked_dishes


def visible_items(rules: Rules, state: WorldState, room: str) -> list[ItemState]:
    """Items lying in `room` that the closed door does not hide."""
    return [i for i in state.items.values() if _lying_here(i, room) and not _hidden(rules, state, i)]


def tool_wait(rules: Rules, state: WorldState, tool: str) -> int:
    """Shared steps until `tool` is off cooldown (0 = usable now)."""
    return max(0, state.tool_ready_at.get(tool, 0) - state.steps)


def _tool_problem(rules: Rules, state: WorldState, agent: str, tool: str) -> str | None:
    if tool in rules.exclusive:
        holder = state.tool_holder.get(tool)
        how = take_tool_command(tool)
        if holder is None:
            return f"the {tool} is unique: '{how}' in the kitchen first"
        if holder != agent:
            return f"the {tool} is held by agent {holder}"
    wait = tool_wait(rules, state, tool)
    if wait:
        return f"the {tool} is cooling down ({wait} more shared step{'s' if wait > 1 else ''})"
    return None


def _door_reason(rules: Rules, what: str) -> str:
    door = rules.spec.door
    assert door is not None
    where = f"in the {door.room}" if rules.profile.real_door else "from any room"
    return f"the door is closed; {what} behind it (open it {where})"


def _held_item(state: WorldState, name: str) -> tuple[ItemState | None, str | None]:
    item = state.items.get(name)
    if item is None:
        return None, f"no item called {name!r} here"
    if item.place != "inventory":
        return None, f"{name} is not in the inventory ({_place_phrase(item)})"
    return item, None


def _place_phrase(item: ItemState) -> str:
    return {
        "room": "it is lying somewhere; take it first",
        "inventory": f"held by agent {item.holder}",
        "counter": "it is already ready on the counter",
        "meal": "it is already in a prepared meal",
        "destroyed": "it was burned and is gone",
    }[item.place]


def _capacity_problem(rules: Rules, state: WorldState, agent: str) -> str | None:
    shared_cap, agent_cap = rules.team_capacity, rules.agent_capacity
    if shared_cap is None and agent_cap is None:
        return None
    held = mine = 0
    for item in state.items.values():  # one pass: this runs for every `take` candidate
        if item.place == "inventory":
            held += 1
            mine += item.holder == agent
    if shared_cap is not None:
        if held >= shared_cap:
            return f"the inventory is full ({held}/{shared_cap} shared); drop an item or get one ready first"
    if agent_cap is not None:
        if mine >= agent_cap:
            return f"you already hold {mine}/{agent_cap} items (your capacity); drop one or get one ready first"
    return None


def check(rules: Rules, state: WorldState, agent: str, cmd: Command) -> str | None:
    """Why `agent` may not run `cmd` now (the first failing precondition), or None when it may."""
    if state.done:
        return state.end_message
    here = state.locations[agent]
    verb, arg = cmd.verb, cmd.arg
    if cmd.is_lookup or verb == "wait":
        return None
    if verb == "go" or verb == "move":
        if verb == "move":
            if arg not in DIRECTIONS:
                return f"unknown direction {arg!r}; directions are north, south, east, west"
            target = DIRECTIONS[arg]
            if target not in rules.rooms:
                return f"there is no room to the {arg} (the {target} is not part of this kitchen)"
        else:
            target = arg
            if target not in rules.rooms:
                return f"there is no room called {arg!r} (rooms: {', '.join(rules.rooms)})"
        if target == here:
            return f"you are already in the {here}"
        if not state.door_open and target in rules.locked_rooms:
            return _door_reason(rules, f"the {target} is")
        return None
    if verb == "open_door":
        door = rules.spec.door
        if door is None:
            return "there is no door to open in this task"
        if state.door_open:
            return "the door is already open"
        if rules.profile.real_door and here != door.room:
            return f"the door is in the {door.room}; you are in the {here}"
        return None
    if verb in ("take_tool", "put_tool", "claim", "release"):
        return _check_tool_handling(rules, state, agent, here, cmd)
    if verb == "take":
        item = state.items.get(arg)
        if item is None:
            return f"no item called {arg!r} here"
        if item.place != "room":
            return f"{arg} cannot be taken: {_place_phrase(item)}"
        if item.room != here:
            return f"no item called {arg!r} here (you are in the {here})"
        if _hidden(rules, state, item):
            return _door_reason(rules, f"the ingredients of {item.dish_id} are")
        return _capacity_problem(rules, state, agent)
    if verb == "drop":
        item, problem = _held_item(state, arg)
        if problem:
            return problem
        assert item is not None
        if item.holder != agent:
            return f"{arg} is held by agent {item.holder}, not by you"
        return None
    if verb == "cut":
        item, problem = _held_item(state, arg)
        if problem:
            return problem
        assert item is not None
        if item.cut != "uncut":
            return f"{arg} is already {item.cut}"
        if not rules.profile.any_preparation and item.expected_cut != CUT_VERBS[cmd.detail]:
            return _not_required(item, "cut", CUT_VERBS[cmd.detail])
        return _tool_problem(rules, state, agent, "knife")
    if verb in ("cook", "cook_no_tool"):
        if verb == "cook_no_tool":
            return "cooking is written 'cook <item> in stove', 'cook <item> in oven' or 'cook <item> on grill'"
        item, problem = _held_item(state, arg)
        if problem:
            return problem
        assert item is not None
        if rules.profile.kitchen_only and here != "kitchen":
            return f"you are in the {here}; cooking needs the kitchen"
        if not rules.profile.any_preparation:
            if item.cook != "raw":
                return f"{arg} is already {item.cook}"
            if item.expected_cook != COOK_TOOLS.get(cmd.detail):
                return _not_required(item, "cooking", COOK_TOOLS.get(cmd.detail, cmd.detail))
        return _tool_problem(rules, state, agent, cmd.detail)
    if verb in ("prepare", "eat"):
        if arg not in rules.dishes:
            return f"there is no dish called {arg!r} (dishes: {', '.join(rules.dishes)})"
        if rules.profile.kitchen_only and here != "kitchen":
            return f"you are in the {here}; meals are {'prepared' if verb == 'prepare' else 'eaten'} in the kitchen"
        if verb == "prepare":
            if arg in state.prepared:
                return f"{arg} is already prepared"
            missing = [n for n in rules.dishes[arg] if state.items[n].place != "counter"]
            if missing:
                total = len(rules.dishes[arg])
                return (
                    f"{arg} is not ready: {total - len(missing)}/{total} ingredients on the counter; "
                    f"missing: {', '.join(missing)}"
                )
            return None
        if arg in state.eaten:
            return f"{arg} was already eaten"
        if arg not in state.prepared:
            return f"{arg} is not prepared yet ('prepare {arg}' first)"
        return None
    return f"unknown command {cmd.text!r}; see Valid Actions"


def _not_required(item: ItemState, kind: str, result: str) -> str:
    """Why a preparation other than the required one is refused (`reference` rules)."""
    if item.dish_id is None:
        return f"{item.name} is in no recipe; only an ingredient's required cut and cooking are possible"
    required = item.expected_cut if kind == "cut" else item.expected_cook
    return f"{item.name} must be {required}, not {result}; only its required {kind} is possible"


def _check_tool_handling(rules: Rules, state: WorldState, agent: str, here: str, cmd: Command) -> str | None:
    verb, tool = cmd.verb, cmd.arg
    if verb in ("take_tool", "put_tool") and tool != "knife":
        return f"only the knife can be {'taken' if verb == 'take_tool' else 'put back'} ('drop <item>' puts food down)"
    if verb in ("claim", "release") and tool not in HEAT_TOOLS:
        return f"there is no tool called {tool!r} to {verb} (heat tools: {', '.join(HEAT_TOOLS)})"
    if tool not in rules.exclusive:
        action = "claiming" if verb in ("claim", "release") else "taking"
        return f"the {tool} is shared by everyone and needs no {action}"
    holder = state.tool_holder.get(tool)
    if verb in ("take_tool", "claim"):
        if holder == agent:
            return f"you already hold the {tool}"
        if holder is not None:
            return f"the {tool} is held by agent {holder}"
    elif holder != agent:
        return f"you do not hold the {tool}" + (f" (agent {holder} does)" if holder else "")
    if here != "kitchen":
        done = "taken" if verb in ("take_tool", "claim") else "returned"
        return f"you are in the {here}; the {tool} is {done} in the kitchen"
    return None


def candidates(rules: Rules, state: WorldState, agent: str) -> list[Command]:
    """Commands worth checking for `agent` now, in listing order (lookups, movement, door,
    take/drop, tool handling, preparation, meals, wait)."""
    here = state.locations[agent]
    items = rules.item_commands
    out = list(rules.fixed_commands)
    out += [items[i.name][0] for i in state.items.values() if _lying_here(i, here)]
    held = [i for i in state.items.values() if i.place == "inventory"]
    out += [items[i.name][1] for i in held if i.holder == agent]
    out += rules.tool_commands
    for item in held:
        out += items[item.name][2]
    out += rules.meal_commands
    out.append(_WAIT)
    return out


def valid_actions(rules: Rules, state: WorldState, agent: str) -> list[str]:
    """The commands `agent` may run now (empty once the world is done)."""
    if state.done:
        return []
    return [c.text for c in candidates(rules, state, agent) if check(rules, state, agent, c) is None]


def command_universe(rules: Rules) -> list[str]:
    """Every command text that could ever be valid in this task (for exhaustive tests)."""
    names = [i.name for d in rules.spec.dishes for i in d.ingredients] + [x.name for x in rules.spec.distractors]
    out = list(LOOKUP_ACTIONS) + [go_command(r) for r in rules.rooms] + [f"move {d}" for d in DIRECTIONS]
    out += [OPEN_DOOR] + [f(t) for t in ("knife", *HEAT_TOOLS) for f in (take_tool_command, put_tool_command)]
    for name in names:
        out += [take_command(name), f"drop {name}"] + [f"{v} {name}" for v in CUT_VERBS]
        out += [cook_text(name, t) for t in HEAT_TOOLS]
    out += [meal_command(v, d) for d in rules.dishes for v in ("prepare", "eat")]
    return out + [WAIT]
