"""How a launch becomes a child run: the delegation strategies of the runtime.

An environment asks its `NodeHandle` to launch a child and describes the launch as a
`ChildRequest`: the goal, the budget, and, when its world can be copied, a `ForkPoint` (the
shared world, how to build a child environment on any copy of it, and what the parent can see).
The rollout hands the request to its `Delegator`:

- `PlainDelegator` runs the child on the shared world (evaluation, RAO, the delegation stage);
- the training strategies in `sera.train` write a frozen rubric alongside the child (SERA
  execution) or run B counterfactual children on copies of the world (rubric training).

Environments never know which strategy runs; strategies never know which environment it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sera.runtime.rollout import ChildResult, EnvFactory, NodeHandle, Rollout


class ForkableWorld(Protocol):
    """A shared world that can be copied and whose copy's changes can be committed back."""

    def clone(self) -> ForkableWorld:
        """A fully independent copy in the same state."""
        ...

    def snapshot(self) -> Any:
        """The full state, JSON-able (digested to show branches start from the same state)."""
        ...

    def merge(self, branch: Any, base: Any) -> int:
        """Apply the changes `branch` made since `base` (a copy taken when the branch was made)
        onto this world, keeping changes made here meanwhile; returns the number of conflicting
        keys (changed both here and in the branch; the branch's value wins)."""
        ...


@dataclass(frozen=True)
class ForkPoint:
    """What a strategy needs to run a child on a copy of the parent's world."""

    world: Any
    """The shared world the child would act on (a `ForkableWorld`)."""
    env_on: Callable[[Any], EnvFactory]
    """Builds the child's environment factory on a given world (the shared one or a copy)."""
    observe: Callable[[], dict[str, Any]]
    """The parent's observable state now (for the rubric writer; no success flags)."""
    tools: str
    """The child's tools, in words (for the rubric writer)."""


@dataclass(frozen=True)
class ChildRequest:
    """One child launch as an environment asked for it."""

    goal: str
    """The child's goal text."""
    make_env: EnvFactory
    """The child's environment on the shared world."""
    budget: int | None = None
    """Requested policy calls (capped by the runtime)."""
    fork: ForkPoint | None = None
    """How to copy the world for this launch; None when the environment cannot."""


class Delegator(Protocol):
    """Turns a launch into one (or several) child runs and reports one result to the parent."""

    async def delegate(self, rollout: Rollout, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        """Run the child and return what the parent sees."""
        ...

    async def finalize(self, rollout: Rollout) -> None:
        """Called once after the root agent ended: finish pending work (scoring, labels)."""
        ...


class PlainDelegator:
    """Runs each child on the shared world: the paper's default launcher."""

    async def delegate(self, rollout: Rollout, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        return await rollout.run_child(parent, request.goal, request.make_env, request.budget)

    async def finalize(self, rollout: Rollout) -> None:
        return None
