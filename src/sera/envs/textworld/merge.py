"""Three-way merge of world states: commit a counterfactual branch without losing siblings' work.

When a parent launches several children at once and one launch runs counterfactual branches on
copies of the world, the live world keeps changing (the siblings act on it) while the branches
run. Adopting branch 0's whole state would erase those changes (the reference's bug, sera-spec
§11.1 item 5). Instead the branch's *changes since the copy was made* are applied to the live
state, key by key:

- items, agent locations, tool holders and cooldowns: a key the branch changed takes the
  branch's value; if the live world changed the same key to something else, that is a conflict
  (counted; the branch wins, as the committed branch must be what the parent sees);
- the door: opened in the branch -> open;
- prepared and eaten dishes: the branch's new ones are added;
- the shared step counter: the branch's steps are added; events the branch logged are appended
  (renumbered);
- done / success / failure are then recomputed by the world from the merged state.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from sera.envs.textworld.state import WorldState

K = TypeVar("K")
V = TypeVar("V")


def _merge_dict(live: dict[K, V], branch: dict[K, V], base: dict[K, V]) -> int:
    conflicts = 0
    missing = object()
    for key, value in branch.items():
        before = base.get(key, missing)
        if before is not missing and before == value:
            continue
        now = live.get(key, missing)
        if now is not missing and now != before and now != value:
            conflicts += 1
        live[key] = value
    return conflicts


def merge_states(live: WorldState, branch: WorldState, base: WorldState) -> int:
    """Apply `branch - base` onto `live` in place; returns the number of conflicting keys."""
    conflicts = _merge_dict(live.items, branch.items, base.items)
    conflicts += _merge_dict(live.locations, branch.locations, base.locations)
    conflicts += _merge_dict(live.tool_holder, branch.tool_holder, base.tool_holder)
    conflicts += _merge_dict(live.tool_ready_at, branch.tool_ready_at, base.tool_ready_at)
    if branch.door_open and not base.door_open:
        live.door_open = True
    live.prepared = live.prepared | (branch.prepared - base.prepared)
    live.eaten = live.eaten | (branch.eaten - base.eaten)
    live.steps += branch.steps - base.steps
    for event in branch.events[len(base.events):]:
        live.events.append(replace(event, seq=len(live.events), steps_after=live.steps))
    return conflicts
