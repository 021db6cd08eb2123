"""Strict parsing of an external model's JSON reply.

Where the JSON is looked for, in order: the whole reply; a fenced ```json (or bare ```) block;
the span from the first `{` to the last `}`. A judgement must be an object with a JSON boolean
`success` (not "yes", not 1) and a string `reason`. Anything else is an invalid reply with a
message that says exactly what was wrong, so that bad judge output can be counted and read,
never guessed at.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


class ReplyParseError(ValueError):
    """The reply holds no usable JSON object; the message says why."""


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model reply; raises `ReplyParseError` naming the problem."""
    stripped = text.strip()
    if not stripped:
        raise ReplyParseError("empty reply")
    candidates: list[str] = [stripped]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(stripped)]
    first, last = stripped.find("{"), stripped.rfind("}")
    if first != -1 and last > first:
        candidates.append(stripped[first : last + 1])
    first_error: str | None = None
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            first_error = first_error or f"{exc.msg} at character {exc.pos}"
            continue
        if isinstance(value, dict):
            return value
        first_error = first_error or f"expected a JSON object, got {type(value).__name__}"
    if "{" not in stripped:
        raise ReplyParseError(f"no JSON object in reply {stripped[:120]!r}")
    if last <= first:
        raise ReplyParseError(f"truncated JSON: an object opens but never closes in {stripped[-120:]!r}")
    raise ReplyParseError(f"malformed JSON ({first_error}) in {stripped[:120]!r}")


@dataclass(frozen=True)
class ParsedJudgement:
    """A judgement read from a reply: either `success`/`reason`, or `error`."""

    success: bool | None
    """The verdict; None when the reply was invalid."""
    reason: str | None
    """The judge's justification; None when the reply was invalid."""
    error: str | None
    """`invalid judgement: ...` when the reply was unusable; else None."""

    @property
    def valid(self) -> bool:
        """True when the reply held a well-formed judgement."""
        return self.error is None


def parse_judgement(text: str) -> ParsedJudgement:
    """Read `{"success": bool, "reason": str}` from a judge reply, strictly."""
    try:
        obj = extract_json_object(text)
    except ReplyParseError as exc:
        return ParsedJudgement(None, None, f"invalid judgement: {exc}")
    for key in ("success", "reason"):
        if key not in obj:
            return ParsedJudgement(None, None, f"invalid judgement: missing key {key!r} in {sorted(obj)}")
    success, reason = obj["success"], obj["reason"]
    if not isinstance(success, bool):
        return ParsedJudgement(
            None, None, f"invalid judgement: 'success' must be a JSON boolean, got {type(success).__name__} {success!r}"
        )
    if not isinstance(reason, str):
        return ParsedJudgement(
            None, None, f"invalid judgement: 'reason' must be a string, got {type(reason).__name__} {reason!r}"
        )
    return ParsedJudgement(success, reason, None)
