"""A scripted environment and policy for runtime tests: the smallest world that exercises every
path of the recursive runtime (budgets, depth, concurrent children, failures, timeouts).

Replies are commands: `finish M` ends the agent with message M (verified iff M == "ok");
`spawn g1,g2` launches concurrent children with those goals; `crash` raises inside `execute`;
anything else is echoed. `ScriptPolicy` answers from a table keyed by the agent's goal, one
reply per turn (the last one repeats); `slow` sleeps briefly, `raise` fails the call, `hang`
never answers in time. `ScriptEnv(fail_in=...)` makes `verify`, `observable_state` or `close`
raise for the goals named, to test that such failures stay on their node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from sera.runtime.agent_env import Outcome, Verdict
from sera.runtime.delegation import NodeHandle
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Action, Message


class ScriptEnv:
    """One agent of the scripted world; `log` collects echoed commands and closes."""

    def __init__(self, handle: NodeHandle, log: list[str], fail_in: Mapping[str, str] | None = None) -> None:
        self.handle = handle
        self.log = log
        self.fail_in = dict(fail_in or {})
        """goal -> the method that raises for an agent with that goal (`verify`, `observable_state`, `close`)."""

    def _maybe_fail(self, method: str) -> None:
        if self.fail_in.get(self.handle.node.goal) == method:
            raise RuntimeError(f"{method} bug in {self.handle.node.goal}")

    def initial_messages(self) -> list[Message]:
        return [Message(role="system", content="sys"), Message(role="user", content=self.handle.node.goal)]

    def parse(self, reply: str) -> Action:
        return Action(kind="text", body=reply)

    async def execute(self, action: Action) -> Outcome:
        cmd, _, arg = action.body.partition(" ")
        if cmd == "finish":
            return Outcome(observation="done", finished=True, finish_message=arg)
        if cmd == "crash":
            raise RuntimeError("environment bug")
        if cmd == "spawn":
            launches = [
                self.handle.launch(goal, lambda h: ScriptEnv(h, self.log, self.fail_in)) for goal in arg.split(",")
            ]
            results = await asyncio.gather(*launches, return_exceptions=True)
            return Outcome(
                observation=" | ".join(
                    str(r) if isinstance(r, Exception) else str(r.finish_message or r.error) for r in results
                )
            )
        self.log.append(f"{self.handle.node.goal}:{action.body}")
        return Outcome(observation=f"echo {action.body}")

    def forced_step(self) -> None:
        return None

    def verify(self, finish_message: str | None) -> Verdict:
        self._maybe_fail("verify")
        return Verdict(success=finish_message == "ok", info={})

    def observable_state(self) -> dict[str, Any]:
        self._maybe_fail("observable_state")
        return {"goal": self.handle.node.goal}

    async def close(self) -> None:
        self.log.append(f"closed {self.handle.node.goal}")
        self._maybe_fail("close")


class ScriptPolicy:
    """Replies from a table keyed by goal: a list of replies, one per turn (last one repeats)."""

    def __init__(self, script: Mapping[str, list[str]]) -> None:
        self.script = script
        self.active = 0
        """Calls in progress now."""
        self.peak = 0
        """Most calls in progress at once (shows that siblings overlap)."""

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        goal = messages[1].content
        turn = sum(1 for m in messages if m.role == "assistant")
        replies = self.script[goal]
        reply = replies[min(turn, len(replies) - 1)]
        if reply.startswith("slow"):
            self.active += 1
            self.peak = max(self.peak, self.active)
            await asyncio.sleep(0.05)
            self.active -= 1
        if reply == "raise":
            raise ConnectionError("endpoint down")
        if reply == "hang":
            await asyncio.sleep(60)
        return Completion(text=reply)
