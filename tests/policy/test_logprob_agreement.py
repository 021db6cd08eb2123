"""The sampler's per-token logprobs equal the learner's recompute (the CISPO ratio's two sides)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from sera.train.logprobs import batched_sequence_logprobs, sequence_logprobs
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.policy import SamplingParams
from sera.types import Message

TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer(seed=1)


def chat(task: str, turns: int) -> list[Message]:
    messages = [Message(role="system", content="You are an agent in a crafting game."), Message(role="user", content=task)]
    for i in range(turns):
        messages += [
            Message(role="assistant", content=f"<python>craft('{i} stick')</python>"),
            Message(role="user", content=f"[Cell {i} Output]\nCrafted {i} stick."),
        ]
    return messages


async def test_concurrent_padded_batch_with_early_finishers_matches_recompute(tiny) -> None:
    model, tokenizer = tiny
    sampler = TransformersSampler(model, tokenizer)
    # Different prompt lengths (left padding) and different max_tokens (rows leave early).
    requests = [
        (chat("craft a stick", turns), SamplingParams(temperature=t, top_p=p, max_tokens=n, seed=i))
        for i, (turns, t, p, n) in enumerate(
            [(0, 1.0, 1.0, 24), (3, 1.0, 1.0, 3), (1, 0.0, 1.0, 12), (6, 0.7, 0.9, 6), (2, 1.3, 1.0, 18), (4, 1.0, 0.5, 9)]
        )
    ]
    completions = await asyncio.gather(*(sampler(messages, sampling) for messages, sampling in requests))
    await sampler.close()

    [record] = sampler.batch_records
    assert record.size == len(requests) and len(set(record.prompt_lens)) == len(requests)
    # Rows really left the batch: the row count shrinks step by step down to the longest request.
    assert record.live_rows[0] == len(requests) and record.live_rows[-1] == 1
    assert list(record.live_rows) == sorted(record.live_rows, reverse=True)
    for completion, (_, sampling) in zip(completions, requests):
        assert completion.token_ids and len(completion.logprobs) == len(completion.token_ids)
        assert len(completion.token_ids) <= sampling.max_tokens
        with torch.no_grad():
            recomputed = sequence_logprobs(model, completion.prompt_token_ids, completion.token_ids)
        diff = (recomputed - torch.tensor(completion.logprobs)).abs().max().item()
        assert diff < TOLERANCE, (sampling, diff)


async def test_logprobs_are_temperature_one_not_the_sampling_distribution(tiny) -> None:
    """At temperature 0.3 the sampling distribution is sharper; the reported logprobs are not."""
    model, tokenizer = tiny
    sampler = TransformersSampler(model, tokenizer)
    completion = await sampler(chat("craft a plank", 1), SamplingParams(temperature=0.3, max_tokens=10, seed=3))
    await sampler.close()
    with torch.no_grad():
        logits = model(torch.tensor([completion.prompt_token_ids + completion.token_ids])).logits[0].float()
    start = len(completion.prompt_token_ids) - 1
    steps = logits[start : start + len(completion.token_ids)]
    targets = torch.tensor(completion.token_ids)[:, None]
    at_t1 = torch.log_softmax(steps, -1).gather(-1, targets)[:, 0]
    at_t03 = torch.log_softmax(steps / 0.3, -1).gather(-1, targets)[:, 0]
    reported = torch.tensor(completion.logprobs)
    assert (reported - at_t1).abs().max() < TOLERANCE
    assert (reported - at_t03).abs().max() > 10 * TOLERANCE


def test_batched_recompute_equals_one_at_a_time(tiny) -> None:
    model, _ = tiny
    generator = torch.Generator().manual_seed(0)
    pairs = [
        (torch.randint(0, 500, (p,), generator=generator).tolist(), torch.randint(0, 500, (c,), generator=generator).tolist())
        for p, c in [(5, 9), (40, 2), (17, 17), (1, 30)]
    ]
    with torch.no_grad():
        batched = batched_sequence_logprobs(model, pairs)
        for (prompt, completion), row in zip(pairs, batched):
            single = sequence_logprobs(model, prompt, completion)
            assert row.shape == (len(completion),)
            assert (row - single).abs().max() < 1e-4


def test_recompute_keeps_gradients_for_the_learner(tiny) -> None:
    model, _ = tiny
    logprobs = sequence_logprobs(model, [3, 4, 5], [6, 7])
    logprobs.sum().backward()
    assert model.lm_head.weight.grad is not None
    model.zero_grad(set_to_none=True)


def test_recompute_rejects_empty_sequences(tiny) -> None:
    model, _ = tiny
    with pytest.raises(ValueError, match="prompt is empty"):
        sequence_logprobs(model, [], [1])
    with pytest.raises(ValueError, match="completion is empty"):
        sequence_logprobs(model, [1], [])
