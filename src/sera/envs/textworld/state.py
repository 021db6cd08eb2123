"""Plain state records of a TextWorld-Sync world: items, events, and the mutable world state.

Item states and events are frozen: a transition replaces the record of the one item it touches.
That makes `WorldState.copy()` (the heart of `SyncWorld.clone()`) a handful of shallow dict/list
copies: no record is ever shared *and* mutated, so sharing them between clones is safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Place = Literal["room", "inventory", "counter", "meal", "destroyed"]

CUT_VERBS: dict[str, str] = {"chop": "chopped", "slice": "sliced", "dice": "diced", "mince": "minced"}
"""Cutting command verb -> the cut it produces (all use the knife)."""
COOK_TOOLS: dict[str, str] = {"stove": "fried", "oven": "roasted", "grill": "grilled"}
"""Heat tool -> the cooking it produces (`cook <item> in stove|oven`, `cook <item> on grill`)."""
HEAT_TOOLS: tuple[str, ...] = ("stove", "oven", "grill")
"""Heat tools in listing order."""
DIRECTIONS: dict[str, str] = {"north": "pantry", "south": "dining room", "east": "garden", "west": "supermarket"}
"""`move <direction>` -> the room it leads to (when that room exists in the task)."""


@dataclass(frozen=True, slots=True)
class ItemState:
    """One food in the world (an ingredient of a dish, or a distractor) and where it is now."""

    name: str
    """Food name, unique in the task."""
    dish_id: str | None
    """The dish it belongs to; None for a distractor."""
    expected_cook: str | None
    """Required cooking (`raw` = must not be cooked); None for a distractor."""
    expected_cut: str | None
    """Required cutting (`uncut` = must not be cut); None for a distractor."""
    cook: str = "raw"
    """Cooking applied so far."""
    cut: str = "uncut"
    """Cutting applied so far."""
    place: Place = "room"
    """`room` (lying somewhere), `inventory` (held), `counter` (ready), `meal` (in a prepared dish)
    or `destroyed` (burned)."""
    room: str = ""
    """Room it lies in (only when `place == "room"`)."""
    container: str = ""
    """Container it lies in within `room` (`fridge`, `shelf`, ...), or '' (only when lying)."""
    holder: str | None = None
    """Agent that took it (only when `place == "inventory"`)."""
    collected: bool = False
    """True once any agent has taken it (never reset)."""
    wrong: bool = False
    """True once a cut or cooking other than the expected one was applied (ingredients only)."""
    destroyed: bool = False
    """True once it was cooked a second time (burned)."""

    @property
    def is_ingredient(self) -> bool:
        """True for an ingredient of a dish, False for a distractor."""
        return self.dish_id is not None

    @property
    def prepared_as_expected(self) -> bool:
        """Ingredient whose actual (cook, cut) equals the expected one, and not spoiled."""
        return (
            self.dish_id is not None
            and not self.wrong
            and not self.destroyed
            and self.cook == self.expected_cook
            and self.cut == self.expected_cut
        )

    @property
    def is_ready(self) -> bool:
        """On the counter or already in a prepared meal, prepared as expected."""
        return self.place in ("counter", "meal") and self.prepared_as_expected

    @property
    def where(self) -> str:
        """`room.container` (or `room.`) when lying in a room, else the place name."""
        return f"{self.room}.{self.container}" if self.place == "room" else self.place

    def to_json(self) -> dict[str, Any]:
        """JSON-able view (used by `SyncWorld.snapshot`)."""
        return {
            "name": self.name,
            "dish_id": self.dish_id,
            "expected": None if self.dish_id is None else [self.expected_cook, self.expected_cut],
            "actual": [self.cook, self.cut],
            "place": ["room", self.where] if self.place == "room" else self.place,
            "holder": self.holder,
            "collected": self.collected,
            "wrong": self.wrong,
            "destroyed": self.destroyed,
        }


@dataclass(frozen=True, slots=True)
class Event:
    """One non-lookup action of one agent, accepted or not."""

    seq: int
    """0-based position in the world's event log."""
    agent: str
    """Acting agent id."""
    action: str
    """The command as typed."""
    accepted: bool
    """False when the action was rejected (it still consumed a shared step)."""
    error: str | None
    """Why it was rejected; None when accepted."""
    location_before: str
    """The agent's room before the action."""
    location_after: str
    """The agent's room after the action."""
    steps_after: int
    """Shared steps used after the action."""


@dataclass(slots=True)
class WorldState:
    """Everything about a world that changes; the spec (frozen) lives on `SyncWorld`."""

    items: dict[str, ItemState]
    """Item states by name: ingredients in dish order, then distractors."""
    locations: dict[str, str] = field(default_factory=dict)
    """Agent id -> the room it is in (registration order)."""
    door_open: bool = True
    """False while the task's door is closed."""
    tool_holder: dict[str, str | None] = field(default_factory=dict)
    """Exclusive tool -> the agent holding it, or None when free."""
    tool_ready_at: dict[str, int] = field(default_factory=dict)
    """Tool -> first shared step count at which it may be used again (cooldown)."""
    prepared: frozenset[str] = frozenset()
    """Dishes whose meal is prepared."""
    eaten: frozenset[str] = frozenset()
    """Dishes whose meal is eaten."""
    steps: int = 0
    """Shared steps used by all agents together."""
    done: bool = False
    """True once the world ended (success, failure or budget)."""
    success: bool = False
    """True when every dish was eaten."""
    failure: str | None = None
    """Why the task failed (a spoiled ingredient), if it did."""
    end_message: str | None = None
    """What every later action is refused with, once done."""
    events: list[Event] = field(default_factory=list)
    """The shared event log."""

    def copy(self) -> WorldState:
        """An independent copy: containers are copied, frozen records shared."""
        return WorldState(
            items=self.items.copy(),
            locations=self.locations.copy(),
            door_open=self.door_open,
            tool_holder=self.tool_holder.copy(),
            tool_ready_at=self.tool_ready_at.copy(),
            prepared=self.prepared,
            eaten=self.eaten,
            steps=self.steps,
            done=self.done,
            success=self.success,
            failure=self.failure,
            end_message=self.end_message,
            events=self.events.copy(),
        )

    def held_by(self, agent_id: str) -> list[ItemState]:
        """Items in the inventory that `agent_id` took."""
        return [i for i in self.items.values() if i.place == "inventory" and i.holder == agent_id]

    def inventory(self) -> list[ItemState]:
        """Every item in the shared inventory."""
        return [i for i in self.items.values() if i.place == "inventory"]

    def counter(self) -> list[ItemState]:
        """Items ready on the counter."""
        return [i for i in self.items.values() if i.place == "counter"]
