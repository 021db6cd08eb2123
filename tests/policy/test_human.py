"""A person as the policy: what they see is safe for a terminal, what they type becomes a reply."""

from __future__ import annotations

import asyncio

from sera.agents.protocol import CODEACT, TEXT
from sera.policy.human import HumanPolicy
from sera.runtime.policy import SamplingParams
from sera.types import Message


def play_one(protocol, typed_lines, observation):
    shown: list[str] = []
    lines = iter(typed_lines)
    policy = HumanPolicy(read_line=lambda prompt: next(lines), write=shown.append, protocol=protocol)
    messages = [Message(role="system", content="sys"), Message(role="user", content=observation)]
    return asyncio.run(policy(messages, SamplingParams())), "\n".join(shown)


def test_escape_sequences_from_cells_never_reach_the_terminal():
    hostile = "out: \x1b[2J\x1b]0;owned\x07 \x9b31m done\x00"
    completion, shown = play_one(CODEACT, ["print(1)", ""], hostile)
    assert "\x1b" not in shown and "\x9b" not in shown and "\x00" not in shown and "\x07" not in shown
    assert "\\x1b[2J" in shown and "\\x9b31m" in shown  # still visible, as text
    assert completion.text == "<python>\nprint(1)\n</python>"


def test_typed_replies_follow_the_environments_protocol():
    bare, _ = play_one(TEXT, ["go to kitchen", ""], "obs")
    tagged, _ = play_one(TEXT, ['<delegate>{"goal": "slice the carrot"}</delegate>', ""], "obs")
    assert bare.text == "<action>go to kitchen</action>"
    assert tagged.text == '<delegate>{"goal": "slice the carrot"}</delegate>'
