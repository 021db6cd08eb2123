"""Rules profiles of TextWorld-Sync: which game a task is played under.

`sync` is our kitchen (the default of our generated splits): per-agent carrying capacity, real
unique tools in the conflict family, cooking / prepare / eat only in the kitchen, free lookups,
every cut and cooking offered (a wrong one spoils the dish), a door that stands in the kitchen
and also locks the supermarket, and children that start where their parent stands and report
our programmatic goal check.

`reference` is the authors' game (`composite_cooking.py` in the SERA repository), the default of
their V9 task files, whose budgets were drawn for it: one inventory shared by the whole team
with the task's capacity, every action (looking and reading included) costs a shared step,
cooking / prepare / eat work in any room, the conflict family's knife and stove are cooldowns
only, only the required cut or cooking of a held item is offered, the door (opened from any
room) gates only the dependency-gate dishes, children start where the root stands, and a
parent sees the world's success flag for each child.

The profile is `SyncTaskSpec.rules`; the child report and start location can be overridden per
environment (`env.root_env_factory`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from sera.envs.textworld.spec import RulesName, SyncTaskSpec

ChildReport = Literal["goal_check", "world_success"]
ChildStart = Literal["parent", "root"]
RULES: tuple[str, ...] = get_args(RulesName)
"""The profile names."""
CHILD_REPORTS: tuple[str, ...] = get_args(ChildReport)
"""What a parent may be shown about each child."""
CHILD_STARTS: tuple[str, ...] = get_args(ChildStart)
"""Where a child may start."""


@dataclass(frozen=True)
class RulesProfile:
    """The mechanics one task is played with."""

    name: RulesName
    """`sync` or `reference`."""
    free_lookups: bool
    """`look around`, `inventory` and `read cookbook` cost no shared step (False: one each)."""
    team_inventory: bool
    """One capacity for the whole team: the spec's shared capacity, else its per-agent one
    (False: the per-agent and shared capacities apply separately, as the spec states them)."""
    kitchen_only: bool
    """Cooking, `prepare` and `eat` only in the kitchen (False: in any room)."""
    unique_tools: bool
    """The conflict family's exclusive tools must be taken / claimed (False: cooldowns only)."""
    any_preparation: bool
    """Every cut and cooking is offered; a wrong one spoils the dish, a second cooking burns the
    item (False: only the required cut and cooking of a held ingredient)."""
    real_door: bool
    """The door is opened only in its room and also locks `door.locks_rooms` (False: opened
    from any room, it hides only the ingredients of `door.locks_dishes`)."""
    child_report: ChildReport
    """What a parent sees per child: `goal_check` (our subtask check: true / false / unknown)
    or `world_success` (whether the whole task is already solved)."""
    child_start: ChildStart
    """Where a child starts: where its `parent` stands, or where the `root` stands."""

    def with_options(self, child_report: ChildReport | None = None, child_start: ChildStart | None = None) -> RulesProfile:
        """This profile with the child report or start overridden (None keeps the profile's)."""
        if child_report is not None and child_report not in CHILD_REPORTS:
            raise ValueError(f"unknown child report {child_report!r}; expected one of {', '.join(CHILD_REPORTS)}")
        if child_start is not None and child_start not in CHILD_STARTS:
            raise ValueError(f"unknown child start {child_start!r}; expected one of {', '.join(CHILD_STARTS)}")
        return replace(self, child_report=child_report or self.child_report, child_start=child_start or self.child_start)

    def capacities(self, spec: SyncTaskSpec) -> tuple[int | None, int | None]:
        """(per-agent capacity, team capacity) that apply to `spec` (None = no limit)."""
        if self.team_inventory:
            shared = spec.shared_inventory_capacity
            return None, shared if shared is not None else spec.agent_inventory_capacity
        return spec.agent_inventory_capacity, spec.shared_inventory_capacity

    def exclusive_tools(self, spec: SyncTaskSpec) -> frozenset[str]:
        """Tools that must be held before use (none unless `unique_tools`)."""
        return frozenset(t.name for t in spec.tools if t.exclusive) if self.unique_tools else frozenset()

    def locked_rooms(self, spec: SyncTaskSpec) -> frozenset[str]:
        """Rooms the closed door keeps agents out of."""
        return frozenset(spec.door.locks_rooms) if spec.door is not None and self.real_door else frozenset()


PROFILES: dict[str, RulesProfile] = {
    "sync": RulesProfile(
        name="sync", free_lookups=True, team_inventory=False, kitchen_only=True, unique_tools=True,
        any_preparation=True, real_door=True, child_report="goal_check", child_start="parent",
    ),
    "reference": RulesProfile(
        name="reference", free_lookups=False, team_inventory=True, kitchen_only=False, unique_tools=False,
        any_preparation=False, real_door=False, child_report="world_success", child_start="root",
    ),
}
"""The two profiles by name."""


def rules_profile(name: str) -> RulesProfile:
    """The profile called `name`; ValueError lists the known ones."""
    if name not in PROFILES:
        raise ValueError(f"unknown TextWorld rules {name!r}; expected one of {', '.join(RULES)}")
    return PROFILES[name]
