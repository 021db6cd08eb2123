"""The in-process sampler on a tiny random model: batching, sampling, stops, context policy."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest
import torch

from sera.policy.decoding import DecodeJob, RowState, stop_window
from sera.policy.errors import SamplerError
from sera.policy.repetition import loop_cut
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.policy.transformers_sampler import TransformersSampler
from sera.runtime.policy import Policy, Sampler, SamplingParams
from sera.types import Message

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer(seed=0)


@pytest.fixture
async def sampler(tiny):
    model, tokenizer = tiny
    sampler = TransformersSampler(model, tokenizer, max_batch_size=32)
    yield sampler
    await sampler.close()


def chat(task: str, turns: int = 0) -> list[Message]:
    messages = [Message(role="system", content="You are an agent."), Message(role="user", content=task)]
    for i in range(turns):
        messages += [
            Message(role="assistant", content=f"<action>take item {i}</action>"),
            Message(role="user", content=f"[Step {i} Observation] You take item {i}."),
        ]
    return messages


def started_event(model) -> tuple[threading.Event, object]:
    """An event set by the model's first forward pass: the worker has taken a batch."""
    event = threading.Event()
    handle = model.register_forward_hook(lambda *_: event.set())
    return event, handle


def test_implements_the_sampler_protocol(tiny) -> None:
    sampler = TransformersSampler(*tiny)
    assert isinstance(sampler, Sampler) and isinstance(sampler, Policy)
    asyncio.run(sampler.close())


async def test_greedy_batched_equals_one_at_a_time(sampler) -> None:
    prompts = [chat(f"craft {i} sticks", turns=i) for i in range(6)]
    batched = await asyncio.gather(*(sampler(p, GREEDY) for p in prompts))
    assert sampler.batch_records[0].size == len(prompts)
    for prompt, together in zip(prompts, batched):
        alone = await sampler(prompt, GREEDY)
        assert alone.token_ids == together.token_ids
        assert alone.text == together.text
    assert [r.size for r in sampler.batch_records] == [6, 1, 1, 1, 1, 1, 1]


async def test_seeded_sampling_is_reproducible_whatever_the_batch(sampler) -> None:
    target = chat("find the knife", turns=1)
    seeded = SamplingParams(temperature=1.0, max_tokens=12, seed=1234)
    alone = await sampler(target, seeded)
    others = [sampler(chat("other task " * k, turns=k), SamplingParams(temperature=1.0, max_tokens=5 + k, seed=k)) for k in range(5)]
    in_batch = (await asyncio.gather(sampler(target, seeded), *others))[0]
    swapped = (await asyncio.gather(sampler(chat("x", 7), SamplingParams(max_tokens=3)), sampler(target, seeded)))[1]
    assert [r.size for r in sampler.batch_records] == [1, 6, 2]
    assert in_batch.token_ids == alone.token_ids == swapped.token_ids
    other_seed = await sampler(target, SamplingParams(temperature=1.0, max_tokens=12, seed=99))
    assert other_seed.token_ids != alone.token_ids


async def test_unseeded_requests_draw_independently(sampler) -> None:
    free = SamplingParams(temperature=1.0, max_tokens=12)
    first, second = await asyncio.gather(sampler(chat("go"), free), sampler(chat("go"), free))
    assert first.prompt_token_ids == second.prompt_token_ids
    assert first.token_ids != second.token_ids


async def test_stop_string_ends_the_completion_and_is_kept_in_text_and_ids(sampler, tiny) -> None:
    _, tokenizer = tiny
    full = await sampler(chat("stop test"), SamplingParams(temperature=0.0, max_tokens=40))
    # A stop string spelled by one token in the middle of the greedy completion.
    pieces = [tokenizer.decode([t]) for t in full.token_ids]
    index = next(i for i, p in enumerate(pieces) if i >= 4 and len(p) >= 2 and p.isascii() and p.strip() == p)
    stop = pieces[index]
    cut = full.text.find(stop)
    assert cut >= 0

    stopped = await sampler(chat("stop test"), SamplingParams(temperature=0.0, max_tokens=40, stop=("@@never@@", stop)))
    assert stopped.finish_reason == "stop"
    # The text is the generated tokens decoded: the stop string included, exactly as generated.
    assert stopped.text == tokenizer.decode(stopped.token_ids, skip_special_tokens=True)
    assert stopped.text == full.text[: len(stopped.text)] and stopped.text.find(stop) == cut
    # ids/logprobs: exactly what was generated, up to and including the token completing the stop.
    assert stopped.token_ids == full.token_ids[: len(stopped.token_ids)]
    assert stopped.logprobs == pytest.approx(full.logprobs[: len(stopped.token_ids)], abs=1e-5)
    assert stop in tokenizer.decode(stopped.token_ids)
    assert stop not in tokenizer.decode(stopped.token_ids[:-1])
    assert stopped.usage.completion_tokens == len(stopped.token_ids)


class DecodeSpy:
    """The tokenizer, recording the length of every decode."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.decoded: list[int] = []

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def decode(self, ids, **kwargs):
        self.decoded.append(len(ids))
        return self._tokenizer.decode(ids, **kwargs)


async def test_a_stop_string_split_across_tokens_is_found_in_the_decoded_tail(tiny) -> None:
    model, tokenizer = tiny
    sampler = TransformersSampler(model, tokenizer)
    full = await sampler(chat("split stop"), SamplingParams(temperature=0.0, max_tokens=60))
    await sampler.close()
    pieces = [tokenizer.decode([t]) for t in full.token_ids]
    # Two characters straddling tokens i and i+1, far enough in that a tail window is not the whole text.
    def straddles(i: int) -> bool:
        a, b = pieces[i], pieces[i + 1]
        ok = a.isascii() and b.isascii() and a and b
        return bool(ok) and full.text.find(a[-1] + b[0]) == len(tokenizer.decode(full.token_ids[: i + 1])) - 1
    index = next(i for i in range(16, len(pieces) - 1) if straddles(i))
    stop = pieces[index][-1] + pieces[index + 1][0]

    spy = DecodeSpy(tokenizer)
    sampler = TransformersSampler(model, spy)
    stopped = await sampler(chat("split stop"), SamplingParams(temperature=0.0, max_tokens=60, stop=(stop,)))
    await sampler.close()
    assert stopped.finish_reason == "stop" and stopped.token_ids == full.token_ids[: index + 2]
    assert stop in stopped.text and stopped.text == tokenizer.decode(stopped.token_ids, skip_special_tokens=True)
    # Every decode but the final one looked at a tail window, not the whole completion.
    window = stop_window((stop,))
    assert max(spy.decoded[:-1]) <= window < index and spy.decoded[-1] == len(stopped.token_ids)


def test_a_stop_string_ending_in_a_multibyte_character_is_found_when_its_last_byte_arrives(tiny) -> None:
    _, tokenizer = tiny
    text = "The quick brown fox jumps over the lazy dog. " * 2 + "caf\u00e9 ok"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert all("\u00e9" not in tokenizer.decode([t]) for t in ids), "é should span byte tokens"
    job = DecodeJob(prompt_ids=[0], temperature=0.0, top_p=1.0, max_tokens=len(ids) + 5, stop=("f\u00e9",),
                    generator=torch.Generator())
    row = RowState(SimpleNamespace(payload=job), frozenset(tokenizer.all_special_ids))
    results = []
    for token in ids:
        row.token_ids.append(token)
        row.logprobs.append(0.0)
        results.append(row.finish_if_done(tokenizer, frozenset({tokenizer.eos_token_id})))
    done = next(i for i, r in enumerate(results) if r is not None)
    expected = next(n for n in range(1, len(ids) + 1) if "f\u00e9" in tokenizer.decode(ids[:n]))
    assert done + 1 == expected and results[done].text == tokenizer.decode(ids[:expected])
    assert results[done].text.endswith("caf\u00e9") and results[done].finish_reason == "stop"


async def test_max_tokens_finishes_with_length(sampler) -> None:
    completion = await sampler(chat("ramble"), SamplingParams(temperature=1.0, max_tokens=7, seed=0))
    assert completion.finish_reason == "length"
    assert len(completion.token_ids) == 7 == completion.usage.completion_tokens
    assert completion.usage.prompt_tokens == len(completion.prompt_token_ids)
    assert completion.prompt_messages is None


async def test_immediate_eos_is_an_empty_stop_completion() -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    eos = tokenizer.eos_token_id
    # A model that always wants to end its turn.
    model.lm_head.register_forward_hook(lambda _m, _i, out: out.index_add(-1, torch.tensor([eos]), torch.full_like(out[..., :1], 1e4)))
    sampler = TransformersSampler(model, tokenizer)
    completion = await sampler(chat("say nothing"), SamplingParams(temperature=1.0, max_tokens=10, seed=0))
    await sampler.close()
    assert completion.text == "" and completion.finish_reason == "stop"
    assert completion.token_ids == [eos]
    assert completion.logprobs == pytest.approx([0.0], abs=1e-4)


async def test_top_p_restricts_to_the_nucleus(sampler, tiny) -> None:
    model, _ = tiny
    prompt = chat("nucleus")
    draws = await asyncio.gather(
        *(sampler(prompt, SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=1, seed=s)) for s in range(8))
    )
    greedy = await sampler(prompt, SamplingParams(temperature=0.0, max_tokens=1))
    assert {d.token_ids[0] for d in draws} == {greedy.token_ids[0]}


async def test_late_requests_join_the_rows_already_decoding(sampler, tiny) -> None:
    model, _ = tiny
    event, handle = started_event(model)
    finished: list[str] = []

    async def call(name: str, messages: list[Message], max_tokens: int):
        result = await sampler(messages, SamplingParams(temperature=0.0, max_tokens=max_tokens))
        finished.append(name)
        return result

    try:
        first_wave = [asyncio.ensure_future(call(f"early {i}", chat(f"early {i}"), 60)) for i in range(4)]
        await asyncio.to_thread(event.wait, 30)  # the first rows are decoding now
        late = [call(f"late {i}", chat(f"late {i}", turns=i), 4) for i in range(3)]
        results = await asyncio.gather(*first_wave, *late)
    finally:
        handle.remove()
    assert all(r.token_ids for r in results)
    [period] = sampler.batch_records
    assert period.size == 7 and period.joined == 3 and max(period.live_rows) == 7
    # The late calls did not wait for the early rows to end: they were answered first.
    assert {name for name in finished[:3]} == {"late 0", "late 1", "late 2"}
    for i, result in enumerate(results[4:]):  # and they equal the same calls made alone
        alone = await sampler(chat(f"late {i}", turns=i), SamplingParams(temperature=0.0, max_tokens=4))
        assert alone.token_ids == result.token_ids


async def test_max_batch_size_bounds_the_rows_decoded_at_once() -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    sampler = TransformersSampler(model, tokenizer, max_batch_size=4)
    await asyncio.gather(*(sampler(chat(f"t{i}"), SamplingParams(max_tokens=2 + i, seed=i)) for i in range(10)))
    await sampler.close()
    [period] = sampler.batch_records
    assert period.size == 10 and max(period.live_rows) == 4 and period.joined == 6


async def test_max_batch_tokens_bounds_the_padded_batch() -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    prompts = [chat(f"t{i}") for i in range(5)]
    probe = TransformersSampler(model, tokenizer)
    longest = max(len(probe.chat_ids(p)) for p in prompts)
    await probe.close()
    # Room for two padded rows of (longest prompt + 4 new tokens), not three.
    sampler = TransformersSampler(model, tokenizer, max_batch_tokens=2 * (longest + 4) + 1)
    await asyncio.gather(*(sampler(p, SamplingParams(max_tokens=4, seed=0)) for p in prompts))
    await sampler.close()
    [period] = sampler.batch_records
    assert period.size == 5 and max(period.live_rows) == 2


@pytest.mark.parametrize("failing_forward", [1, 3])
async def test_a_failing_forward_is_a_server_error_for_the_rows_it_computed_and_the_sampler_recovers(
    tiny, failing_forward: int
) -> None:
    """Forward 1 is the prefill of "a" (only "a" fails); forward 3 is the first decode step of
    both rows (both fail)."""
    model, tokenizer = tiny
    calls = [0]

    def fail_once(*_):
        calls[0] += 1
        if calls[0] == failing_forward:
            raise RuntimeError("simulated out of memory")

    handle = model.register_forward_pre_hook(fail_once)
    sampler = TransformersSampler(model, tokenizer)
    try:
        results = await asyncio.gather(sampler(chat("a"), GREEDY), sampler(chat("b"), GREEDY), return_exceptions=True)
        failed = [isinstance(r, SamplerError) and r.kind == "server_error" for r in results]
        assert failed == ([True, False] if failing_forward == 1 else [True, True])
        assert "simulated out of memory" in str(results[0])
        assert (await sampler(chat("a"), GREEDY)).token_ids
    finally:
        handle.remove()
        await sampler.close()


async def test_cancelled_request_leaves_the_batch(sampler) -> None:
    long = asyncio.ensure_future(sampler(chat("long"), SamplingParams(temperature=0.0, max_tokens=400)))
    short = asyncio.ensure_future(sampler(chat("short"), SamplingParams(temperature=0.0, max_tokens=3)))
    await short
    long.cancel()
    await sampler(chat("after"), SamplingParams(max_tokens=1))  # it may join the long row's period
    first = sampler.batch_records[0]
    assert sum(r.size for r in sampler.batch_records) == 3 and len(first.live_rows) < 399


async def test_event_loop_stays_responsive_while_decoding(sampler) -> None:
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    await sampler(chat("busy"), SamplingParams(temperature=0.0, max_tokens=60))
    done = True
    await task
    assert ticks >= 5


async def test_context_policy_drops_oldest_pairs_and_reports_them(sampler) -> None:
    messages = chat("a long task", turns=6)
    keep_two = messages[:2] + messages[-4:]
    cap = len(sampler.chat_ids(keep_two))
    completion = await sampler(messages, SamplingParams(max_tokens=2, seed=0, max_prompt_tokens=cap))
    assert completion.prompt_messages == keep_two
    assert completion.prompt_token_ids == sampler.chat_ids(keep_two)
    assert completion.usage.prompt_tokens == cap


async def test_context_policy_cuts_tokens_when_the_newest_turn_is_too_long(sampler) -> None:
    messages = chat("task") + [Message(role="assistant", content="ok"), Message(role="user", content="word " * 400)]
    head = sampler.chat_ids(messages[:2], add_generation_prompt=False)
    full = sampler.chat_ids(messages)
    cap = len(head) + 50
    completion = await sampler(messages, SamplingParams(max_tokens=2, seed=0, max_prompt_tokens=cap))
    assert completion.prompt_token_ids == full[: len(head)] + full[-50:]
    assert completion.prompt_messages == messages


async def test_prompt_too_long_errors(sampler) -> None:
    with pytest.raises(SamplerError) as caught:
        await sampler(chat("x " * 200), SamplingParams(max_tokens=2, max_prompt_tokens=20))
    assert caught.value.kind == "prompt_too_long"
    with pytest.raises(SamplerError, match="positions") as caught:
        await sampler(chat("x"), SamplingParams(max_tokens=5000))
    assert caught.value.kind == "prompt_too_long"
    with pytest.raises(SamplerError) as caught:
        await sampler.complete_tokens(list(range(30)), SamplingParams(max_tokens=2, max_prompt_tokens=10))
    assert caught.value.kind == "prompt_too_long"


@pytest.mark.parametrize(
    "sampling",
    [SamplingParams(max_tokens=0), SamplingParams(temperature=-1), SamplingParams(top_p=0.0), SamplingParams(stop=("",))],
)
async def test_invalid_requests_are_refused(sampler, sampling) -> None:
    with pytest.raises(SamplerError) as caught:
        await sampler(chat("x"), sampling)
    assert caught.value.kind == "invalid_request"


async def test_complete_tokens_uses_ids_as_given(sampler) -> None:
    prompt = sampler.chat_ids(chat("tokens"))
    by_ids = await sampler.complete_tokens(prompt, GREEDY)
    by_chat = await sampler(chat("tokens"), GREEDY)
    assert by_ids.prompt_token_ids == prompt and by_ids.token_ids == by_chat.token_ids
    with pytest.raises(SamplerError) as caught:
        await sampler.complete_tokens([10**6], GREEDY)
    assert caught.value.kind == "invalid_request"


async def test_closed_sampler_refuses_calls(tiny) -> None:
    sampler = TransformersSampler(*tiny)
    await sampler.close()
    with pytest.raises(SamplerError) as caught:
        await sampler(chat("x"), GREEDY)
    assert caught.value.kind == "endpoint_down"


def test_works_across_event_loops(tiny) -> None:
    sampler = TransformersSampler(*tiny)
    first = asyncio.run(sampler(chat("x"), GREEDY))
    second = asyncio.run(sampler(chat("x"), GREEDY))
    asyncio.run(sampler.close())
    assert first.token_ids == second.token_ids


async def test_repetition_stop_ends_a_looping_reply_where_the_loop_first_covers_the_span(sampler) -> None:
    # The tiny model's greedy reply to "craft 0 sticks" falls into a short loop (and later leaves
    # it); its reply to "craft 1 sticks" never loops. With the check on, the first ends exactly
    # where the loop first covers 32 tokens, the second runs to the cap unchanged.
    looping, plain = [Message(role="user", content="craft 0 sticks")], [Message(role="user", content="craft 1 sticks")]
    whole = SamplingParams(temperature=0.0, max_tokens=200)
    checked = SamplingParams(temperature=0.0, max_tokens=200, repetition_stop=32)
    loop_whole = await sampler(looping, whole)
    end = loop_cut(loop_whole.token_ids, 32)
    assert end is not None and end < 200
    cut = await sampler(looping, checked)
    assert cut.finish_reason == "repetition" and cut.token_ids == loop_whole.token_ids[:end]
    assert cut.logprobs == pytest.approx(loop_whole.logprobs[:end], abs=1e-5)
    assert cut.usage.completion_tokens == end
    plain_whole, plain_checked = await sampler(plain, whole), await sampler(plain, checked)
    assert loop_cut(plain_whole.token_ids, 32) is None
    assert plain_checked.token_ids == plain_whole.token_ids and plain_checked.finish_reason == "length"


async def test_negative_repetition_stop_is_an_invalid_request(sampler) -> None:
    with pytest.raises(SamplerError, match="repetition_stop must be >= 0"):
        await sampler(chat("x"), SamplingParams(max_tokens=4, repetition_stop=-1))
