"""Make untrusted text safe to store as JSON and to show in a terminal.

Shared by the sandbox (cell output, tool arguments) and evaluation (rollout trees before they
are saved). Such text is untrusted: lone surrogates (`chr(0xd800)`) break UTF-8 encoders and
JSON consumers, and control characters (NUL, ESC of ANSI sequences, CR, C1 controls such as
CSI 0x9b) can rewrite or hide what a terminal shows. Each one is replaced by its visible escape
(`\\x1b`, `\\ud800`), so the text still says what was printed; newline and tab stay.
"""

from __future__ import annotations

import re
from typing import Any

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_text(text: str) -> tuple[str, bool]:
    """`text` with every unsafe character escaped, and whether anything was."""
    cleaned = _UNSAFE.sub(_escape, text)
    return cleaned, cleaned != text


def clean_value(value: Any) -> tuple[Any, bool]:
    """A decoded wire value with `clean_text` applied to every string in it (keys included)."""
    if type(value) is str:
        return clean_text(value)
    if type(value) in (list, tuple, set, frozenset):
        items = [clean_value(item) for item in value]
        return type(value)(item for item, _ in items), any(changed for _, changed in items)
    if type(value) is dict:
        pairs = [(clean_value(k), clean_value(v)) for k, v in value.items()]
        return {k: v for (k, _), (v, _) in pairs}, any(a or b for (_, a), (_, b) in pairs)
    return value, False
