"""The launch seam: how an environment's launch becomes a child run, and who decides how.

This is the runtime's lower layer; `rollout.py` builds on it and nothing here imports it.

An environment asks its `NodeHandle` to launch a child and describes the launch (goal, budget,
and, when its world can be copied, a `ForkPoint`). The handle adds what the runtime knows of the
parent at that moment (its messages and the reply being executed) and passes the resulting
`ChildRequest` to the rollout's `Launcher`. A launcher sees the rollout only through the narrow
`ChildRunner` port (run a child, look up a node, count, record a fork group, the config):

- `PlainLauncher` (here) runs the child on the shared world (evaluation, RAO, the delegation
  stage);
- the training launchers in `sera.launchers` write a frozen rubric alongside the child (SERA
  execution) or run B counterfactual children on copies of the world (rubric training);
- `sera.launchers.best_of_n` runs N candidates on copies at test time and commits the best.

Environments never know which launcher runs; launchers never know which environment it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sera.counters import Counter
from sera.runtime.agent_env import AgentEnv
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import SamplingParams
from sera.types import AgentNode, ForkGroup, Message

EnvFactory = Callable[["NodeHandle"], AgentEnv]
"""Builds the environment of a new agent from its handle."""


class DelegationError(RuntimeError):
    """A launch the runtime refuses (e.g. beyond the maximum depth)."""


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
    """What a launcher needs to run a child on a copy of the parent's world."""

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
    """One child launch: what the environment asked for and what the parent had at that moment."""

    goal: str
    """The child's goal text."""
    make_env: EnvFactory
    """The child's environment on the shared world."""
    budget: int | None = None
    """Requested policy calls (capped by the runtime)."""
    fork: ForkPoint | None = None
    """How to copy the world for this launch; None when the environment cannot."""
    parent_messages: tuple[Message, ...] = ()
    """The exact conversation the parent was answering when it launched (system prompt first)."""
    delegating_reply: str = ""
    """The parent's reply whose execution launched this child."""


@dataclass(frozen=True)
class ChildResult:
    """What a parent learns when a child it launched has ended."""

    node_id: str
    """The child's node id."""
    finish_message: str | None
    """The child's finish message, if it finished."""
    error: str | None
    """Why the child stopped without finishing, if it did."""
    steps_used: int
    """Policy calls the child made."""
    budget: int
    """The child's budget of policy calls."""
    verified_success: bool | None
    """Programmatic check of the child's goal, when the environment has one."""
    final_observation: str = ""
    """The last observation the child received."""


class AgentRuntime(Protocol):
    """What an agent's handle needs from the rollout running it."""

    config: RuntimeConfig

    def calls_made(self, node_id: str) -> int: ...

    def count(self, name: Counter, n: int = 1) -> None: ...

    async def launch_child(self, parent: NodeHandle, request: ChildRequest) -> ChildResult: ...


class NodeHandle:
    """An agent's link to the runtime: its record, its budget, and how it launches children."""

    def __init__(self, runtime: AgentRuntime, node: AgentNode) -> None:
        self._runtime = runtime
        self.node = node
        self._executing_reply = ""

    @property
    def depth(self) -> int:
        return self.node.depth

    @property
    def can_delegate(self) -> bool:
        """False at the maximum depth."""
        return self.node.depth < self._runtime.config.max_depth

    @property
    def max_depth(self) -> int:
        return self._runtime.config.max_depth

    @property
    def max_child_budget(self) -> int:
        """The most policy calls a child launched from here can get (the runtime's cap)."""
        return self._runtime.config.max_calls_per_agent

    @property
    def remaining_calls(self) -> int:
        """Policy calls this agent has left (the step being executed counts as used)."""
        return self.node.budget - self._runtime.calls_made(self.node.id)

    def count(self, name: Counter, n: int = 1) -> None:
        """Add to one of the rollout's usage counters (`sera.counters.Counter`)."""
        self._runtime.count(name, n)

    def executing(self, reply: str) -> None:
        """Called by the runtime before it executes `reply` (the text a launch then carries)."""
        self._executing_reply = reply

    async def launch(
        self, goal: str, make_env: EnvFactory, budget: int | None = None, *, fork: ForkPoint | None = None
    ) -> ChildResult:
        """Run a child agent on `goal` to completion; concurrent launches run concurrently.

        `budget` (policy calls) is capped at the runtime's `max_calls_per_agent`. `fork` lets a
        training launcher run the child on copies of the world; without it the child always runs
        on the shared world. Which launcher runs is the rollout's business.
        """
        request = ChildRequest(
            goal=goal,
            make_env=make_env,
            budget=budget,
            fork=fork,
            parent_messages=tuple(self.node.messages),
            delegating_reply=self._executing_reply,
        )
        return await self._runtime.launch_child(self, request)


class ChildRunner(Protocol):
    """The rollout as a launcher sees it: the narrow port launchers are written against."""

    config: RuntimeConfig
    """Budgets and sampling of the rollout."""

    async def run_child(
        self,
        parent: NodeHandle,
        goal: str,
        make_env: EnvFactory,
        budget: int | None = None,
        *,
        branch: tuple[str, int] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChildResult:
        """Create a child node of `parent` and run it to completion; `branch` = (fork group id,
        branch index) marks a counterfactual branch; `sampling` (default: the parent's) is how the
        child and everything it launches sample."""
        ...

    def node(self, node_id: str) -> AgentNode:
        """A node of the tree being built."""
        ...

    def count(self, name: Counter, n: int = 1) -> None:
        """Add to one of the rollout's usage counters."""
        ...

    def add_fork_group(self, group: ForkGroup) -> ForkGroup:
        """Record a fork group on the tree; its `id` is assigned here (unique in the tree)."""
        ...


class Launcher(Protocol):
    """Turns a launch into one (or several) child runs and reports one result to the parent.

    One instance serves one root rollout at a time: `start` is called before the root agent
    runs, `finish` once after it ended (to finish pending work such as scoring and labels).
    """

    def start(self, runner: ChildRunner) -> None:
        """Reset per-rollout state; refuse a second concurrent rollout."""
        ...

    async def launch(self, runner: ChildRunner, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        """Run the child and return what the parent sees."""
        ...

    async def finish(self, runner: ChildRunner) -> None:
        """Finish pending work of the rollout (rubric scores, labels)."""
        ...


class PlainLauncher:
    """Runs each child on the shared world: the paper's default launcher."""

    def start(self, runner: ChildRunner) -> None:
        return None

    async def launch(self, runner: ChildRunner, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        return await runner.run_child(parent, request.goal, request.make_env, request.budget)

    async def finish(self, runner: ChildRunner) -> None:
        return None
