"""Launch spans: which characters (and so which tokens) of a completion are a delegation.

The delegation stage trains only the part of a reply that launched children (sera-spec §6.2
item 5): in CodeAct, every *statement* that calls `launch_subagent`; in the text protocol, the
`<delegate>` blocks. This module finds those character spans and maps them onto the sampled
completion tokens.

Token-to-character mapping is computed from decoded prefixes: token i owns the characters that
`decode(ids[:i + 1])` adds, as a prefix of the full decode, beyond `decode(ids[:i])`. A byte-level
token that holds only part of a multi-byte character owns nothing (its prefix decodes to U+FFFD
there); the token whose bytes complete the character owns it.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Sequence

from sera.agents.codeact import PYTHON_BLOCK

Span = tuple[int, int]
Decode = Callable[[Sequence[int]], str]

LAUNCH_NAME = "launch_subagent"
"""The tool whose calls make a CodeAct statement a launch."""

_DELEGATE_BLOCK = re.compile(r"<delegate>.*?</delegate>", re.DOTALL)
_DELEGATE_OPEN = "<delegate>"
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)?")

# Window sizes of the incremental decode: a window starts `_CONTEXT` tokens before the first
# token it assigns (so that decoders that treat the first token specially, e.g. SentencePiece's
# leading space, only do so on context), and is re-anchored once it spans `_WINDOW` tokens.
_CONTEXT = 4
_WINDOW = 16


class SpanAlignmentError(ValueError):
    """The completion text and the decoded completion tokens cannot be lined up."""


# -- character spans -------------------------------------------------------------------------


def launch_statement_spans(code: str) -> list[Span]:
    """Char spans of every statement of `code` that calls `launch_subagent`, merged and sorted.

    The span is the innermost statement enclosing the call (a call in a `for` body gives that
    body statement; a call in the loop header gives the whole loop). Code that does not parse
    gives the whole code if it mentions `launch_subagent` (an invalid launch attempt), else [].
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: e.g. null bytes on older Pythons
        return [(0, len(code))] if LAUNCH_NAME in code else []
    line_starts = _line_starts(code)
    spans = [
        (_char_offset(code, line_starts, stmt.lineno, stmt.col_offset),
         _char_offset(code, line_starts, stmt.end_lineno, stmt.end_col_offset))
        for stmt in _launching_statements(tree)
    ]
    return _merge(spans)


def codeact_launch_spans(completion_text: str) -> list[Span]:
    """Launch statement spans of a CodeAct reply, as offsets into the whole completion text.

    The `<python>` body is found as `sera.agents.codeact` finds it (an unclosed final block
    counts; the body is stripped of surrounding newlines). A reply with several blocks is an
    invalid action, but it is still an attempt to launch, so every block is searched.
    """
    spans: list[Span] = []
    for match in PYTHON_BLOCK.finditer(completion_text):
        raw = match.group(1)
        code = raw.strip("\n")
        start = match.start(1) + (len(raw) - len(raw.lstrip("\n")))
        spans.extend((start + s, start + e) for s, e in launch_statement_spans(code))
    return _merge(spans)


def delegate_block_spans(completion_text: str) -> list[Span]:
    """Spans of `<delegate>...</delegate>` blocks (tags included), plus one unclosed final
    `<delegate>` block running to the end of the text (the sampler drops the closing tag)."""
    spans = [m.span() for m in _DELEGATE_BLOCK.finditer(completion_text)]
    tail_from = spans[-1][1] if spans else 0
    unclosed = completion_text.find(_DELEGATE_OPEN, tail_from)
    if unclosed >= 0:
        spans.append((unclosed, len(completion_text)))
    return spans


def _launching_statements(tree: ast.AST) -> list[ast.stmt]:
    """The innermost statement around each `launch_subagent(...)` / `x.launch_subagent(...)` call."""
    found: list[ast.stmt] = []

    def visit(node: ast.AST, enclosing: ast.stmt | None) -> None:
        if isinstance(node, ast.stmt):
            enclosing = node
        if isinstance(node, ast.Call) and _is_launch(node.func) and enclosing is not None:
            found.append(enclosing)
        for child in ast.iter_child_nodes(node):
            visit(child, enclosing)

    visit(tree, None)
    return found


def _is_launch(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == LAUNCH_NAME) or (
        isinstance(func, ast.Attribute) and func.attr == LAUNCH_NAME
    )


def _line_starts(code: str) -> list[int]:
    """Char offset of each line start, splitting lines as Python's tokenizer does (\\r\\n, \\r, \\n)."""
    starts = [m.start() for m in _LINE.finditer(code)]
    return starts or [0]


def _char_offset(code: str, line_starts: list[int], lineno: int | None, byte_col: int | None) -> int:
    """Char offset of an ast position: `col_offset` counts UTF-8 bytes, not characters."""
    if lineno is None or byte_col is None:
        raise ValueError("an ast statement has no position; cannot locate its span")
    start = line_starts[lineno - 1]
    end = line_starts[lineno] if lineno < len(line_starts) else len(code)
    line_bytes = code[start:end].encode("utf-8")
    return start + len(line_bytes[:byte_col].decode("utf-8"))


def _merge(spans: list[Span]) -> list[Span]:
    """Sorted spans with overlapping or touching ones merged."""
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


# -- tokens ----------------------------------------------------------------------------------


def token_char_offsets(token_ids: Sequence[int], decode: Decode) -> list[Span]:
    """The (start, end) char range each token owns within `decode(token_ids)`.

    Ranges are contiguous, non-decreasing and cover the whole decode; a token that only starts
    a multi-byte character has an empty range at that character. Cost: about n decodes of at most
    `_WINDOW` tokens (an incremental decode checked against the full one); when the decoder is not
    local enough for that (a window's text is not a slice of the full text), about n decodes of
    whole prefixes, which give the same answer by definition.
    """
    ids = list(token_ids)
    full = decode(ids)
    ends = _prefix_ends_windowed(ids, full, decode)
    if ends is None:
        ends = _prefix_ends_exact(ids, full, decode)
    starts = [0, *ends[:-1]]
    return list(zip(starts, ends))


def _common_prefix_len(text: str, full: str, at: int) -> int:
    """Length of the common prefix of `text` and `full[at:]`."""
    if full.startswith(text, at):
        return len(text)
    n = 0
    for a, b in zip(text, full[at:at + len(text)]):
        if a != b:
            break
        n += 1
    return n


def _prefix_ends_windowed(ids: list[int], full: str, decode: Decode) -> list[int] | None:
    """End char of each prefix `ids[:k+1]` within `full`, from short decode windows; None when a
    window disagrees with `full` in a way only whole-prefix decodes can settle."""
    ends: list[int] = []
    anchor, anchor_char, done = 0, 0, 0  # window start token, its char in `full`, chars owned so far
    for k in range(len(ids)):
        window_text = decode(ids[anchor:k + 1])
        stable = anchor_char + _common_prefix_len(window_text, full, anchor_char)
        if stable < done:
            return None  # the decoded text shrank: not a prefix-monotone decoder
        done = stable
        ends.append(done)
        clean = stable == anchor_char + len(window_text)
        if clean and k + 1 - anchor >= _WINDOW:
            new_anchor = k + 1 - _CONTEXT
            context = decode(ids[new_anchor:k + 1])
            new_char = done - len(context)
            if new_char >= 0 and full.startswith(context, new_char):
                anchor, anchor_char = new_anchor, new_char
    if ids and ends[-1] != len(full):
        return None
    return ends


def _prefix_ends_exact(ids: list[int], full: str, decode: Decode) -> list[int]:
    """End char of each prefix from whole-prefix decodes (made non-decreasing from the right:
    a character counts as owned only once every longer prefix keeps it)."""
    ends = [_common_prefix_len(decode(ids[:k + 1]), full, 0) for k in range(len(ids))]
    if ends:
        ends[-1] = len(full)
    for k in range(len(ends) - 2, -1, -1):
        ends[k] = min(ends[k], ends[k + 1])
    return ends


def token_mask_for_spans(
    token_ids: Sequence[int], text: str, spans: Sequence[Span], decode: Decode
) -> list[bool]:
    """True for each token whose char range overlaps a span of `text`.

    `text` is the completion text the spans index; it must line up with `decode(token_ids)`:
    equal, or one a prefix of the other (samplers cut the stop sequence from the text while the
    tokens hold it; some re-append it). A token with an empty range (its bytes start a character
    that a later token completes, or a special token that decodes to nothing) counts as covering
    the character at its position. Raises SpanAlignmentError when the texts disagree or a span
    lies beyond what the tokens decode to.
    """
    ids = list(token_ids)
    decoded = decode(ids)
    if not (decoded.startswith(text) or text.startswith(decoded)):
        first = next(i for i, (a, b) in enumerate(zip(decoded, text)) if a != b)
        raise SpanAlignmentError(
            f"completion text ({len(text)} chars) and decoded completion tokens ({len(decoded)} chars) "
            f"differ at char {first}: text has {text[first:first + 20]!r}, tokens decode to "
            f"{decoded[first:first + 20]!r}"
        )
    limit = min(len(text), len(decoded))
    for start, end in spans:
        if not 0 <= start <= end:
            raise SpanAlignmentError(f"invalid span ({start}, {end})")
        if end > limit:
            raise SpanAlignmentError(
                f"span ({start}, {end}) lies beyond the aligned text: the completion text has {len(text)} "
                f"chars and its tokens decode to {len(decoded)} chars"
            )
    offsets = token_char_offsets(ids, decode)
    merged = _merge([(s, e) for s, e in spans if e > s])
    span_starts = [s for s, _ in merged]
    return [_overlaps(start, end, merged, span_starts) for start, end in offsets]


def _overlaps(start: int, end: int, spans: list[Span], span_starts: list[int]) -> bool:
    """Whether [start, end) meets one of the sorted, disjoint `spans`."""
    covered_end = max(end, start + 1)  # an empty range stands for the character it begins
    i = bisect.bisect_left(span_starts, covered_end)  # spans[:i] start before the token ends
    return i > 0 and spans[i - 1][1] > start
