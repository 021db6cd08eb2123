"""The tagged text protocol of TextWorld-Sync agents (sera-spec §2.4).

A reply holds exactly one block: `<action>command</action>`, `<delegate>JSON</delegate>` or
`<finish>message</finish>`. Text outside the block is the agent's reasoning and is kept as the
action's `thought`. Delegate JSON is `{"goal": "...", "max_steps": k}` or
`{"delegations": [{"goal": ..., "max_steps": ...}, ...]}`; `max_steps` is optional. Anything
else is an invalid reply with a message that says exactly what is wrong. As in CodeAct, one
unclosed final block is accepted (a reply cut by the token cap, or from a server that drops the
stop string; our samplers keep it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sera.types import Action

TAGS = ("action", "delegate", "finish")
STOPS = ("</action>", "</delegate>", "</finish>")
"""Stop sequences for text-protocol sampling."""
_BLOCK = re.compile(r"<(action|delegate|finish)>(.*?)</\1>", re.DOTALL)
_OPEN = re.compile(r"<(action|delegate|finish)>")

FORMAT_HINT = (
    "Reply with exactly one of: <action>a valid action</action>, "
    '<delegate>{"goal": "..."}</delegate> (or {"delegations": [{"goal": "..."}, ...]}), '
    "<finish>your result</finish>."
)


@dataclass(frozen=True)
class DelegateGoal:
    """One child requested in a `<delegate>` block."""

    goal: str
    """The child's goal, as the parent wrote it."""
    max_steps: int | None
    """Requested budget of model calls (the environment caps it)."""


def parse_reply(reply: str) -> Action:
    """Parse a reply into an `Action(kind="text", tag=...)` or an invalid action."""
    blocks = _BLOCK.findall(reply)
    thought = _BLOCK.sub("", reply).strip()
    opened = _OPEN.findall(reply)
    if not blocks and len(opened) == 1:
        # A reply cut short (or a server that drops stop strings): accept one unclosed final block.
        start = _OPEN.search(reply)
        assert start is not None
        blocks = [(start.group(1), reply[start.end():])]
        thought = reply[: start.start()].strip()
    if not blocks:
        return Action(kind="invalid", thought=thought, parse_error=_missing_block_reason(reply))
    if len(blocks) > 1:
        found = ", ".join(f"<{tag}>" for tag, _ in blocks)
        return Action(
            kind="invalid",
            thought=thought,
            parse_error=f"the reply has {len(blocks)} blocks ({found}); write exactly one per reply",
        )
    tag, body = blocks[0]
    body = body.strip()
    if tag == "action" and not body:
        return Action(kind="invalid", thought=thought, parse_error="the <action> block is empty")
    if tag == "delegate":
        try:
            parse_delegations(body)
        except ValueError as exc:
            return Action(kind="invalid", thought=thought, parse_error=f"bad <delegate> block: {exc}")
    return Action(kind="text", tag=tag, thought=thought, body=body)


def parse_delegations(body: str) -> list[DelegateGoal]:
    """The children requested by a `<delegate>` body; ValueError says what is wrong."""
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # e.g. `[` repeated 100,000 times: the decoder recurses per level
        raise ValueError("not valid JSON (nested too deeply)") from None
    if not isinstance(payload, dict):
        raise ValueError(f"expected a JSON object, got {type(payload).__name__}")
    if "delegations" in payload:
        extra = set(payload) - {"delegations"}
        if extra:
            raise ValueError(f"unexpected keys next to 'delegations': {sorted(extra)}")
        items = payload["delegations"]
        if not isinstance(items, list) or not items:
            raise ValueError("'delegations' must be a non-empty list of {\"goal\": ...} objects")
    else:
        items = [payload]
    return [_one_goal(item, i) for i, item in enumerate(items)]


def _one_goal(item: object, index: int) -> DelegateGoal:
    where = f"delegation {index + 1}"
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be an object, got {type(item).__name__}")
    extra = set(item) - {"goal", "max_steps"}
    if extra:
        raise ValueError(f"{where} has unknown keys {sorted(extra)} (allowed: goal, max_steps)")
    goal = item.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise ValueError(f"{where} needs a non-empty string 'goal'")
    max_steps = item.get("max_steps")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"{where}: 'max_steps' must be a positive integer, got {max_steps!r}")
    return DelegateGoal(goal=goal.strip(), max_steps=max_steps)


def _missing_block_reason(reply: str) -> str:
    if not reply.strip():
        return "the reply was empty"
    opened = _OPEN.search(reply)
    if opened:
        return f"the <{opened.group(1)}> block is not closed with </{opened.group(1)}>"
    return "the reply has no <action>, <delegate> or <finish> block"
