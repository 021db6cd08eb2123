"""SERA's execution-stage launcher: a frozen rubric for every child, scored after it returns.

At each delegation the parent's rubric request is built *before* the child starts, from what
the parent had at that moment: its goal, the exact messages it was answering, its delegating
reply, its observable state, the child's goal, tools and budget (sera-spec §4.2, §4.6). Writing
starts concurrently with the child's run; nothing the child does can reach the request. The
parsed rubric is frozen (an immutable record) and stored on the child with its hash; the scorer
receives that record, and the hash is checked again after scoring.

The parent gets the child's ordinary result at once; scoring runs in the background and
`finalize` waits for it. Nothing about rubrics ever appears in an agent's observations.
"""

from __future__ import annotations

import asyncio

from sera.rubric import RubricContext
from sera.runtime.delegation import ChildRequest, PlainDelegator
from sera.runtime.rollout import ChildResult, NodeHandle, Rollout
from sera.train.rubric_calls import RubricScorer, RubricWriter, ScoredChild, WrittenRubric
from sera.types import AgentNode, ModelCall


def rubric_context(
    rollout: Rollout, parent: NodeHandle, request: ChildRequest, **metadata: object
) -> RubricContext:
    """The rubric writer's view of one delegation, frozen at the moment of the launch."""
    node = parent.node
    state = request.fork.observe() if request.fork is not None else {}
    tools = request.fork.tools if request.fork is not None else ""
    return RubricContext(
        parent_goal=node.goal,
        parent_messages=tuple(node.messages),
        delegating_reply=parent.pending_reply,
        state=state,
        child_goal=request.goal,
        child_tools=tools,
        child_budget=rollout.config.child_budget(request.budget),
        metadata={
            "parent_id": node.id,
            "parent_depth": node.depth,
            "child_depth": node.depth + 1,
            "fork_step": len(node.steps),
            **metadata,
        },
    )


def _count(rollout: Rollout, role: str, call: ModelCall | None, valid: bool) -> None:
    if call is not None:
        rollout.count(f"{role}_calls")
        rollout.count(f"{role}_completion_tokens", call.usage.completion_tokens)
    if not valid:
        rollout.count(f"{role}_invalid")


def count_rubric(rollout: Rollout, written: WrittenRubric) -> None:
    """Count a rubric-writing outcome in the rollout's counters."""
    _count(rollout, "rubric", written.call, written.rubric is not None)


def count_score(rollout: Rollout, scored: ScoredChild) -> None:
    """Count a scoring outcome in the rollout's counters."""
    _count(rollout, "score", scored.call, scored.score is not None)


class RubricDelegator:
    """Plain child runs, each with a parent-written frozen rubric and a policy score."""

    def __init__(self, writer: RubricWriter, scorer: RubricScorer) -> None:
        self.writer = writer
        self.scorer = scorer
        self._plain = PlainDelegator()
        self._pending: list[tuple[AgentNode, asyncio.Task[None]]] = []

    async def delegate(self, rollout: Rollout, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        context = rubric_context(rollout, parent, request)
        writing = asyncio.create_task(self.writer.write(context))
        try:
            result = await self._plain.delegate(rollout, parent, request)
        except BaseException:
            writing.cancel()
            raise
        child = rollout.node(result.node_id)
        self._pending.append((child, asyncio.create_task(self._assess(rollout, child, writing))))
        return result

    async def _assess(self, rollout: Rollout, child: AgentNode, writing: asyncio.Task[WrittenRubric]) -> None:
        written = await writing
        count_rubric(rollout, written)
        child.rubric_call = written.call
        if written.rubric is None:
            return
        frozen = written.rubric
        child.rubric, child.rubric_hash = frozen.to_dict(), frozen.hash()
        scored = await self.scorer.score(frozen, child)
        count_score(rollout, scored)
        child.score_call = scored.call
        child.rubric_assessment = scored.assessment.model_dump() if scored.assessment else None
        child.rubric_score = scored.score

    async def finalize(self, rollout: Rollout) -> None:
        pending, self._pending = self._pending, []
        outcomes = await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
        for (child, _), outcome in zip(pending, outcomes):
            if isinstance(outcome, BaseException):  # a bug, not model output: keep the reason
                rollout.count("rubric_pipeline_errors")
                child.rubric_score = None
                child.skip_reason = f"rubric pipeline failed: {type(outcome).__name__}: {outcome}"
