"""One TextCraft-Synth agent's environment: CodeAct cells over a shared crafting world.

Every agent runs its cells in its own sandbox session (model-written code never runs in the
host). The tools in the cell call back into this object: `craft`, `get_info`,
`view_inventory`, `finish`, and the async `launch_subagent`, which runs a child agent on the
same (shared) world through the runtime and returns the child's report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sera.agents import codeact
from sera.envs.textcraft.loop_detector import FINISH_MESSAGE, LoopDetector
from sera.envs.textcraft.prompts import goal_text, initial_messages
from sera.envs.textcraft.recipes import RecipeBook
from sera.envs.textcraft.verify import verify_crafted
from sera.envs.textcraft.world import CraftingWorld, is_positive_int
from sera.counters import Counter
from sera.runtime.agent_env import ForcedStep, Outcome, Verdict
from sera.runtime.delegation import EnvFactory, ForkPoint, NodeHandle
from sera.sandbox import SandboxSession
from sera.types import Action, Message, Task


CHILD_TOOLS = "get_info, view_inventory, craft, finish, launch_subagent"
"""A child's tools, in words (shown to rubric writers)."""
PRELUDE = "import asyncio, json, math"
"""Run before an agent's first cell: the modules the prompt's examples use without importing."""


@dataclass(frozen=True)
class CellLimits:
    """Limits on each code cell an agent runs."""

    timeout_s: float = 10.0
    """Compute time of one cell (time awaiting tools, such as child agents, is not counted)."""
    memory_mb: int = 256
    """Memory of the sandbox worker."""
    max_output_chars: int = 10_000
    """Printed output kept per cell; the rest is cut with a marker."""


class TextCraftAgentEnv:
    """The environment of one agent: its targets, the shared world, and its sandbox."""

    def __init__(
        self,
        handle: NodeHandle,
        world: CraftingWorld,
        targets: dict[str, int],
        limits: CellLimits,
        loop_detector: LoopDetector | None = None,
    ) -> None:
        self.handle = handle
        self.world = world
        self.targets = dict(targets)
        self.limits = limits
        self.loop_detector = loop_detector
        self._codes: list[str] = []  # every reply's cell code, '' for a reply without one
        self.start_inventory = world.snapshot()
        self._finish_message: str | None = None
        self._finished = False
        self._session: SandboxSession | None = None

    # -- AgentEnv ------------------------------------------------------------------------------

    def initial_messages(self) -> list[Message]:
        return initial_messages(
            self.handle.node.goal,
            depth=self.handle.depth,
            max_depth=self.handle.max_depth,
            budget=self.handle.node.budget,
        )

    def parse(self, reply: str) -> Action:
        return codeact.parse_reply(reply)

    async def execute(self, action: Action) -> Outcome:
        self._codes.append(action.body if action.kind == "code" else "")
        return await self._run(action)

    async def _run(self, action: Action) -> Outcome:
        if action.kind != "code":
            return Outcome(observation=codeact.invalid_observation(action), error=action.parse_error)
        if self._session is None:
            self._session = SandboxSession(
                self._tools(),
                timeout_s=self.limits.timeout_s,
                memory_mb=self.limits.memory_mb,
                max_output_chars=self.limits.max_output_chars,
            )
            prelude = await self._session.run(PRELUDE)
            if prelude.error:  # a broken sandbox, not a model mistake: fail this agent loudly
                raise RuntimeError(f"sandbox prelude failed: {prelude.error}")
        result = await self._session.run(action.body)
        self.handle.count(Counter.CELLS)
        # Cells are numbered from 0, as in the reference's cell headers.
        cell_number = len(self.handle.node.steps)
        return Outcome(
            observation=codeact.cell_observation(cell_number, result.stdout, result.error),
            error=result.error,
            finished=self._finished,
            finish_message=self._finish_message,
        )

    def forced_step(self) -> ForcedStep | None:
        """The loop detector's finish, as the reference takes it: checked before each policy
        call; when the last cells repeat a short pattern, `finish(FINISH_MESSAGE)` runs as the
        agent's next step instead of a model call (the runtime only asks while a call is left)."""
        if self._finished or self.loop_detector is None or self.loop_detector.period(self._codes) is None:
            return None
        return ForcedStep(reason="loop_detector", reply=f"<python>\nfinish({FINISH_MESSAGE!r})\n</python>")

    def verify(self, finish_message: str | None) -> Verdict:
        return verify_crafted(self.targets, self.start_inventory, self.world.inventory, finish_message)

    def observable_state(self) -> dict[str, Any]:
        """What the agent can see of the world: the shared inventory."""
        return {"inventory": self.world.view_inventory()}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- tools (run on the host, called from the sandboxed cell) -------------------------------

    def _tools(self) -> dict[str, Any]:
        return {
            "craft": self._craft,
            "get_info": self._get_info,
            "view_inventory": self._view_inventory,
            "finish": self._finish,
            "launch_subagent": self._launch_subagent,
        }

    def _craft(self, ingredients: Any, target: Any) -> str:
        self.handle.count(Counter.TOOL_CALLS)
        return self.world.craft(ingredients, target)

    def _get_info(self, items: Any) -> Any:
        self.handle.count(Counter.TOOL_CALLS)
        return self.world.get_info(items)

    def _view_inventory(self) -> dict[str, int]:
        self.handle.count(Counter.TOOL_CALLS)
        return self.world.view_inventory()

    def _finish(self, message: Any = "") -> str:
        self.handle.count(Counter.TOOL_CALLS)
        if not isinstance(message, str):
            return f"Error: finish expects a message string, got {type(message).__name__}"
        self._finished = True
        self._finish_message = message
        return "Finished."

    async def _launch_subagent(self, targets: Any, context: Any = "") -> str:
        self.handle.count(Counter.TOOL_CALLS)
        problem = _check_targets(targets, self.world.recipes)
        if problem is None and not isinstance(context, str):
            problem = f"context must be a string, got {type(context).__name__}"
        if problem:
            return f"Error: launch_subagent: {problem}"
        if not self.handle.can_delegate:
            return (
                f"Error: launch_subagent: you are at delegation depth {self.handle.depth}, the "
                f"maximum ({self.handle.max_depth}); no subagent was launched. Craft the items yourself."
            )
        limits, detector = self.limits, self.loop_detector
        child_targets = dict(targets)

        def env_on(world: CraftingWorld) -> EnvFactory:
            return lambda handle: TextCraftAgentEnv(handle, world, child_targets, limits, detector)

        fork = ForkPoint(world=self.world, env_on=env_on, observe=self.observable_state, tools=CHILD_TOOLS)
        result = await self.handle.launch(goal_text(child_targets, context), env_on(self.world), fork=fork)
        report = result.finish_message or result.error or ""
        return (
            f"{report}\n\nBudget used by subagent: {result.steps_used}/{result.budget} steps. "
            f"Total remaining budget for the current task is {self.handle.remaining_calls} steps.\n"
        )


def _check_targets(targets: Any, recipes: RecipeBook) -> str | None:
    if not isinstance(targets, dict) or not targets:
        return f"targets must be a non-empty dict {{item: count}}, got {targets!r:.120}"
    for item, count in targets.items():
        if not isinstance(item, str) or not is_positive_int(count):
            return f"targets must map item names to positive ints, got {item!r}: {count!r}"
        if not recipes.knows(item):
            return f"unknown item {item!r}"
        if recipes.is_base(item):
            return f"{item!r} is a base material and cannot be crafted"
    return None


def root_env_factory(
    task: Task,
    recipes: RecipeBook,
    limits: CellLimits | None = None,
    *,
    loop_detector: bool | LoopDetector = True,
) -> EnvFactory:
    """The root agent's environment for a TextCraft-Synth task (a fresh world per call).

    `loop_detector`: end any agent of the tree whose last cells repeat a short pattern, as the
    reference does (True: the reference's 4 repeats of a period up to 3; False: never; or a
    `LoopDetector` with other numbers)."""
    targets = dict(task.misc["target_items"])
    inventory = dict(task.misc["initial_inventory"])
    limits = limits or CellLimits()
    detector = LoopDetector() if loop_detector is True else (loop_detector or None)

    def make_root(handle: NodeHandle) -> TextCraftAgentEnv:
        return TextCraftAgentEnv(handle, CraftingWorld(recipes, inventory), targets, limits, detector)

    return make_root


__all__ = ["CellLimits", "LoopDetector", "TextCraftAgentEnv", "root_env_factory", "goal_text"]
