"""Launch spans on tokens: which completion tokens cover a delegation.

The delegation stage trains only the part of a reply that launched children (sera-spec §6.2
item 5). The reply protocol finds those character spans (`sera.agents.launch_spans`); this
module maps character spans onto the sampled completion tokens.

Token-to-character mapping is computed from decoded prefixes: token i owns the characters that
`decode(ids[:i + 1])` adds, as a prefix of the full decode, beyond `decode(ids[:i])`. A byte-level
token that holds only part of a multi-byte character owns nothing (its prefix decodes to U+FFFD
there); the token whose bytes complete the character owns it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from sera.agents.launch_spans import Span, merge_spans

Decode = Callable[[Sequence[int]], str]
"""A tokenizer's decode: token ids to text."""

# Window sizes of the incremental decode: a window starts `_CONTEXT` tokens before the first
# token it assigns (so that decoders that treat the first token specially, e.g. SentencePiece's
# leading space, only do so on context), and is re-anchored once it spans `_WINDOW` tokens.
_CONTEXT = 4
_WINDOW = 16


class SpanAlignmentError(ValueError):
    """The completion text and the decoded completion tokens cannot be lined up."""


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
    merged = merge_spans([(s, e) for s, e in spans if e > s])
    span_starts = [s for s, _ in merged]
    return [_overlaps(start, end, merged, span_starts) for start, end in offsets]


def _overlaps(start: int, end: int, spans: list[Span], span_starts: list[int]) -> bool:
    """Whether [start, end) meets one of the sorted, disjoint `spans`."""
    covered_end = max(end, start + 1)  # an empty range stands for the character it begins
    i = bisect.bisect_left(span_starts, covered_end)  # spans[:i] start before the token ends
    return i > 0 and spans[i - 1][1] > start
