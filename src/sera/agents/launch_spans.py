"""Where a reply launches children: the character spans of its launches, per reply protocol.

CodeAct: every *statement* of the `<python>` cell that calls `launch_subagent` (the delegation
stage trains only those, sera-spec §6.2 item 5); text protocol: the `<delegate>` blocks. Text
outside the code (a thought that mentions `launch_subagent`) or outside a `<delegate>` block is
never a launch. `sera.train.spans` maps these character spans onto completion tokens.
"""

from __future__ import annotations

import ast
import re

from sera.agents.codeact import PYTHON_BLOCK

Span = tuple[int, int]
"""A [start, end) character range of a text."""

LAUNCH_NAME = "launch_subagent"
"""The tool whose calls make a CodeAct statement a launch."""

_DELEGATE_BLOCK = re.compile(r"<delegate>.*?</delegate>", re.DOTALL)
_DELEGATE_OPEN = "<delegate>"
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)?")


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
    return merge_spans(spans)


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
    return merge_spans(spans)


def delegate_block_spans(completion_text: str) -> list[Span]:
    """Spans of `<delegate>...</delegate>` blocks (tags included), plus one unclosed final
    `<delegate>` block running to the end of the text (a reply cut before its closing tag)."""
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


def merge_spans(spans: list[Span]) -> list[Span]:
    """Sorted spans with overlapping or touching ones merged."""
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
