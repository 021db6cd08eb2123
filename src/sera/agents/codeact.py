"""The CodeAct protocol: `<thought>…</thought><python>…</python>` replies, cell observations.

A reply must contain one `<python>` block; the `<thought>` block is optional. Samplers keep the
`</python>` stop string in the reply; a reply cut by the token cap (or from a server that drops
the stop string) has an unclosed final `<python>` block, which is accepted as closed.
"""

from __future__ import annotations

import re

from sera.types import Action

STOP = "</python>"
"""Stop sequence for CodeAct sampling."""

_THOUGHT = re.compile(r"<thought>(.*?)</thought>", re.DOTALL)
PYTHON_BLOCK = re.compile(r"<python>(.*?)(?:</python>|\Z)", re.DOTALL)
"""A `<python>` block; an unclosed final block runs to the end (the sampler stopped on `</python>`)."""

FORMAT_HINT = (
    "Reply with a short reasoning inside <thought></thought> followed by one code cell inside "
    "<python></python>, e.g.\n<thought>Check what I hold.</thought>\n<python>print(view_inventory())</python>"
)


def parse_reply(reply: str) -> Action:
    """Split a reply into thought and code; a reply without code is an `invalid` action."""
    thought_match = _THOUGHT.search(reply)
    thought = thought_match.group(1).strip() if thought_match else ""
    blocks = PYTHON_BLOCK.findall(reply)
    if not blocks:
        if not reply.strip():
            problem = "the reply was empty"
        elif "<python" in reply:
            problem = "the reply has a malformed <python> tag"
        else:
            problem = "the reply has no <python>...</python> block"
        return Action(kind="invalid", thought=thought, parse_error=problem)
    if len(blocks) > 1:
        return Action(
            kind="invalid",
            thought=thought,
            parse_error=f"the reply has {len(blocks)} <python> blocks; write exactly one cell per reply",
        )
    code = blocks[0].strip("\n")
    if not code.strip():
        return Action(kind="invalid", thought=thought, parse_error="the <python> block is empty")
    return Action(kind="code", thought=thought, body=code)


def cell_observation(cell_number: int, stdout: str, error: str | None) -> str:
    """The user message that reports a cell's result."""
    text = f"[Cell {cell_number} Output]\n{stdout.rstrip() if stdout.strip() else '(No output)'}"
    if error:
        text += f"\nError: {error.rstrip()}"
    return text + "\n\nProvide your next action."


def invalid_observation(action: Action) -> str:
    """The user message that reports an unparseable reply."""
    return f"Error: could not read your reply: {action.parse_error}.\n{FORMAT_HINT}\n\nProvide your next action."
