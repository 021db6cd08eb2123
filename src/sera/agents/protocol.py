"""A reply protocol as one object: everything the rest of sera needs to know about how an
environment's agents write their replies.

Parsing and observations stay in `codeact` / `text_protocol`; this record names, per protocol,
the stop strings, where a reply launches children (the delegation stage's spans), what counts as
a launch attempt, the reply of an agent that gives up at once (the sabotage test kit), and how a
person's typed input becomes a reply (`sera play`). An `EnvSpec` names its protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sera.agents import codeact, text_protocol
from sera.agents.launch_spans import Span, codeact_launch_spans, delegate_block_spans

ProtocolName = Literal["codeact", "text"]


@dataclass(frozen=True)
class ReplyProtocol:
    """How the agents of one environment write replies."""

    name: ProtocolName
    """`codeact` (`<thought>` + `<python>` cells) or `text` (`<action>` / `<delegate>` / `<finish>`)."""
    stops: tuple[str, ...]
    """Stop strings of the model's sampling (each closes the reply's action block)."""
    launch_spans: Callable[[str], list[Span]]
    """Character spans of a reply that launch children: the `launch_subagent` statements of the
    code, or the `<delegate>` blocks. Nothing outside the code or the blocks counts."""
    give_up_reply: str
    """A reply that claims success at once without doing anything."""
    human_hint: str
    """What `sera play` tells a person to type."""
    wrap_human: Callable[[str], str]
    """Turns what a person typed into a reply of this protocol."""

    def is_launch_attempt(self, reply: str) -> bool:
        """True when the reply tries to launch a child (in its code or a `<delegate>` block)."""
        return bool(self.launch_spans(reply))


def _wrap_cell(typed: str) -> str:
    return f"<python>\n{typed}\n</python>"


def _wrap_text(typed: str) -> str:
    # A person may type the whole reply with its tags; a bare line is taken as one action.
    return typed if any(f"<{tag}>" in typed for tag in text_protocol.TAGS) else f"<action>{typed}</action>"


CODEACT = ReplyProtocol(
    name="codeact",
    stops=(codeact.STOP,),
    launch_spans=codeact_launch_spans,
    give_up_reply='<thought>This is already done.</thought>\n<python>finish("Done: the items are crafted.")</python>',
    human_hint="Type a Python cell; an empty line runs it (`finish('...')` ends the episode).",
    wrap_human=_wrap_cell,
)
TEXT = ReplyProtocol(
    name="text",
    stops=text_protocol.STOPS,
    launch_spans=delegate_block_spans,
    give_up_reply="The goal is complete.\n<finish>Done: the goal is complete.</finish>",
    human_hint=(
        "Type one command (e.g. `go to kitchen`), or a whole reply with <action>, <delegate> or "
        "<finish> tags; an empty line sends it."
    ),
    wrap_human=_wrap_text,
)

PROTOCOLS: dict[str, ReplyProtocol] = {p.name: p for p in (CODEACT, TEXT)}
"""The protocols by name."""
