"""SERA's execution-stage launcher: a frozen rubric for every child, scored after it returns.

At each delegation the rubric request is built from the `ChildRequest`, i.e. from what the
parent had at the moment of the launch: its goal, the exact messages it was answering, its
delegating reply, its observable state, the child's goal, tools and budget (sera-spec §4.2,
§4.6). Writing starts concurrently with the child's run; nothing the child does can reach the
request. The parsed rubric is an immutable record: it is stored on the child with its hash once
both the child and the writing have ended, and the scorer receives that same record.

The parent gets the child's ordinary result at once; scoring runs in the background and
`finish` waits for it. Nothing about rubrics ever appears in an agent's observations.
"""

from __future__ import annotations

import asyncio

from sera.counters import Counter
from sera.launchers.rubric_calls import RubricScorer, RubricWriter, ScoredChild, WrittenRubric
from sera.rubric import RubricContext
from sera.runtime.delegation import ChildRequest, ChildResult, ChildRunner, NodeHandle, PlainLauncher
from sera.types import AgentNode, ModelCall


def rubric_context(runner: ChildRunner, parent: NodeHandle, request: ChildRequest, **metadata: object) -> RubricContext:
    """The rubric writer's view of one delegation, frozen at the moment of the launch."""
    node = parent.node
    state = request.fork.observe() if request.fork is not None else {}
    tools = request.fork.tools if request.fork is not None else ""
    return RubricContext(
        parent_goal=node.goal,
        parent_messages=request.parent_messages,
        delegating_reply=request.delegating_reply,
        state=state,
        child_goal=request.goal,
        child_tools=tools,
        child_budget=runner.config.child_budget(request.budget),
        metadata={
            "parent_id": node.id,
            "parent_depth": node.depth,
            "child_depth": node.depth + 1,
            "fork_step": len(node.steps),
            **metadata,
        },
    )


def _count(runner: ChildRunner, call: ModelCall | None, valid: bool, calls: Counter, tokens: Counter, invalid: Counter) -> None:
    if call is not None:
        runner.count(calls)
        runner.count(tokens, call.usage.completion_tokens)
    if not valid:
        runner.count(invalid)


def count_rubric(runner: ChildRunner, written: WrittenRubric) -> None:
    """Count a rubric-writing outcome in the rollout's counters."""
    _count(runner, written.call, written.rubric is not None,
           Counter.RUBRIC_CALLS, Counter.RUBRIC_COMPLETION_TOKENS, Counter.RUBRIC_INVALID)


def count_score(runner: ChildRunner, scored: ScoredChild) -> None:
    """Count a scoring outcome in the rollout's counters."""
    _count(runner, scored.call, scored.score is not None,
           Counter.SCORE_CALLS, Counter.SCORE_COMPLETION_TOKENS, Counter.SCORE_INVALID)


class FrozenRubricLauncher:
    """Plain child runs, each with a parent-written frozen rubric and a policy score."""

    def __init__(self, writer: RubricWriter, scorer: RubricScorer) -> None:
        self.writer = writer
        self.scorer = scorer
        self._plain = PlainLauncher()
        self._pending: list[tuple[AgentNode, asyncio.Task[None]]] = []

    def start(self, runner: ChildRunner) -> None:
        if self._pending:
            raise RuntimeError("a FrozenRubricLauncher serves one rollout at a time; its previous one has pending work")

    async def launch(self, runner: ChildRunner, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        context = rubric_context(runner, parent, request)
        writing = asyncio.create_task(self.writer.write(context))
        try:
            result = await self._plain.launch(runner, parent, request)
        except BaseException:
            writing.cancel()
            raise
        child = runner.node(result.node_id)
        self._pending.append((child, asyncio.create_task(self._assess(runner, child, writing))))
        return result

    async def _assess(self, runner: ChildRunner, child: AgentNode, writing: asyncio.Task[WrittenRubric]) -> None:
        written = await writing
        count_rubric(runner, written)
        child.rubric_call = written.call
        if written.rubric is None:
            return
        frozen = written.rubric
        child.rubric, child.rubric_hash = frozen.to_dict(), frozen.hash()
        scored = await self.scorer.score(frozen, child)
        count_score(runner, scored)
        child.score_call = scored.call
        child.rubric_assessment = scored.assessment.model_dump() if scored.assessment else None
        child.rubric_score = scored.score

    async def finish(self, runner: ChildRunner) -> None:
        pending, self._pending = self._pending, []
        outcomes = await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
        for (child, _), outcome in zip(pending, outcomes):
            if isinstance(outcome, BaseException):  # a bug, not model output: keep the reason
                runner.count(Counter.RUBRIC_PIPELINE_ERRORS)
                child.rubric_score = None
                child.skip_reason = f"rubric pipeline failed: {type(outcome).__name__}: {outcome}"
