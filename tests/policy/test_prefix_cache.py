"""Prefix reuse in the in-process sampler: an agent's next turn and a shared system prompt are not
prefilled again, the results equal a sampler without reuse, and changed weights drop the cache."""

from __future__ import annotations

import asyncio

import pytest
import torch

from sera.policy.prefix_cache import BLOCK, PrefixCache
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.policy import SamplingParams
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.types import Message

SYSTEM = "You are an agent in a crafting world. " * 12


def first_turn(task: str) -> list[Message]:
    return [Message(role="system", content=SYSTEM), Message(role="user", content=task)]


def next_turn(messages: list[Message], reply: str, observation: str) -> list[Message]:
    return messages + [Message(role="assistant", content=reply), Message(role="user", content=observation)]


async def agent(sampler: TransformersSampler, task: str, sampling: SamplingParams, turns: int = 3):
    """Three turns of one agent: each prompt extends the previous prompt and reply."""
    messages, completions = first_turn(task), []
    for turn in range(turns):
        completion = await sampler(messages, sampling)
        completions.append(completion)
        messages = next_turn(messages, completion.text, f"[Observation {turn}] You see item {turn}.")
    return completions


@pytest.fixture
def tiny():
    return tiny_model_and_tokenizer(seed=0)


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0.0, max_tokens=24),
                                      SamplingParams(temperature=1.0, max_tokens=24, seed=7)])
async def test_later_turns_reuse_earlier_ones_and_sample_what_a_sampler_without_reuse_samples(tiny, sampling) -> None:
    model, tokenizer = tiny
    reuse = TransformersSampler(model, tokenizer)
    plain = TransformersSampler(model, tokenizer, prefix_cache_bytes=0)
    try:
        with_cache = await agent(reuse, "craft a stick", sampling)
        without = await agent(plain, "craft a stick", sampling)
    finally:
        await reuse.close()
        await plain.close()
    for a, b in zip(with_cache, without):
        assert a.prompt_token_ids == b.prompt_token_ids
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    records = reuse.batch_records
    assert records[0].reused_tokens == 0
    # Turns 2 and 3 reused at least the whole previous prompt.
    for turn in (1, 2):
        assert records[turn].reused_tokens >= len(with_cache[turn - 1].prompt_token_ids)
        assert records[turn].prefilled_tokens == len(with_cache[turn].prompt_token_ids) - records[turn].reused_tokens
    assert sum(r.reused_tokens for r in plain.batch_records) == 0
    # Each turn continued the previous one's prompt, which was replaced: one entry per agent.
    assert len(reuse.prefix_cache) == 1


async def test_concurrent_agents_share_the_system_prompt(tiny) -> None:
    model, tokenizer = tiny
    sampler = TransformersSampler(model, tokenizer)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    try:
        await sampler(first_turn("task zero"), greedy)
        others = await asyncio.gather(*(sampler(first_turn(f"task {i}"), greedy) for i in range(1, 4)))
    finally:
        await sampler.close()
    shared = len(sampler.chat_ids([Message(role="system", content=SYSTEM)], add_generation_prompt=False))
    assert shared >= BLOCK
    # Each later agent reused (at least) the full blocks of the system prompt.
    assert sampler.batch_records[1].reused_tokens >= len(others) * (shared // BLOCK) * BLOCK


async def test_changed_weights_drop_the_cache(tiny) -> None:
    model, tokenizer = tiny
    sampler = TransformersSampler(model, tokenizer)
    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    try:
        before = await agent(sampler, "craft a plank", greedy, turns=2)
        assert len(sampler.prefix_cache) == 1
        with torch.no_grad():  # an optimizer step, in place, as the learner's
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        after = await agent(sampler, "craft a plank", greedy, turns=2)
        fresh = TransformersSampler(model, tokenizer, prefix_cache_bytes=0)
        expected = await agent(fresh, "craft a plank", greedy, turns=2)
        await fresh.close()
    finally:
        await sampler.close()
    assert sampler.prefix_stats.invalidations == 1
    assert sampler.batch_records[2].reused_tokens == 0  # the first call after the update
    for a, b in zip(after, expected):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert [c.token_ids for c in after] != [c.token_ids for c in before]


async def test_release_memory_frees_the_buffers_and_refuses_while_busy(tiny) -> None:
    model, tokenizer = tiny
    sampler = TransformersSampler(model, tokenizer)
    try:
        await agent(sampler, "craft", SamplingParams(temperature=0.0, max_tokens=8), turns=2)
        assert sampler.prefix_cache.nbytes > 0
        sampler.release_memory()
        assert sampler.prefix_cache.nbytes == 0 and len(sampler.prefix_cache) == 0
        again = await sampler(first_turn("craft"), SamplingParams(temperature=0.0, max_tokens=8))
        assert again.token_ids
    finally:
        await sampler.close()


def entry(n: int, start: int = 0) -> tuple[list[int], list[torch.Tensor], list[torch.Tensor]]:
    ids = list(range(start, start + n))
    kv = [torch.zeros(1, n, 2)]
    return ids, kv, [t.clone() for t in kv]


def store(cache: PrefixCache, n: int, start: int = 0, prompt_len: int | None = None, replaces: int | None = None) -> None:
    cache.store(*entry(n, start), prompt_len=n if prompt_len is None else prompt_len, replaces=replaces)


def test_lookup_finds_the_longest_shared_prefix_and_checks_the_tokens() -> None:
    cache = PrefixCache(budget_bytes=10**6)
    store(cache, 100, prompt_len=90)
    store(cache, 100, start=1000)
    prompt = list(range(70)) + [5000] * 40
    match = cache.lookup(prompt, max_length=len(prompt) - 1)
    assert match is not None and match.length == 70 and not match.supersedes
    assert cache.lookup([7] + list(range(1, 100)), max_length=99) is None  # differs in the first block
    assert cache.lookup(list(range(120)), max_length=119).length == 100
    assert cache.lookup(list(range(120)), max_length=50).length == 50
    assert cache.stats.hit_tokens == 70 + 100 + 50


def test_budget_evicts_least_recently_used_and_a_continued_conversation_replaces_its_turn() -> None:
    per_entry = entry(64)[1][0].numel() * 4 * 2
    cache = PrefixCache(budget_bytes=int(2.5 * per_entry))
    store(cache, 64, start=0, prompt_len=40)
    store(cache, 64, start=1000)
    cache.lookup(list(range(64)), max_length=63)  # the first is now the most recently used
    store(cache, 64, start=2000)
    assert len(cache) == 2 and cache.stats.evicted == 1 and cache.nbytes <= 2.5 * per_entry
    assert cache.lookup(list(range(1000, 1064)), max_length=63) is None
    # The next turn re-renders the reply differently after token 50: it still continues the prompt.
    match = cache.lookup(list(range(50)) + [9999] * 30, max_length=79)
    assert match is not None and match.length == 50 and match.supersedes
    store(cache, 80, prompt_len=70, replaces=match.entry_id)
    assert len(cache) == 2 and cache.lookup(list(range(90)), max_length=89).length == 80


def test_a_disabled_cache_stores_nothing() -> None:
    cache = PrefixCache(budget_bytes=0)
    store(cache, 100)
    assert len(cache) == 0 and cache.lookup(list(range(100)), max_length=99) is None
