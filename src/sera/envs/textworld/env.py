"""One TextWorld-Sync agent's environment: the text protocol over the shared kitchen.

All agents of a tree act on one `SyncWorld`; each agent is registered in it under its node id,
with its own location (a child starts where its parent stands, or where the root stands: the
rules profile's `child_start`). A parent sees each child's goal check or the world's success
flag (`child_report`). `<action>` goes to the world
under the world's lock, `<delegate>` launches children through the runtime (children of one
block run concurrently), `<finish>` ends the agent. When the world is over (all dishes eaten,
a dish ruined, or the shared budget spent) every agent stops at its next step.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sera.agents import text_protocol
from sera.envs.textworld.prompts import initial_messages, status_lines, turn_footer
from sera.envs.textworld.rules import ChildReport, ChildStart, RulesName, RulesProfile, rules_profile
from sera.envs.textworld.scorer import score
from sera.envs.textworld.spec import SyncTaskSpec
from sera.envs.textworld.subtask import check_subtask
from sera.envs.textworld.world import SyncWorld
from sera.counters import Counter
from sera.runtime.agent_env import Outcome, Verdict
from sera.runtime.delegation import ChildResult, EnvFactory, ForkPoint, NodeHandle
from sera.types import Action, Message, Task

CHILD_TOOLS = "TextWorld environment actions, inventory lookup, finish, and delegate"
"""A child's tools, in words (shown to rubric writers)."""
CHILD_OBSERVATION_CHARS = 1200
"""How much of a child's last observation its parent sees."""


class TextWorldAgentEnv:
    """The environment of one agent: its goal, the shared world, and its place in it."""

    def __init__(
        self,
        handle: NodeHandle,
        world: SyncWorld,
        location: str | None = None,
        *,
        profile: RulesProfile | None = None,
        root_id: str | None = None,
    ) -> None:
        self.handle = handle
        self.world = world
        self.agent_id = handle.node.id
        self.profile = profile or rules_profile(world.spec.rules)
        """The rules profile, with this tree's child report and start options."""
        self.root_id = root_id or self.agent_id
        """The root agent of the tree (where `child_start="root"` children start)."""
        world.add_agent(self.agent_id, location)
        self._last_observation = ""

    @property
    def spec(self) -> SyncTaskSpec:
        return self.world.spec

    # -- AgentEnv ------------------------------------------------------------------------------

    def initial_messages(self) -> list[Message]:
        self._last_observation = self.world.observe(self.agent_id)
        return initial_messages(
            self.handle.node.goal,
            self._last_observation,
            agent_id=self.agent_id,
            depth=self.handle.depth,
            max_depth=self.handle.max_depth,
            budget=self.handle.node.budget,
            child_budget=self.handle.max_child_budget,
            rules=self.profile.name,
        )

    def parse(self, reply: str) -> Action:
        return text_protocol.parse_reply(reply)

    async def execute(self, action: Action) -> Outcome:
        step_number = len(self.handle.node.steps) + 1
        if self.world.done:
            return self._world_over(step_number)
        if action.kind != "text":
            body = (
                f"Error: could not read your reply: {action.parse_error}.\n{text_protocol.FORMAT_HINT}\n"
                "Nothing was done.\n\n" + await self.world.aobserve(self.agent_id)
            )
            return Outcome(observation=self._turn(step_number, body), error=action.parse_error)
        if action.tag == "finish":
            return Outcome(
                observation=f"[Step {step_number}] Finished.",
                finished=True,
                finish_message=action.body,
            )
        if action.tag == "delegate":
            return await self._delegate(step_number, action)
        result = await self.world.astep(self.agent_id, action.body)
        self.handle.count(Counter.WORLD_ACTIONS)
        text = result.observation if result.error is None else f"Error: {result.error}\n\n{result.observation}"
        self._last_observation = result.observation
        if result.done:
            return self._world_over(step_number, text, error=result.error)
        return Outcome(observation=self._turn(step_number, text), error=result.error)

    def verify(self, finish_message: str | None) -> Verdict:
        if self.handle.depth == 0:
            report = score(self.world)
            info = {"kind": "root", "score": report.model_dump(mode="json"), "rules": self._rules_record()}
            return Verdict(success=report.success, info=info)
        check = check_subtask(self.handle.node.goal, self.spec, self.world)
        info = {"kind": "subtask", "covered": check.covered, "targets": check.targets, "detail": check.detail}
        return Verdict(success=check.success if check.covered else None, info=info)

    async def close(self) -> None:
        return None

    def forced_step(self) -> None:
        return None  # TextWorld agents have no loop detector (neither has the reference's)

    def observable_state(self) -> dict[str, Any]:
        """What this agent can see: where it is, its last observation, and the rules it plays
        under (no success flags)."""
        return {
            "agent_id": self.agent_id,
            "location": self.world.location(self.agent_id),
            "observation": self._last_observation,
            "rules": self._rules_record(),
        }

    def _rules_record(self) -> dict[str, str]:
        """The rules profile and child options, as recorded in every node's `final_state`."""
        p = self.profile
        return {"profile": p.name, "child_report": p.child_report, "child_start": p.child_start}

    # -- delegation ----------------------------------------------------------------------------

    async def _delegate(self, step_number: int, action: Action) -> Outcome:
        goals = text_protocol.parse_delegations(action.body)
        if not self.handle.can_delegate:
            problem = (
                f"you are at delegation depth {self.handle.depth}, the maximum ({self.handle.max_depth}); "
                "no subagent was launched. Do the work yourself."
            )
            body = f"Error: {problem}\n\n" + await self.world.aobserve(self.agent_id)
            return Outcome(observation=self._turn(step_number, body), error=problem)
        start = self.root_id if self.profile.child_start == "root" else self.agent_id
        here = self.world.location(start)

        def env_on(world: SyncWorld) -> EnvFactory:
            return lambda handle: TextWorldAgentEnv(handle, world, here, profile=self.profile, root_id=self.root_id)

        fork = ForkPoint(world=self.world, env_on=env_on, observe=self.observable_state, tools=CHILD_TOOLS)
        results = await asyncio.gather(
            *(
                self.handle.launch(
                    g.goal,
                    env_on(self.world),
                    budget=g.max_steps,  # the runtime's one rule caps it (`RuntimeConfig.child_budget`)
                    fork=fork,
                )
                for g in goals
            )
        )
        lines = ["[SubAgent Results]"]
        for i, (goal, result) in enumerate(zip(goals, results), 1):
            lines.append(self._child_report(i, result))
            if goal.max_steps is not None and goal.max_steps > result.budget:
                lines.append(f"  note: {goal.max_steps} steps were requested; a subagent has at most {result.budget}")
        current = await self.world.aobserve(self.agent_id)
        self._last_observation = current
        text = "\n".join(lines) + "\n\n[Current Environment Observation]\n" + current
        if self.world.done:
            return self._world_over(step_number, text)
        return Outcome(observation=self._turn(step_number, text))

    def _child_report(self, index: int, result: ChildResult) -> str:
        if self.profile.child_report == "world_success":  # the authors' `environment_success`
            check = f"world success={str(self.world.success).lower()}"
        else:
            check = f"goal check={'unknown' if result.verified_success is None else str(result.verified_success).lower()}"
        last = result.final_observation
        text = result.finish_message if result.finish_message is not None else f"(no finish) {result.error or ''}"
        return (
            f"- SubAgent {index} ({result.node_id}): finished={result.finish_message is not None}, "
            f"{check}, steps used {result.steps_used}/{result.budget}\n"
            f"  budget: the subagent used {result.steps_used} of its {result.budget} steps; you have "
            f"{self.handle.remaining_calls} steps left for your task\n"
            f"  result: {text.strip()}\n"
            f"  final observation: {last[:CHILD_OBSERVATION_CHARS].strip()}"
        )

    # -- observations --------------------------------------------------------------------------

    def _turn(self, step_number: int, body: str) -> str:
        footer = turn_footer(step_number, self.handle.node.budget, self.handle.can_delegate, self._status())
        return f"[Step {step_number} Observation]\n{body}\n\n{footer}"

    def _status(self) -> str:
        world, dishes = self.world, [d.dish_id for d in self.world.spec.dishes]
        return status_lines(
            eaten=sum(world.is_eaten(d) for d in dishes), dishes=len(dishes), success=world.success,
            failure=world.failure, done=world.done,
        )

    def _world_over(self, step_number: int, body: str = "", error: str | None = None) -> Outcome:
        if self.world.success:
            status = "The world is done: every dish was prepared and eaten. Task success."
        elif self.world.failure:
            status = f"The world is done: task failure ({self.world.failure})."
        else:
            status = "The world is done: the shared budget of actions is spent."
        text = "\n\n".join(part for part in (f"[Step {step_number} Observation]\n{body}".strip(), status, self._status()))
        return Outcome(observation=text, error=error, finished=True, finish_message=None)


def root_env_factory(
    task: Task,
    *,
    rules: RulesName | None = None,
    child_report: ChildReport | None = None,
    child_start: ChildStart | None = None,
) -> EnvFactory:
    """The root agent's environment for a TextWorld-Sync task (a fresh world per rollout).

    `rules` overrides the task's rules profile (`spec.rules`: `sync` for our splits, `reference`
    for the authors' V9 files); `child_report` (`goal_check` / `world_success`) and
    `child_start` (`parent` / `root`) override the profile's defaults. None keeps the task's.
    """
    spec = SyncTaskSpec.from_task(task)
    if rules is not None and rules != spec.rules:
        rules_profile(rules)  # a clear error for an unknown name
        spec = spec.model_copy(update={"rules": rules})
    profile = rules_profile(spec.rules).with_options(child_report, child_start)

    def make_root(handle: NodeHandle) -> TextWorldAgentEnv:
        return TextWorldAgentEnv(handle, SyncWorld(spec), profile=profile)

    return make_root


__all__ = ["TextWorldAgentEnv", "root_env_factory"]
