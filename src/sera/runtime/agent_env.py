"""What the runtime needs from an environment, per agent node.

An `AgentEnv` is one agent's view of a world: it writes the agent's first messages, parses
the model's replies into actions, executes them (possibly launching children through the
`NodeHandle` it was given) and verifies the agent's goal at the end. The runtime knows
nothing about crafting or cooking; environments know nothing about trees or training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sera.types import Action, Message


@dataclass(frozen=True)
class Outcome:
    """The result of executing one action."""

    observation: str
    """Text shown to the agent next (becomes the next user message)."""
    error: str | None = None
    """Error raised by the action, if any (also visible in `observation`)."""
    finished: bool = False
    """True when the agent ended its episode (e.g. called `finish`)."""
    finish_message: str | None = None
    """The message the agent finished with."""


@dataclass(frozen=True)
class ForcedStep:
    """A step the environment takes in the agent's name instead of its next policy call."""

    reason: str
    """Why (e.g. `loop_detector`); recorded as `Step.forced`."""
    reply: str
    """The reply executed as if the agent had written it (e.g. a `finish(...)` cell)."""


@dataclass(frozen=True)
class Verdict:
    """A programmatic check of an agent's goal."""

    success: bool | None
    """True/False when the environment can verify the goal; None when it cannot."""
    info: dict
    """What the check looked at (start/end state, missing items)."""


class AgentEnv(Protocol):
    """One agent's interface to the world."""

    def initial_messages(self) -> list[Message]:
        """System prompt and first user message of this agent."""
        ...

    def parse(self, reply: str) -> Action:
        """Parse a model reply; malformed replies become `Action(kind="invalid")`."""
        ...

    async def execute(self, action: Action) -> Outcome:
        """Run one action. Must not raise for bad model input: report it in the outcome."""
        ...

    def verify(self, finish_message: str | None) -> Verdict:
        """Check this agent's goal after its episode."""
        ...

    def forced_step(self) -> ForcedStep | None:
        """Asked before each policy call: a step to take instead of calling the policy (the
        TextCraft loop detector's finish), or None. A forced step uses one call of the budget,
        makes no model call and is never trained."""
        ...

    def observable_state(self) -> dict[str, Any]:
        """What this agent can observe of the world now (JSON-able, no success flags): recorded
        as `AgentNode.final_state` and shown to rubric writers, scorers and judges."""
        ...

    async def close(self) -> None:
        """Release resources (sandbox workers, ...)."""
        ...
