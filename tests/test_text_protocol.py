"""The TextWorld text protocol: one block per reply, precise errors for everything else."""

import pytest

from sera.agents.text_protocol import parse_delegations, parse_reply


def test_action_with_reasoning_keeps_the_reasoning_as_thought():
    action = parse_reply("The apple is in the garden.\n<action>go to garden</action>")
    assert (action.kind, action.tag, action.body) == ("text", "action", "go to garden")
    assert action.thought == "The apple is in the garden."


def test_finish_and_single_and_multiple_delegations():
    assert parse_reply("<finish>dish_1 is eaten</finish>").tag == "finish"
    one = parse_reply('<delegate>{"goal": "Prepare and eat dish_2", "max_steps": 12}</delegate>')
    assert one.tag == "delegate"
    assert [(g.goal, g.max_steps) for g in parse_delegations(one.body)] == [("Prepare and eat dish_2", 12)]
    many = parse_reply('<delegate>{"delegations": [{"goal": "a"}, {"goal": "b", "max_steps": 5}]}</delegate>')
    assert [(g.goal, g.max_steps) for g in parse_delegations(many.body)] == [("a", None), ("b", 5)]


def test_unclosed_final_block_is_accepted_as_a_sampler_stop():
    action = parse_reply("I go.\n<action>go to pantry")
    assert (action.kind, action.body, action.thought) == ("text", "go to pantry", "I go.")


@pytest.mark.parametrize(
    "reply, message",
    [
        ("", "the reply was empty"),
        ("go to pantry", "no <action>, <delegate> or <finish> block"),
        ("<action>a</action> <finish>b</finish>", "2 blocks (<action>, <finish>)"),
        ("<action>  </action>", "the <action> block is empty"),
        ("<action>a <finish>b", "not closed"),
        ("<delegate>{goal: x}</delegate>", "not valid JSON"),
        ("<delegate>[1]</delegate>", "expected a JSON object, got list"),
        ('<delegate>{"goal": ""}</delegate>', "non-empty string 'goal'"),
        ('<delegate>{"goal": "a", "steps": 3}</delegate>', "unknown keys ['steps']"),
        ('<delegate>{"delegations": []}</delegate>', "non-empty list"),
        ('<delegate>{"delegations": [{"goal": "a", "max_steps": true}]}</delegate>', "positive integer, got True"),
        ('<delegate>{"delegations": [{"goal": "a"}], "goal": "b"}</delegate>', "unexpected keys next to"),
        ("<delegate>" + "[" * 100_000, "not valid JSON (nested too deeply)"),
    ],
)
def test_malformed_replies_name_the_problem(reply, message):
    action = parse_reply(reply)
    assert action.kind == "invalid"
    assert message in action.parse_error
