"""The TextWorld-Sync world: one shared kitchen, several agents acting on it at once.

Our design (pure Python). Below are the `sync` rules; a task whose `spec.rules` is `reference`
is played with the authors' game instead, as `rules.py` lists (lookups cost a step, cooking and
meals anywhere, no unique tools, only required preparations, a door that gates dishes only,
one team capacity); `actions.check` and this module read the profile from `Rules.profile`.

State. Each agent (`add_agent`, default location: kitchen) has its own room; everything else is
shared: the items (every ingredient and every distractor, each lying in a room/container, held in
the one shared inventory with the id of the agent that took it, ready on the counter, in a meal,
or destroyed), the door, the tools (exclusive holder, cooldown), prepared and eaten meals, the
shared step counter against `spec.shared_budget`, and the event log.

Actions (exact strings; see `actions.py` for parsing and the precondition order):
- Free lookups `look around` / `inventory` / `read cookbook` (aliases `look`, `check inventory`,
  `view inventory`, `i`) cost nothing and change nothing.
- `go to <room>`, `move north|south|east|west` (pantry / dining room / garden / supermarket);
  rooms behind the closed door cannot be entered. `open door` only in the door's room.
- `take <item>` (visible items in the agent's room; the closed door hides the ingredients of
  `door.locks_dishes`) within the agent's capacity and the shared capacity; `drop <item>` (own
  items, back into the current room). Distractors can be taken, dropped, cut and cooked, and are
  useless.
- Exclusive tools: `take knife`/`put knife`, `claim <heat tool>`/`release <heat tool>`, in the
  kitchen, only when free / held by this agent.
- `chop|slice|dice|mince <item>` on any uncut inventory item, anywhere; `cook <item> in stove`
  (fried), `in oven` (roasted), `on grill` (grilled) on any inventory item, in the kitchen. The
  tool must be off cooldown and, if exclusive, held by this agent. Every cut and cooking is
  listed, not only the expected one: a cut or cooking other than the expected one marks the
  ingredient `wrong`; cooking an already-cooked item burns it (`destroyed`). Either fails the
  task. Expected `baked`/`boiled` are rejected when the world is built (the food database never
  uses them, and oven/stove already mean roasted/fried).
- An ingredient whose actual (cook, cut) equals the expected one moves at once from the inventory
  to the counter (ready), freeing capacity; (raw, uncut) ingredients are ready when taken.
- `prepare <dish>` (kitchen, all its ingredients on the counter), `eat <dish>` (kitchen, prepared).
- `wait` (always valid, listed last): spends one shared step and does nothing else, so an agent
  can let a cooldown run out without a deliberately invalid action (the reference plan uses it).

Clock. Every non-lookup action, accepted or rejected, costs one shared step; a rejected one
changes nothing else and its error names the failing precondition. A tool used at step s is
blocked for the next `cooldown_steps` shared steps (any agent's). After each step: every dish
eaten -> done + success; an ingredient wrong or destroyed -> done + failure (reason);
steps >= budget -> done. Once done, every action of every agent is refused and costs nothing.

Layout: `state.py` holds the records (frozen item states and events, the one mutable
`WorldState`), `actions.py` parsing, preconditions and the valid list, `observation.py` the text;
this module applies transitions and owns the clock, clone/commit and the lock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from sera.envs.textworld.actions import Command, Rules, check, parse, tool_wait, valid_actions
from sera.envs.textworld.cookbook import cookbook_text
from sera.envs.textworld.merge import merge_states
from sera.envs.textworld.observation import render_inventory, render_observation
from sera.envs.textworld.spec import SyncTaskSpec
from sera.envs.textworld.state import COOK_TOOLS, CUT_VERBS, DIRECTIONS, HEAT_TOOLS, Event, ItemState, WorldState


@dataclass(frozen=True)
class StepResult:
    """What one agent's action did."""

    accepted: bool
    """True when the action ran (lookups included)."""
    observation: str
    """Feedback on the action, then the agent's observation (with its valid actions)."""
    error: str | None
    """Why the action was refused; None when accepted."""
    done: bool
    """True once the world has ended, for every agent."""
    success: bool
    """True once every dish was eaten."""
    failure: str | None
    """Why the task failed, if it did."""
    steps_used: int
    """Shared steps used after the action."""


class SyncWorld:
    """The coordinator: shared state, per-agent views, atomic transitions."""

    def __init__(self, spec: SyncTaskSpec) -> None:
        self.spec = spec
        self._rules = Rules.from_spec(spec)
        items: dict[str, ItemState] = {}
        for dish in spec.dishes:
            for ing in dish.ingredients:
                room, _, container = ing.source.partition(".")
                items[ing.name] = ItemState(ing.name, dish.dish_id, ing.cook, ing.cut, room=room, container=container)
        for extra in spec.distractors:
            room, _, container = extra.source.partition(".")
            items[extra.name] = ItemState(extra.name, None, None, None, room=room, container=container)
        self._state = WorldState(
            items=items,
            door_open=spec.door is None,
            tool_holder={t: None for t in sorted(self._rules.exclusive)},
        )
        self.lock = asyncio.Lock()

    # -- agents and read access --------------------------------------------------------------

    def add_agent(self, agent_id: str, location: str | None = None) -> None:
        """Register an agent (default: in the kitchen); re-adding an id is an error."""
        if agent_id in self._state.locations:
            raise ValueError(f"agent {agent_id!r} is already in world {self.spec.task_id}")
        room = "kitchen" if location is None else location
        if room not in self._rules.rooms:
            raise ValueError(f"cannot place agent {agent_id!r} in {room!r}: rooms are {self._rules.rooms}")
        if not self._state.door_open and room in self._rules.locked_rooms:
            raise ValueError(f"cannot place agent {agent_id!r} in the {room}: it is behind the closed door")
        self._state.locations[agent_id] = room

    def _require(self, agent_id: str) -> None:
        if agent_id not in self._state.locations:
            raise KeyError(f"unknown agent {agent_id!r} in world {self.spec.task_id}")

    @property
    def agents(self) -> tuple[str, ...]:
        """Registered agent ids, in registration order."""
        return tuple(self._state.locations)

    def location(self, agent_id: str) -> str:
        """The room `agent_id` is in."""
        self._require(agent_id)
        return self._state.locations[agent_id]

    def valid_actions(self, agent_id: str) -> list[str]:
        """What `agent_id` may do now, in listing order (empty once done)."""
        self._require(agent_id)
        return valid_actions(self._rules, self._state, agent_id)

    def item(self, name: str) -> ItemState:
        """The (frozen, read-only) state of one item."""
        try:
            return self._state.items[name]
        except KeyError:
            raise KeyError(f"task {self.spec.task_id} has no item {name!r}") from None

    def is_prepared(self, dish_id: str) -> bool:
        """True once `dish_id`'s meal was prepared."""
        self._require_dish(dish_id)
        return dish_id in self._state.prepared

    def is_eaten(self, dish_id: str) -> bool:
        """True once `dish_id`'s meal was eaten."""
        self._require_dish(dish_id)
        return dish_id in self._state.eaten

    def _require_dish(self, dish_id: str) -> None:
        if dish_id not in self._rules.dishes:
            raise KeyError(f"task {self.spec.task_id} has no dish {dish_id!r}")

    @property
    def events(self) -> tuple[Event, ...]:
        """The shared event log (non-lookup actions of all agents)."""
        return tuple(self._state.events)

    def history(self, agent_id: str) -> list[Event]:
        """The events of one agent (its private history)."""
        self._require(agent_id)
        return [e for e in self._state.events if e.agent == agent_id]

    @property
    def done(self) -> bool:
        """True once the world ended (for every agent)."""
        return self._state.done

    @property
    def success(self) -> bool:
        """True once every dish was eaten."""
        return self._state.success

    @property
    def failure(self) -> str | None:
        """Why the task failed, if it did."""
        return self._state.failure

    @property
    def steps_used(self) -> int:
        """Shared steps used by all agents."""
        return self._state.steps

    @property
    def remaining_steps(self) -> int:
        """Shared steps left in the budget."""
        return max(0, self.spec.shared_budget - self._state.steps)

    # -- clone / commit ------------------------------------------------------------------------

    def clone(self) -> SyncWorld:
        """A fully independent world in the same state (spec and rules shared: they are frozen)."""
        twin = SyncWorld.__new__(SyncWorld)
        twin.spec = self.spec
        twin._rules = self._rules
        twin._state = self._state.copy()
        twin.lock = asyncio.Lock()
        return twin

    def commit(self, branch: SyncWorld) -> None:
        """Adopt a branch's state in place (agents, items, clock, log: everything but the lock)."""
        if branch.spec is not self.spec and branch.spec != self.spec:
            raise ValueError(
                f"cannot commit a branch of task {branch.spec.task_id!r} into a world of task {self.spec.task_id!r}"
            )
        self._state = branch._state.copy()

    def merge(self, branch: SyncWorld, base: SyncWorld) -> int:
        """Apply what `branch` changed since `base` (a clone taken with the branch) to this world,
        keeping concurrent changes made here; returns the conflicting keys (see `merge.py`)."""
        for other in (branch, base):
            if other.spec is not self.spec and other.spec != self.spec:
                raise ValueError(
                    f"cannot merge a world of task {other.spec.task_id!r} into a world of task {self.spec.task_id!r}"
                )
        if self._state.done:  # the live world already ended: nothing can change it any more
            return 0
        conflicts = merge_states(self._state, branch._state, base._state)
        self._settle()
        return conflicts

    # -- transitions ---------------------------------------------------------------------------

    def step(self, agent_id: str, action: str) -> StepResult:
        """Run one action of one agent (synchronous and atomic)."""
        self._require(agent_id)
        st = self._state
        cmd = parse(action)
        if st.done:
            return self._result(agent_id, False, st.end_message, f"Refused: {st.end_message}.")
        before = st.locations[agent_id]
        if cmd.is_lookup:
            feedback = self._lookup_text(agent_id, cmd.verb)
            if self._rules.profile.free_lookups:
                return self._result(agent_id, True, None, feedback)
            problem = None  # `reference` rules: a lookup is an action like any other
        else:
            problem = check(self._rules, st, agent_id, cmd)
            feedback = f"Invalid action: {problem}." if problem else self._apply(agent_id, cmd)
        st.steps += 1
        self._settle()
        st.events.append(
            Event(len(st.events), agent_id, action, problem is None, problem, before, st.locations[agent_id], st.steps)
        )
        return self._result(agent_id, problem is None, problem, feedback)

    async def astep(self, agent_id: str, action: str) -> StepResult:
        """`step` under the world's lock (agents of one tree call this concurrently)."""
        async with self.lock:
            return self.step(agent_id, action)

    async def aobserve(self, agent_id: str) -> str:
        """`observe` under the world's lock."""
        async with self.lock:
            return self.observe(agent_id)

    def _result(self, agent_id: str, accepted: bool, error: str | None, text: str) -> StepResult:
        st = self._state
        return StepResult(
            accepted, f"{text}\n\n{self.observe(agent_id)}", error, st.done, st.success, st.failure, st.steps
        )

    def _apply(self, agent: str, cmd: Command) -> str:
        st, verb, arg = self._state, cmd.verb, cmd.arg
        if verb in ("go", "move"):
            st.locations[agent] = DIRECTIONS[arg] if verb == "move" else arg
            return f"You go to the {st.locations[agent]}."
        if verb == "open_door":
            st.door_open = True
            return "You open the door."
        if verb == "wait":
            return "You wait."
        if verb in ("take_tool", "claim"):
            st.tool_holder[arg] = agent
            return f"You {'take' if verb == 'take_tool' else 'claim'} the {arg}."
        if verb in ("put_tool", "release"):
            st.tool_holder[arg] = None
            return f"You {'put back' if verb == 'put_tool' else 'release'} the {arg}."
        if verb == "prepare":
            for name in self._rules.dishes[arg]:
                st.items[name] = replace(st.items[name], place="meal")
            st.prepared = st.prepared | {arg}
            return f"You prepare {arg}."
        if verb == "eat":
            st.eaten = st.eaten | {arg}
            return f"You eat {arg}."
        item = st.items[arg]
        if verb == "take":
            item = replace(item, place="inventory", room="", container="", holder=agent, collected=True)
            text = f"You take the {arg}."
        elif verb == "drop":
            item = replace(item, place="room", room=st.locations[agent], container="", holder=None)
            text = f"You drop the {arg}."
        elif verb == "cut":
            cut = CUT_VERBS[cmd.detail]
            item = replace(item, cut=cut, wrong=item.wrong or _mismatch(item.expected_cut, cut))
            self._use_tool("knife")
            text = f"You {cmd.detail} the {arg}."
        else:  # cook
            self._use_tool(cmd.detail)
            if item.cook != "raw":
                item = replace(item, place="destroyed", holder=None, destroyed=True)
                text = f"You cook the {arg} again: it burns and is destroyed."
            else:
                done = COOK_TOOLS[cmd.detail]
                item = replace(item, cook=done, wrong=item.wrong or _mismatch(item.expected_cook, done))
                text = f"You cook the {arg} in the {cmd.detail}: it is {done}."
        if item.wrong and item.is_ingredient and not st.items[arg].wrong:
            text += f" {item.dish_id} needs it {item.expected_cook}, {item.expected_cut}: it is spoiled."
        if item.place == "inventory" and item.prepared_as_expected:
            item = replace(item, place="counter", holder=None)
            text += f" The {arg} is ready and goes to the counter."
        st.items[arg] = item
        return text

    def _use_tool(self, tool: str) -> None:
        cooldown = self._rules.cooldown[tool]
        if cooldown:
            # Used during the step that ends at steps + 1; blocked for the next `cooldown` steps.
            self._state.tool_ready_at[tool] = self._state.steps + 1 + cooldown

    def _settle(self) -> None:
        st = self._state
        if len(st.eaten) == len(self._rules.dishes):
            st.done, st.success = True, True
            st.end_message = "the episode is over: every dish has been eaten, the task is complete"
            return
        spoiled = next((i for i in st.items.values() if i.is_ingredient and (i.wrong or i.destroyed)), None)
        if spoiled is not None:
            if spoiled.destroyed:
                why = f"{spoiled.name} was cooked twice and burned"
            else:
                why = (
                    f"{spoiled.name} is {spoiled.cook}, {spoiled.cut} but {spoiled.dish_id} needs it "
                    f"{spoiled.expected_cook}, {spoiled.expected_cut}"
                )
            st.done, st.failure = True, f"{why}; {spoiled.dish_id} can no longer be completed"
            st.end_message = f"the episode is over: the task failed ({st.failure})"
            return
        if st.steps >= self.spec.shared_budget:
            st.done = True
            st.end_message = f"the episode is over: the shared budget of {self.spec.shared_budget} steps is used up"

    # -- text ----------------------------------------------------------------------------------

    def _lookup_text(self, agent_id: str, kind: str) -> str:
        if kind == "cookbook":
            return cookbook_text(self.spec)
        if kind == "inventory":
            return self.inventory_text(agent_id)
        return "You look around."

    def inventory_text(self, agent_id: str) -> str:
        """The shared inventory with holders, preparation so far and capacities."""
        self._require(agent_id)
        return render_inventory(self._rules, self._state, agent_id)

    def observe(self, agent_id: str) -> str:
        """What `agent_id` sees now, ending with its valid actions."""
        self._require(agent_id)
        return render_observation(self._rules, self._state, agent_id)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able observable state (for rubrics, judges and tests)."""
        st, spec = self._state, self.spec
        return {
            "task_id": spec.task_id,
            "steps_used": st.steps,
            "shared_budget": spec.shared_budget,
            "remaining_steps": self.remaining_steps,
            "done": st.done,
            "success": st.success,
            "failure": st.failure,
            "door_open": st.door_open if spec.door is not None else None,
            "agents": dict(st.locations),
            "items": {name: item.to_json() for name, item in st.items.items()},
            "inventory": [{"name": i.name, "holder": i.holder} for i in st.inventory()],
            "counter": [i.name for i in st.counter()],
            "tools": {
                t: {
                    "exclusive": t in self._rules.exclusive,
                    "holder": st.tool_holder.get(t),
                    "cooldown_remaining": tool_wait(self._rules, st, t),
                }
                for t in ("knife", *HEAT_TOOLS)
            },
            "dishes": {
                d: {
                    "ready": sum(1 for n in names if st.items[n].is_ready),
                    "total": len(names),
                    "prepared": d in st.prepared,
                    "eaten": d in st.eaten,
                }
                for d, names in self._rules.dishes.items()
            },
            "capacity": {"agent": self._rules.agent_capacity, "shared": self._rules.team_capacity},
            "rules": spec.rules,
            "events": len(st.events),
        }


def _mismatch(expected: str | None, done: str) -> bool:
    """A preparation spoils an ingredient when it differs from the expected one (distractors: never)."""
    return expected is not None and expected != done
