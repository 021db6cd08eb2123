"""Exact turn history: what the sampler generated, stop string included, is what the agent's
history shows and what its datum trains.

A multi-turn agent runs through the runtime on the tiny in-process model. The tiny model's
weights are random, so a bigram logit bias (a forward hook) makes it spell one reply whose
tokens are the tokenizer's own encoding of it, ending in the stop string `</python>` (split over
three tokens). With the stop string kept, each step's prompt extends the previous prompt and
completion, so the agent's steps merge into one datum; had the text dropped the stop string,
the re-rendered history would differ from the generated tokens and every step would start a
new sequence.
"""

from __future__ import annotations

import math

import pytest
import torch

from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime import NodeHandle, Outcome, RuntimeConfig, SamplingParams, Verdict, run_rollout
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.train.datums import execution_datums, merge_steps
from sera.types import Action, Message, Task

STOP = "</python>"
REPLY = "run(1)</python>"
"""What the biased model writes each turn (its tokens must all differ, for a bigram to spell it)."""
TURNS = 3


class CellEnv:
    """Accepts any reply; answers with a cell observation; finishes after `TURNS` replies."""

    def __init__(self, handle: NodeHandle) -> None:
        self.handle = handle
        self.turns = 0

    def initial_messages(self) -> list[Message]:
        return [Message(role="system", content="Write one <python> cell per reply."),
                Message(role="user", content=self.handle.node.goal)]

    def parse(self, reply: str) -> Action:
        return Action(kind="text", body=reply)

    async def execute(self, action: Action) -> Outcome:
        self.turns += 1
        done = self.turns == TURNS
        return Outcome(observation=f"[Cell {self.turns} Output]\ndone", finished=done, finish_message="ok" if done else None)

    def verify(self, finish_message: str | None) -> Verdict:
        return Verdict(success=finish_message == "ok", info={})

    def forced_step(self) -> None:
        return None

    def observable_state(self) -> dict:
        return {}

    async def close(self) -> None:
        pass


def spelling_model(reply_ids: list[int], after: int):
    """The tiny model with a bigram bias: after token `after` it writes `reply_ids`, in order."""
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    chain = [after, *reply_ids]
    assert len(set(chain[:-1])) == len(chain) - 1, "a bigram can only spell a reply of distinct tokens"
    bias = torch.zeros(model.config.vocab_size, model.config.vocab_size)
    for previous, following in zip(chain, chain[1:]):
        bias[previous, following] = 100.0

    def add_bias(module, args, kwargs, output):
        output.logits[:, -1] += bias[kwargs["input_ids"][:, -1]]
        return output

    model.register_forward_hook(add_bias, with_kwargs=True)
    return model, tokenizer


async def test_a_multi_turn_agent_trains_one_datum_of_its_replies_as_generated() -> None:
    _, tokenizer = tiny_model_and_tokenizer(seed=0)
    reply_ids = tokenizer.encode(REPLY, add_special_tokens=False)
    assert not any(STOP in tokenizer.decode([t]) for t in reply_ids), "the stop string should span tokens"
    header = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
    model, tokenizer = spelling_model(reply_ids, after=header[-1])
    sampler = TransformersSampler(model, tokenizer)
    sampling = SamplingParams(temperature=0.0, max_tokens=4 * len(reply_ids), stop=(STOP,), seed=0)
    try:
        tree = await run_rollout(Task(id="t0", goal="print 1", env="cells"), sampler, CellEnv,
                                 RuntimeConfig(sampling=sampling))
    finally:
        await sampler.close()

    node = tree.nodes[tree.root_id]
    assert node.error is None and len(node.steps) == TURNS
    # The history shows each turn exactly as generated, stop string included.
    assert [m.content for m in node.messages if m.role == "assistant"] == [REPLY] * TURNS
    for step in node.steps:
        assert step.finish_reason == "stop" and step.completion_text == REPLY
        assert step.completion_token_ids == reply_ids
        assert tokenizer.decode(step.completion_token_ids, skip_special_tokens=True) == REPLY

    # Every step's prompt extends the previous prompt + completion: one merged sequence, one datum.
    assert len(merge_steps(node, lambda step: True)) == 1
    [datum] = execution_datums(node, 1.0, trajectory_id="t0/root")
    assert datum.steps == tuple(range(TURNS))
    trained = [i for i, m in enumerate(datum.mask) if m]
    runs = _runs(trained)
    assert len(runs) == TURNS
    for start, end in runs:
        assert tokenizer.decode(datum.tokens[start:end], skip_special_tokens=True) == REPLY
        assert all(not math.isnan(lp) for lp in datum.sampler_logprobs[start:end])


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive positions, as (start, end) slices."""
    runs: list[tuple[int, int]] = []
    for p in positions:
        if runs and runs[-1][1] == p:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    return runs
