"""Parsing CodeAct replies and writing cell observations."""

import pytest

from sera.agents.codeact import cell_observation, invalid_observation, parse_reply


def test_thought_and_code():
    action = parse_reply("<thought>look first</thought>\n<python>print(view_inventory())</python>")
    assert action.kind == "code" and action.thought == "look first" and action.body == "print(view_inventory())"


def test_stop_sequence_cut_closing_tag_is_accepted():
    action = parse_reply("<thought>t</thought>\n<python>\nx = 1\nprint(x)\n")
    assert action.kind == "code" and action.body == "x = 1\nprint(x)"


def test_code_without_thought_is_fine():
    assert parse_reply("<python>finish('done')</python>").body == "finish('done')"


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "the reply was empty"),
        ("I will craft now.", "no <python>...</python> block"),
        ("<thought>x</thought><python></python>", "the <python> block is empty"),
        ("<python>a=1</python><python>b=2</python>", "2 <python> blocks"),
        ("<pythonx>a</pythonx>", "malformed <python> tag"),
    ],
)
def test_replies_without_one_cell_are_invalid_with_a_precise_reason(reply, problem):
    action = parse_reply(reply)
    assert action.kind == "invalid" and problem in action.parse_error
    text = invalid_observation(action)
    assert problem in text and "<python>" in text


def test_cell_observation_format():
    assert cell_observation(3, "", None) == "[Cell 3 Output]\n(No output)\n\nProvide your next action."
    text = cell_observation(1, "hi\n", "NameError: name 'x' is not defined")
    assert text.startswith("[Cell 1 Output]\nhi\nError: NameError")
