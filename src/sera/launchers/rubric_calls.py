"""Who writes a rubric and who scores a child with it: the policy, an external model, or nobody
(the fixed global rubric of the ablation).

Every writer returns a `WrittenRubric` and every scorer a `ScoredChild`; neither raises for bad
model output or a failed call: the failure is recorded in the `ModelCall` and in `error`, and
the credit rules decide what an invalid rubric or score means (sera-spec §4.3, §4.6).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Literal, Protocol

from sera.rubric import (
    STRICT,
    Assessment,
    Rubric,
    RubricContext,
    RubricError,
    RubricLimits,
    ScoreError,
    ScoreMode,
    build_rubric_messages,
    build_scoring_messages,
    final_score,
    parse_assessment,
    parse_rubric,
    render_child_trajectory,
    rubric_from_dict,
)
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.types import AgentNode, Message, ModelCall

WRITE_SAMPLING = SamplingParams(temperature=1.0, max_tokens=1024, logprobs=True)
"""Rubric writing in training (§4.2): temperature 1, 1,024 tokens, logprobs (the RT stage trains it)."""
SCORE_SAMPLING = SamplingParams(temperature=0.0, max_tokens=1024, logprobs=False)
"""Rubric scoring (§4.4): greedy, 1,024 tokens (512 in TextWorld rubric training)."""


@dataclass(frozen=True)
class WrittenRubric:
    """The outcome of one rubric-writing request."""

    rubric: Rubric | None
    """The parsed, frozen rubric; None when the call failed or the reply was invalid."""
    call: ModelCall | None
    """The call that wrote it (None for the fixed global rubric: no call is made)."""
    error: str | None = None
    """Why there is no rubric."""


@dataclass(frozen=True)
class ScoredChild:
    """The outcome of scoring one child trajectory with a frozen rubric."""

    score: float | None
    """The child's rubric score; None when the score is invalid."""
    assessment: Assessment | None
    """The parsed assessment."""
    call: ModelCall | None
    """The scoring call."""
    error: str | None = None
    """Why there is no score."""


class RubricWriter(Protocol):
    async def write(self, context: RubricContext) -> WrittenRubric: ...


class RubricScorer(Protocol):
    async def score(self, rubric: Rubric, child: AgentNode) -> ScoredChild: ...


CallRole = Literal["rubric", "score"]
"""The two rubric-call roles of a `ModelCall`."""


def _call_record(role: CallRole, messages: list[Message], sampling: SamplingParams, completion: Completion) -> ModelCall:
    return ModelCall(
        role=role,
        prompt_messages=completion.prompt_messages or messages,
        prompt_token_ids=completion.prompt_token_ids,
        completion_text=completion.text,
        completion_token_ids=completion.token_ids,
        completion_logprobs=completion.logprobs,
        finish_reason=completion.finish_reason,
        temperature=sampling.temperature,
        usage=completion.usage,
        policy_version=completion.policy_version,
    )


async def _ask_policy(policy: Policy, role: CallRole, messages: list[Message], sampling: SamplingParams) -> ModelCall:
    start = time.perf_counter()
    try:
        completion = await policy(messages, sampling)
    except Exception as exc:  # a failed call is data (counted, the child dropped), not a crash
        return ModelCall(
            role=role,
            prompt_messages=messages,
            temperature=sampling.temperature,
            error=f"policy call failed: {type(exc).__name__}: {exc}",
            seconds=time.perf_counter() - start,
        )
    return _call_record(role, messages, sampling, completion).model_copy(update={"seconds": time.perf_counter() - start})


def _parsed(call: ModelCall, parse: Callable[[], Rubric]) -> WrittenRubric:
    """The rubric `parse` reads from `call`'s reply, or the call marked invalid with the reason."""
    try:
        return WrittenRubric(parse(), call)
    except RubricError as exc:
        error = f"invalid rubric: {exc}"
        return WrittenRubric(None, call.model_copy(update={"error": error}), error)


def _scoring_messages(rubric: Rubric, child: AgentNode) -> list[Message]:
    return build_scoring_messages(rubric, child.goal, render_child_trajectory(child), child.final_state)


@dataclass(frozen=True)
class PolicyRubricWriter:
    """The policy writes the rubric (SERA)."""

    policy: Policy
    sampling: SamplingParams = WRITE_SAMPLING
    limits: RubricLimits = STRICT

    async def write(self, context: RubricContext) -> WrittenRubric:
        messages = build_rubric_messages(context, self.limits)
        call = await _ask_policy(self.policy, "rubric", messages, self.sampling)
        if call.error is not None:
            return WrittenRubric(None, call, call.error)
        return _parsed(call, lambda: parse_rubric(call.completion_text, self.limits))


@dataclass(frozen=True)
class PolicyRubricScorer:
    """The policy scores the child with the frozen rubric (SERA; greedy)."""

    policy: Policy
    sampling: SamplingParams = SCORE_SAMPLING
    mode: ScoreMode = "gated"

    async def score(self, rubric: Rubric, child: AgentNode) -> ScoredChild:
        call = await _ask_policy(self.policy, "score", _scoring_messages(rubric, child), self.sampling)
        if call.error is not None:
            return ScoredChild(None, None, call, call.error)
        return _read_score(rubric, call, call.completion_text, self.mode)


def _read_score(rubric: Rubric, call: ModelCall, text: str, mode: ScoreMode) -> ScoredChild:
    try:
        assessment = parse_assessment(text, rubric, mode)
        return ScoredChild(final_score(rubric, assessment, mode), assessment, call)
    except (ScoreError, RubricError) as exc:
        error = f"invalid score: {exc}"
        return ScoredChild(None, None, call.model_copy(update={"error": error}), error)


@dataclass(frozen=True)
class GlobalRubricWriter:
    """One fixed, task-independent rubric for every delegation (ablation, §4.5): no call."""

    rubric: Rubric

    async def write(self, context: RubricContext) -> WrittenRubric:
        return WrittenRubric(self.rubric, None)


@dataclass
class ExternalRubricWriter:
    """An external model writes the rubric (ablation: "Kimi" rubrics); never trained."""

    client: Any
    """A `sera.judge.JudgeClient` (anything with `complete_json(messages, role=...)`)."""
    limits: RubricLimits = field(default_factory=lambda: STRICT)

    async def write(self, context: RubricContext) -> WrittenRubric:
        messages = build_rubric_messages(context, self.limits)
        start = time.perf_counter()
        reply = await self.client.complete_json(messages, role="rubric", operation="write_rubric")
        call = ModelCall(
            role="rubric", prompt_messages=messages, completion_text=reply.raw_text or "",
            usage=reply.usage, external=True, error=reply.error, seconds=time.perf_counter() - start,
        )
        if not reply.valid:
            return WrittenRubric(None, call, reply.error)
        return _parsed(call, lambda: rubric_from_dict(reply.data, self.limits))


@dataclass
class ExternalRubricScorer:
    """An external model scores the child (ablation: Kimi writes and Kimi scores)."""

    client: Any
    mode: ScoreMode = "gated"

    async def score(self, rubric: Rubric, child: AgentNode) -> ScoredChild:
        messages = _scoring_messages(rubric, child)
        start = time.perf_counter()
        reply = await self.client.complete_json(messages, role="score", operation="score_child", temperature=0.0)
        call = ModelCall(
            role="score", prompt_messages=messages, completion_text=reply.raw_text or "",
            usage=reply.usage, temperature=0.0, external=True, error=reply.error,
            seconds=time.perf_counter() - start,
        )
        if not reply.valid:
            return ScoredChild(None, None, call, reply.error)
        return _read_score(rubric, call, reply.raw_text or json.dumps(reply.data), self.mode)
