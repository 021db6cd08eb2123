"""Training datums: an agent's token stream with a trainable mask and one scalar advantage.

An agent's steps are merged into as few sequences as possible (sera-spec §7.1, as tinker-cookbook
does): when a step's prompt tokens start with everything accumulated so far (the previous prompts
and completions), only the new part of the prompt (the observation, the next turn header) is
appended, untrained, followed by the step's completion. A prompt that does not extend the
sequence (the context policy dropped old turns, or a re-tokenisation changed a boundary) closes
the sequence and starts a new one with the full prompt.

Each stage decides which completion tokens are trained: execution trains every action token;
delegation only the launch span of one step, with the sequence cut right after its last trained
token (§6.2 item 6); the rubric stage trains a rubric-writing call's completion.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sera.agents.launch_spans import Span
from sera.train.spans import Decode, token_mask_for_spans
from sera.types import AgentNode, ModelCall, Step

Trainable = Callable[[Step], list[bool] | bool]
"""Which completion tokens of a step are trained: all (True), none (False), or per token."""


class MissingTokensError(ValueError):
    """A step or model call has no prompt or completion token ids, so it cannot be trained."""


@dataclass(frozen=True)
class Datum:
    """One training sequence with its mask and scalar advantage."""

    tokens: tuple[int, ...]
    """Token ids of the sequence: prompts and completions, in order."""
    mask: tuple[bool, ...]
    """Aligned with `tokens`: True where the token is trained (a completion token the stage chose)."""
    sampler_logprobs: tuple[float, ...]
    """Aligned with `tokens`: the sampler's log-probability of each completion token; `nan` for
    prompt tokens and where the sampler reported none."""
    advantage: float
    """The scalar advantage given to every trained token (before the depth weight)."""
    depth: int
    """Depth of the agent the tokens belong to (0 for the root)."""
    trajectory_id: str
    """Unique per agent per tree, e.g. f"{tree_key}/{node_id}"; depth weights count these."""
    node_id: str
    """The agent node the tokens come from."""
    stage: str
    """The training stage that built the datum (`execution`, `delegation`, `rubric_generation`)."""
    steps: tuple[int, ...]
    """Indices of the agent steps merged into the datum; empty for a model call (rubric)."""
    weight: float = 1.0
    """Depth weight (set after all datums of a step exist): the learner is to train with
    `advantage × weight`; the losses in `sera.train.losses` take that product per token."""
    policy_version: int | None = None
    """The policy version that sampled the datum's completions (the oldest, should its steps
    differ); None where the record has none. With `steps.max_offpolicy_versions` it may be
    behind the version the datum trains."""

    def __post_init__(self) -> None:
        if not len(self.tokens) == len(self.mask) == len(self.sampler_logprobs):
            raise ValueError(
                f"datum of {self.trajectory_id!r}: tokens ({len(self.tokens)}), mask ({len(self.mask)}) and "
                f"sampler_logprobs ({len(self.sampler_logprobs)}) must have the same length"
            )
        for name in ("advantage", "weight"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"datum of {self.trajectory_id!r}: {name} must be finite, got {getattr(self, name)}")

    @property
    def n_trainable(self) -> int:
        """Number of trained tokens."""
        return sum(self.mask)

    def with_advantage(self, advantage: float) -> Datum:
        """A copy with another advantage."""
        return dataclasses.replace(self, advantage=advantage)

    def with_weight(self, weight: float) -> Datum:
        """A copy with another depth weight."""
        return dataclasses.replace(self, weight=weight)


@dataclass(frozen=True)
class TokenSequence:
    """A merged token stream of one agent, before an advantage is attached."""

    tokens: tuple[int, ...]
    """Token ids."""
    mask: tuple[bool, ...]
    """True where the token is trained."""
    sampler_logprobs: tuple[float, ...]
    """Sampler log-probabilities of completion tokens; `nan` elsewhere."""
    steps: tuple[int, ...]
    """Indices of the agent steps merged into the sequence, in order."""
    step_starts: tuple[int, ...]
    """Aligned with `steps`: the position in `tokens` where each step's contribution begins (its
    new prompt tokens, then its completion)."""

    @property
    def n_trainable(self) -> int:
        """Number of trained tokens."""
        return sum(self.mask)


# -- merging ---------------------------------------------------------------------------------


def merge_steps(node: AgentNode, trainable: Trainable) -> list[TokenSequence]:
    """The node's steps as prefix-merged token sequences; `trainable(step)` masks completions.

    Raises MissingTokensError for a step without token ids and ValueError for a per-token mask
    or logprob list whose length differs from the step's completion.
    """
    return _merge_steps(node.id, node.steps, trainable)


def _merge_steps(node_id: str, steps: Sequence[Step], trainable: Trainable) -> list[TokenSequence]:
    done: list[TokenSequence] = []
    tokens: list[int] = []
    mask: list[bool] = []
    logprobs: list[float] = []
    merged: list[int] = []
    starts: list[int] = []

    def close() -> None:
        if merged:
            done.append(TokenSequence(tuple(tokens), tuple(mask), tuple(logprobs), tuple(merged), tuple(starts)))
        for buffer in (tokens, mask, logprobs, merged, starts):
            buffer.clear()

    for step in steps:
        if step.forced is not None:  # taken by the environment, not sampled: nothing to train
            continue
        owner = f"node {node_id!r} step {step.index}"
        prompt, completion = _require_tokens(owner, step.prompt_token_ids, step.completion_token_ids)
        completion_mask = _completion_mask(owner, trainable(step), len(completion))
        completion_logprobs = _logprobs(owner, step.completion_logprobs, len(completion))
        if not merged or len(prompt) < len(tokens) or prompt[: len(tokens)] != tokens:
            close()
        new_prompt = prompt[len(tokens):]
        merged.append(step.index)
        starts.append(len(tokens))
        tokens.extend(new_prompt)
        mask.extend([False] * len(new_prompt))
        logprobs.extend([math.nan] * len(new_prompt))
        tokens.extend(completion)
        mask.extend(completion_mask)
        logprobs.extend(completion_logprobs)
    close()
    return done


def _step_tokens(node_id: str, step: Step) -> tuple[list[int], list[int]]:
    return _require_tokens(f"node {node_id!r} step {step.index}", step.prompt_token_ids, step.completion_token_ids)


def _require_tokens(
    owner: str, prompt: list[int] | None, completion: list[int] | None
) -> tuple[list[int], list[int]]:
    """Prompt and completion ids, or MissingTokensError naming `owner` and what is missing."""
    if prompt is None or completion is None:
        named = (("prompt_token_ids", prompt), ("completion_token_ids", completion))
        missing = [name for name, ids in named if ids is None]
        raise MissingTokensError(
            f"{owner} has no {' or '.join(missing)}; the sampler must report token ids for its calls to be trained"
        )
    return list(prompt), list(completion)


def _completion_mask(owner: str, chosen: list[bool] | bool, n: int) -> list[bool]:
    if isinstance(chosen, bool):
        return [chosen] * n
    if len(chosen) != n:
        raise ValueError(f"{owner}: trainable mask has {len(chosen)} entries for {n} completion tokens")
    return [bool(x) for x in chosen]


def _logprobs(owner: str, logprobs: list[float] | None, n: int) -> list[float]:
    """Completion logprobs, `nan` for each token when the sampler reported none."""
    if logprobs is None:
        return [math.nan] * n
    if len(logprobs) != n:
        raise ValueError(f"{owner}: {len(logprobs)} completion_logprobs for {n} completion tokens")
    return [float(x) for x in logprobs]


def truncate_after_last_trainable(seq: TokenSequence) -> TokenSequence | None:
    """The sequence cut right after its last trained token (§6.2 item 6: the reward sits on the
    last token and flows back only through trained ones); None if no token is trained. Steps
    whose contribution starts after the cut are dropped from `steps`."""
    last = max((i for i, trained in enumerate(seq.mask) if trained), default=None)
    if last is None:
        return None
    cut = last + 1
    kept = [(step, start) for step, start in zip(seq.steps, seq.step_starts) if start < cut]
    return TokenSequence(
        tokens=seq.tokens[:cut],
        mask=seq.mask[:cut],
        sampler_logprobs=seq.sampler_logprobs[:cut],
        steps=tuple(step for step, _ in kept),
        step_starts=tuple(start for _, start in kept),
    )


# -- stage builders ----------------------------------------------------------------------------


def execution_datums(
    node: AgentNode,
    advantage: float,
    *,
    trajectory_id: str,
    stage: str = "execution",
    drop_error_steps: bool = False,
) -> list[Datum]:
    """Datums training every completion token of the node's steps.

    With `drop_error_steps`, the completion of a step whose `error` is set is untrained but kept
    as context for later steps. Each sequence is cut after its last trained token (tokens after it
    carry no gradient); a sequence with no trained token at all (only error steps) yields nothing.
    A node without steps yields []. A node marked `skip_gradient` is an error: callers filter it.
    """
    _check_trainable_node(node)
    sequences = merge_steps(node, lambda step: not (drop_error_steps and step.error is not None))
    return [_datum(seq, node, advantage, trajectory_id, stage) for seq in _truncated(sequences)]


def delegation_datums(
    node: AgentNode,
    step_index: int,
    advantage: float,
    *,
    trajectory_id: str,
    decode: Decode,
    launch_spans: Callable[[str], list[Span]],
    stage: str = "delegation",
) -> list[Datum]:
    """The datum training the launch span of one step (§6.2 items 5-6).

    The launch spans of the step's completion (`launch_spans`: the reply protocol's, CodeAct
    launch statements or `<delegate>` blocks) are mapped to completion tokens; the datum is the merged prefix sequence of the node's steps up
    to that step, cut right after its last trained token. Returns [] when the completion has no
    launch span or no token lines up with one (the caller counts such events as skipped).
    """
    _check_trainable_node(node)
    if not 0 <= step_index < len(node.steps):
        raise IndexError(f"node {node.id!r} has {len(node.steps)} steps; no step {step_index}")
    step = node.steps[step_index]
    _, completion = _step_tokens(node.id, step)
    spans = launch_spans(step.completion_text)
    if not spans:
        return []
    launch_mask = token_mask_for_spans(completion, step.completion_text, spans, decode)
    if not any(launch_mask):
        return []
    steps = node.steps[: step_index + 1]
    sequences = _merge_steps(node.id, steps, lambda s: launch_mask if s is step else False)
    return [_datum(seq, node, advantage, trajectory_id, stage) for seq in _truncated(sequences[-1:])]


def model_call_datum(
    call: ModelCall,
    advantage: float,
    *,
    trajectory_id: str,
    node_id: str,
    depth: int,
    stage: str = "rubric_generation",
) -> Datum:
    """A datum training every completion token of a policy model call (a rubric it wrote).

    Raises MissingTokensError without token ids, ValueError for an external model's call (its
    tokens are not the policy's)."""
    owner = f"node {node_id!r}: the {call.role} call"
    if call.external:
        raise ValueError(f"{owner} was answered by an external model; it cannot be trained")
    prompt, completion = _require_tokens(owner, call.prompt_token_ids, call.completion_token_ids)
    completion_logprobs = _logprobs(owner, call.completion_logprobs, len(completion))
    return Datum(
        tokens=tuple(prompt + completion),
        mask=(False,) * len(prompt) + (True,) * len(completion),
        sampler_logprobs=(math.nan,) * len(prompt) + tuple(completion_logprobs),
        advantage=advantage,
        depth=depth,
        trajectory_id=trajectory_id,
        node_id=node_id,
        stage=stage,
        steps=(),
        policy_version=call.policy_version,
    )


def datum_stats(datums: Iterable[Datum]) -> dict[str, int]:
    """Counts for logs: datums, trained tokens, all tokens."""
    items = list(datums)
    return {
        "count": len(items),
        "trainable_tokens": sum(d.n_trainable for d in items),
        "total_tokens": sum(len(d.tokens) for d in items),
    }


def _check_trainable_node(node: AgentNode) -> None:
    if node.skip_gradient:
        raise ValueError(
            f"node {node.id!r} is marked skip_gradient ({node.skip_reason or 'no reason given'}); "
            "callers must not build datums for it"
        )


def _truncated(sequences: Iterable[TokenSequence]) -> list[TokenSequence]:
    cut = (truncate_after_last_trainable(seq) for seq in sequences)
    return [seq for seq in cut if seq is not None]


def _datum(seq: TokenSequence, node: AgentNode, advantage: float, trajectory_id: str, stage: str) -> Datum:
    versions = [node.steps[i].policy_version for i in seq.steps if node.steps[i].policy_version is not None]
    return Datum(
        tokens=seq.tokens,
        mask=seq.mask,
        sampler_logprobs=seq.sampler_logprobs,
        advantage=advantage,
        depth=node.depth,
        trajectory_id=trajectory_id,
        node_id=node.id,
        stage=stage,
        steps=seq.steps,
        policy_version=min(versions) if versions else None,
    )
