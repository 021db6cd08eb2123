"""Datums from realistic agent steps: prefix merging, masks, delegation spans, rubric calls."""

from __future__ import annotations

import math

import pytest

from sera.agents import codeact, text_protocol
from sera.testing.tiny import tiny_tokenizer
from sera.train.datums import (
    Datum,
    MissingTokensError,
    TokenSequence,
    datum_stats,
    delegation_datums,
    execution_datums,
    merge_steps,
    model_call_datum,
    truncate_after_last_trainable,
)
from sera.agents.protocol import CODEACT, TEXT
from sera.train.spans import SpanAlignmentError
from sera.types import AgentNode, Message, ModelCall, Step

TOKENIZER = tiny_tokenizer()
EOS = TOKENIZER.eos_token_id
HEAD = [
    Message(role="system", content="You are an agent in a crafting game. Write one <python> cell per reply."),
    Message(role="user", content="Craft 2 sticks and 4 oak planks."),
]
GATHER = (
    'results = await asyncio.gather(launch_subagent({"goal": "craft 2 sticks"}), '
    'launch_subagent({"goal": "craft 4 oak planks"}))'
)
DELEGATING_REPLY = (
    "<thought>Split the work.</thought>\n<python>inv = view_inventory()\nprint(inv)\n"
    f"{GATHER}\nfor r in results:\n    print(r)</python>"
)
REPLIES = [
    "<thought>Check what I hold.</thought>\n<python>print(get_inventory())</python>",
    "<thought>I need planks first, then sticks.</thought>\n<python>craft('4 oak planks')</python>",
    DELEGATING_REPLY,
]
OBSERVATIONS = [
    "[Cell 1 Output]\nInventory: 3 oak logs\n\nProvide your next action.",
    "[Cell 2 Output]\nCrafted 4 oak planks\n\nProvide your next action.",
    "[Cell 3 Output]\ndone\n\nProvide your next action.",
]


def chat_ids(messages: list[Message]) -> list[int]:
    return list(
        TOKENIZER.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
    )


def encode(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False)


def decode(ids) -> str:
    return TOKENIZER.decode(list(ids))


def make_step(index: int, prompt_ids: list[int], reply: str, observation: str, *, protocol: str = "codeact",
              error: str | None = None) -> Step:
    """A step as a sampler stopping on the protocol's closing tag records it: the tokens include
    the stop string, the text does not."""
    stop = codeact.STOP if protocol == "codeact" else next((s for s in text_protocol.STOPS if reply.endswith(s)), None)
    completion_ids = encode(reply) if stop and reply.endswith(stop) else encode(reply) + [EOS]
    text = reply[: -len(stop)] if stop and reply.endswith(stop) else reply
    parse = codeact.parse_reply if protocol == "codeact" else text_protocol.parse_reply
    return Step(
        index=index,
        prompt_len=0,
        prompt_token_ids=prompt_ids,
        completion_text=text,
        completion_token_ids=completion_ids,
        completion_logprobs=[-0.01 * (index + 1) * (j + 1) for j in range(len(completion_ids))],
        action=parse(text),
        observation=observation,
        error=error,
    )


def make_node(replies=REPLIES, observations=OBSERVATIONS, *, protocol="codeact", errors=None,
              truncate_at: int | None = None, node_id="root", depth=0) -> AgentNode:
    """A node whose step k prompt is the chat template of everything so far; at `truncate_at`
    the context policy keeps only the head and the newest turn."""
    messages = list(HEAD)
    steps = []
    for k, (reply, observation) in enumerate(zip(replies, observations)):
        shown = messages if k != truncate_at else HEAD + messages[-2:]
        steps.append(make_step(k, chat_ids(shown), reply, observation, protocol=protocol,
                               error=(errors or {}).get(k)))
        messages += [Message(role="assistant", content=reply), Message(role="user", content=observation)]
    return AgentNode(id=node_id, depth=depth, goal=HEAD[1].content, budget=10, messages=messages, steps=steps)


# -- prefix merging ----------------------------------------------------------------------------


def test_three_steps_extending_each_other_merge_into_one_sequence():
    node = make_node()
    for prev, nxt in zip(node.steps, node.steps[1:]):  # the precondition the test relies on
        assert nxt.prompt_token_ids[: len(prev.prompt_token_ids) + len(prev.completion_token_ids)] == (
            prev.prompt_token_ids + prev.completion_token_ids
        )
    [seq] = merge_steps(node, lambda step: True)
    last = node.steps[-1]
    assert list(seq.tokens) == last.prompt_token_ids + last.completion_token_ids
    assert seq.steps == (0, 1, 2)
    completion_at = set()
    for step in node.steps:
        start = len(step.prompt_token_ids)
        assert list(seq.tokens[start:start + len(step.completion_token_ids)]) == step.completion_token_ids
        completion_at |= set(range(start, start + len(step.completion_token_ids)))
        assert list(seq.sampler_logprobs[start:start + len(step.completion_logprobs)]) == step.completion_logprobs
    assert [i for i, m in enumerate(seq.mask) if m] == sorted(completion_at)
    assert all(math.isnan(lp) for i, lp in enumerate(seq.sampler_logprobs) if i not in completion_at)
    # The observation between step 0 and step 1 is in the sequence and untrained.
    between = [t for i, t in enumerate(seq.tokens[: len(node.steps[1].prompt_token_ids)]) if i not in completion_at]
    assert "Inventory: 3 oak logs" in decode(between)
    assert seq.step_starts == (0, *(len(s.prompt_token_ids) + len(s.completion_token_ids) for s in node.steps[:2]))


def test_a_truncated_prompt_starts_a_new_sequence_with_the_full_prompt():
    node = make_node(truncate_at=2)
    first, second = merge_steps(node, lambda step: True)
    assert first.steps == (0, 1) and second.steps == (2,)
    step = node.steps[2]
    assert list(second.tokens) == step.prompt_token_ids + step.completion_token_ids
    assert second.mask == (False,) * len(step.prompt_token_ids) + (True,) * len(step.completion_token_ids)


def test_per_token_trainable_mask_must_match_the_completion_length():
    node = make_node()
    with pytest.raises(ValueError, match=r"node 'root' step 0: trainable mask has 2 entries"):
        merge_steps(node, lambda step: [True, False])


def test_missing_token_ids_name_the_node_and_step():
    node = make_node(node_id="root/child-1")
    node.steps[1].completion_token_ids = None
    with pytest.raises(MissingTokensError, match=r"node 'root/child-1' step 1 has no completion_token_ids"):
        execution_datums(node, 1.0, trajectory_id="t/root/child-1")


# -- execution ---------------------------------------------------------------------------------


def test_execution_datum_carries_identity_and_advantage():
    node = make_node(node_id="c1", depth=2)
    [datum] = execution_datums(node, 0.75, trajectory_id="tree0/c1")
    identity = (datum.node_id, datum.depth, datum.trajectory_id, datum.stage, datum.steps)
    assert identity == ("c1", 2, "tree0/c1", "execution", (0, 1, 2))
    assert datum.advantage == 0.75 and datum.weight == 1.0
    assert datum.n_trainable == sum(len(s.completion_token_ids) for s in node.steps)
    assert datum.mask[-1]  # ends on a trained token: the reward is not lost


def test_drop_error_steps_keeps_the_error_step_as_untrained_context():
    node = make_node(errors={1: "NameError: name 'craft' is not defined"})
    [kept] = execution_datums(node, 1.0, trajectory_id="t", drop_error_steps=True)
    [full] = execution_datums(node, 1.0, trajectory_id="t")
    assert kept.tokens == full.tokens
    error_step = node.steps[1]
    start = len(error_step.prompt_token_ids)
    assert not any(kept.mask[start:start + len(error_step.completion_token_ids)])
    assert all(full.mask[start:start + len(error_step.completion_token_ids)])
    assert kept.n_trainable == full.n_trainable - len(error_step.completion_token_ids)


def test_drop_error_steps_cuts_a_trailing_error_step_and_drops_all_error_sequences():
    node = make_node(errors={2: "SyntaxError"})
    [datum] = execution_datums(node, 1.0, trajectory_id="t", drop_error_steps=True)
    assert datum.steps == (0, 1)
    assert len(datum.tokens) == len(node.steps[1].prompt_token_ids) + len(node.steps[1].completion_token_ids)
    all_errors = make_node(errors={0: "e", 1: "e", 2: "e"})
    assert execution_datums(all_errors, 1.0, trajectory_id="t", drop_error_steps=True) == []


def test_skip_gradient_node_is_refused():
    node = make_node()
    node.skip_gradient, node.skip_reason = True, "judge failed"
    with pytest.raises(ValueError, match="skip_gradient \\(judge failed\\)"):
        execution_datums(node, 1.0, trajectory_id="t")


# -- delegation --------------------------------------------------------------------------------


def trained_text(datum: Datum) -> str:
    return decode([t for t, m in zip(datum.tokens, datum.mask) if m])


def test_codeact_delegation_trains_exactly_the_gather_statement():
    node = make_node()
    [datum] = delegation_datums(node, 2, 0.5, trajectory_id="t/root", decode=decode, launch_spans=CODEACT.launch_spans)
    chosen = trained_text(datum)
    assert GATHER in chosen
    for other in ("view_inventory", "print(inv)", "for r in results", "<thought>", "</python>"):
        assert other not in chosen
    # Context: earlier steps are in the datum, untrained; the datum ends right after the span.
    step = node.steps[2]
    assert list(datum.tokens[: len(step.prompt_token_ids)]) == step.prompt_token_ids
    assert datum.mask[-1] and decode(datum.tokens).endswith(GATHER)
    assert not any(datum.mask[: len(step.prompt_token_ids)])
    assert (datum.stage, datum.steps, datum.advantage) == ("delegation", (0, 1, 2), 0.5)


def test_syntax_error_delegation_trains_the_whole_cell():
    code = "goals = ['a', 'b'\nr = launch_subagent(goals[0])"
    node = make_node(replies=[f"<thought>Try.</thought>\n<python>{code}</python>"], observations=["Error"])
    [datum] = delegation_datums(node, 0, 0.0, trajectory_id="t", decode=decode, launch_spans=CODEACT.launch_spans)
    chosen = trained_text(datum)
    assert code in chosen and "Try." not in chosen


def test_non_ascii_code_before_the_launch_is_not_trained():
    code = "note = 'café ☕ für 日本'; r = await launch_subagent(note)\nprint('ü', r)"
    node = make_node(replies=[f"<python>{code}</python>"], observations=["ok"])
    [datum] = delegation_datums(node, 0, 1.0, trajectory_id="t", decode=decode, launch_spans=CODEACT.launch_spans)
    chosen = trained_text(datum)
    assert "r = await launch_subagent(note)" in chosen
    assert "café" not in chosen and "print" not in chosen


def test_text_protocol_delegation_trains_the_delegate_block_also_when_unclosed():
    reply = 'The carrot needs slicing. <delegate>{"goal": "slice the carrot"}</delegate>'
    node = make_node(replies=["<action>take knife</action>", reply], observations=["You take the knife.", "done"],
                     protocol="text")
    assert node.steps[1].completion_text.endswith('"}')  # the stop string was cut from the text
    [datum] = delegation_datums(node, 1, 1.0, trajectory_id="t", decode=decode, launch_spans=TEXT.launch_spans)
    chosen = trained_text(datum)
    assert '<delegate>{"goal": "slice the carrot"}' in chosen and "carrot needs" not in chosen
    closed = make_node(replies=[reply + " and wait."], observations=["done"], protocol="text")
    [datum] = delegation_datums(closed, 0, 1.0, trajectory_id="t", decode=decode, launch_spans=TEXT.launch_spans)
    assert '<delegate>{"goal": "slice the carrot"}</delegate>' in trained_text(datum)
    assert "wait" not in decode(datum.tokens)  # cut after the last trained token


def test_a_step_without_launch_gives_no_delegation_datum():
    node = make_node()
    assert delegation_datums(node, 0, 1.0, trajectory_id="t", decode=decode, launch_spans=CODEACT.launch_spans) == []


def test_delegation_text_that_does_not_match_its_tokens_is_an_alignment_error():
    node = make_node()
    node.steps[2].completion_text = DELEGATING_REPLY.replace("view_inventory", "view_stuff")
    with pytest.raises(SpanAlignmentError, match="differ at char"):
        delegation_datums(node, 2, 1.0, trajectory_id="t", decode=decode, launch_spans=CODEACT.launch_spans)


# -- truncation, rubric calls, records -----------------------------------------------------------


def test_truncate_after_last_trainable():
    nan = math.nan
    seq = TokenSequence(
        tokens=(1, 2, 3, 4, 5, 6), mask=(False, True, False, True, False, False),
        sampler_logprobs=(nan, -1.0, nan, -2.0, nan, nan), steps=(0, 1, 2), step_starts=(0, 2, 4),
    )
    cut = truncate_after_last_trainable(seq)
    assert cut is not None
    assert (cut.tokens, cut.mask, cut.sampler_logprobs[-1]) == ((1, 2, 3, 4), (False, True, False, True), -2.0)
    assert (cut.steps, cut.step_starts) == ((0, 1), (0, 2))
    none = TokenSequence(tokens=(1, 2), mask=(False, False), sampler_logprobs=(nan, nan), steps=(0,), step_starts=(0,))
    assert truncate_after_last_trainable(none) is None


def rubric_call(**overrides) -> ModelCall:
    prompt = [Message(role="user", content="Write a rubric for: craft 2 sticks")]
    completion = encode('{"criteria": [{"name": "sticks", "weight": 1.0}]}') + [EOS]
    fields = dict(role="rubric", prompt_messages=prompt, prompt_token_ids=chat_ids(prompt),
                  completion_text='{"criteria": []}', completion_token_ids=completion,
                  completion_logprobs=[-0.5] * len(completion))
    return ModelCall(**{**fields, **overrides})


def test_model_call_datum_trains_the_whole_completion():
    call = rubric_call()
    datum = model_call_datum(call, -0.25, trajectory_id="t/root", node_id="root", depth=0)
    n_prompt, n_completion = len(call.prompt_token_ids), len(call.completion_token_ids)
    assert datum.tokens == tuple(call.prompt_token_ids + call.completion_token_ids)
    assert datum.mask == (False,) * n_prompt + (True,) * n_completion
    assert datum.sampler_logprobs[n_prompt:] == (-0.5,) * n_completion
    assert all(math.isnan(x) for x in datum.sampler_logprobs[:n_prompt])
    assert (datum.stage, datum.steps, datum.advantage) == ("rubric_generation", (), -0.25)


def test_model_call_without_tokens_or_from_an_external_model_is_refused():
    with pytest.raises(MissingTokensError, match="node 'root': the rubric call has no prompt_token_ids"):
        model_call_datum(rubric_call(prompt_token_ids=None), 1.0, trajectory_id="t", node_id="root", depth=0)
    with pytest.raises(ValueError, match="external model"):
        model_call_datum(rubric_call(external=True), 1.0, trajectory_id="t", node_id="root", depth=0)


def test_datum_copies_validation_and_stats():
    [datum] = execution_datums(make_node(), 1.0, trajectory_id="t")
    moved = datum.with_advantage(-2.0).with_weight(0.5)
    assert (moved.advantage, moved.weight, moved.tokens) == (-2.0, 0.5, datum.tokens)
    assert datum.advantage == 1.0  # frozen: copies, not edits
    with pytest.raises(ValueError, match="same length"):
        Datum(tokens=(1, 2), mask=(True,), sampler_logprobs=(0.0, 0.0), advantage=0.0, depth=0,
              trajectory_id="t", node_id="n", stage="execution", steps=())
    with pytest.raises(ValueError, match="advantage must be finite"):
        datum.with_advantage(math.nan)
    stats = datum_stats([datum, moved])
    assert stats == {"count": 2, "trainable_tokens": 2 * datum.n_trainable, "total_tokens": 2 * len(datum.tokens)}
