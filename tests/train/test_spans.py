"""Launch spans and the token/character mapping behind delegation masks."""

from __future__ import annotations

import pytest

from sera.testing.tiny import tiny_tokenizer
from sera.train import spans as spans_module
from sera.agents.launch_spans import codeact_launch_spans, delegate_block_spans, launch_statement_spans
from sera.train.spans import SpanAlignmentError, token_char_offsets, token_mask_for_spans

TOKENIZER = tiny_tokenizer()

GATHER = (
    'results = await asyncio.gather(launch_subagent({"goal": "craft 2 sticks"}), '
    'launch_subagent({"goal": "craft planks"}))'
)


def texts(code: str, spans: list[tuple[int, int]]) -> list[str]:
    return [code[s:e] for s, e in spans]


def encode(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False)


# -- statement spans -------------------------------------------------------------------------


def test_gather_statement_is_the_span_and_neighbours_are_not():
    code = f"inv = view_inventory()\nprint(inv)\n{GATHER}\nfor r in results:\n    print(r)\n"
    assert texts(code, launch_statement_spans(code)) == [GATHER]


def test_call_in_loop_body_gives_the_body_statement_and_attribute_calls_count():
    code = "for goal in goals:\n    out = await tools.launch_subagent(goal)\n    print(out)\n"
    assert texts(code, launch_statement_spans(code)) == ["out = await tools.launch_subagent(goal)"]


def test_call_in_loop_header_gives_the_whole_loop():
    code = "for r in await launch_subagent('x'):\n    print(r)\nprint('done')"
    assert texts(code, launch_statement_spans(code)) == ["for r in await launch_subagent('x'):\n    print(r)"]


def test_nested_launches_merge_into_the_outer_statement():
    code = "if await launch_subagent('a'):\n    b = launch_subagent('b')\nc = 1\nd = launch_subagent('d')"
    assert texts(code, launch_statement_spans(code)) == [
        "if await launch_subagent('a'):\n    b = launch_subagent('b')",
        "d = launch_subagent('d')",
    ]


def test_non_ascii_before_the_launch_on_the_same_line_uses_char_offsets():
    # ast column offsets count UTF-8 bytes: 'café ☕' is 6 chars but 9 bytes.
    code = "note = 'café ☕ 日本'; r = await launch_subagent(note)\nprint('ü', r)"
    assert texts(code, launch_statement_spans(code)) == ["r = await launch_subagent(note)"]


def test_windows_line_endings_and_lone_carriage_returns():
    code = "a = 'é'\r\nb = launch_subagent(a)\rc = 2\r\n"
    assert texts(code, launch_statement_spans(code)) == ["b = launch_subagent(a)"]


def test_syntax_error_gives_the_whole_code_only_if_it_mentions_launch():
    broken = "x = launch_subagent({'goal': 'craft'}"
    assert launch_statement_spans(broken) == [(0, len(broken))]
    assert launch_statement_spans("x = (((") == []


def test_no_call_means_no_span():
    assert launch_statement_spans("# launch_subagent later\nlaunch = launch_subagent_name\nprint(1)") == []
    assert launch_statement_spans("") == []


def test_codeact_spans_are_offsets_into_the_completion_text():
    reply = f"<thought>Split the work in two.</thought>\n<python>\n\nx = 1\n{GATHER}\nprint(results)</python>"
    assert texts(reply, codeact_launch_spans(reply)) == [GATHER]


def test_codeact_unclosed_final_block_and_syntax_error():
    reply = "<thought>go</thought>\n<python>r = launch_subagent('a'\n"  # the stop string cut '</python>'
    spans = codeact_launch_spans(reply)
    assert texts(reply, spans) == ["r = launch_subagent('a'"]
    assert codeact_launch_spans("I will call launch_subagent but wrote no code") == []


def test_delegate_blocks_including_an_unclosed_final_one():
    closed = 'Think. <delegate>{"goal": "slice the carrot"}</delegate> then'
    assert texts(closed, delegate_block_spans(closed)) == ['<delegate>{"goal": "slice the carrot"}</delegate>']
    unclosed = 'First <delegate>{"goal": "a"}</delegate> and <delegate>{"goal": "b"}'
    assert texts(unclosed, delegate_block_spans(unclosed)) == [
        '<delegate>{"goal": "a"}</delegate>',
        '<delegate>{"goal": "b"}',
    ]
    assert delegate_block_spans("<action>take knife</action>") == []


# -- token offsets -----------------------------------------------------------------------------


def test_offsets_tile_the_decoded_text():
    ids = encode(f"<thought>héllo wörld</thought>\n<python>{GATHER}</python>") + [TOKENIZER.eos_token_id]
    full = TOKENIZER.decode(ids)
    offsets = token_char_offsets(ids, TOKENIZER.decode)
    assert len(offsets) == len(ids)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(full)
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))
    assert offsets[-1] == (len(full) - len("<|im_end|>"), len(full))  # the eos token owns its text


def test_multibyte_character_split_across_byte_tokens_is_owned_by_the_completing_token():
    ids = encode("x é y")
    pieces = [TOKENIZER.decode([i]) for i in ids]
    assert "\ufffd" in pieces, "the tiny tokenizer should split 'é' into byte tokens"
    first_byte = pieces.index("\ufffd")
    offsets = token_char_offsets(ids, TOKENIZER.decode)
    full = TOKENIZER.decode(ids)
    start, end = offsets[first_byte]
    assert start == end == full.index("é")  # the lead byte owns nothing
    assert full[slice(*offsets[first_byte + 1])] == "é"  # the continuation byte completes it


def test_constructed_byte_tokens_split_a_three_byte_character():
    # A byte-level vocabulary: token i is byte i; '☕' is 3 bytes, 3 tokens.
    def decode(ids):
        return bytes(ids).decode("utf-8", errors="replace")

    ids = list("a☕b".encode())
    assert token_char_offsets(ids, decode) == [(0, 1), (1, 1), (1, 1), (1, 2), (2, 3)]


def test_windowed_and_whole_prefix_decodes_agree_on_a_long_mixed_text():
    text = "".join(f"cell {i}: ünïcödé ☕ 日本 {GATHER}\n" for i in range(12))
    ids = encode(text)
    full = TOKENIZER.decode(ids)
    windowed = spans_module._prefix_ends_windowed(ids, full, TOKENIZER.decode)
    assert windowed is not None
    assert windowed == spans_module._prefix_ends_exact(ids, full, TOKENIZER.decode)


def test_a_non_local_decoder_still_gets_exact_offsets():
    # Case alternates with the absolute position (7 chars per cycle of pieces), so a window
    # starting mid-text decodes differently from the full text: windows must not be trusted there.
    pieces = {i: p for i, p in enumerate(["ab", "cd", "e", "fg"] * 10)}

    def decode(ids):
        s = "".join(pieces[i] for i in ids)
        return "".join(c.upper() if j % 2 else c for j, c in enumerate(s))

    ids = list(range(40))
    offsets = token_char_offsets(ids, decode)
    expected, pos = [], 0
    for i in ids:
        expected.append((pos, pos + len(pieces[i])))
        pos += len(pieces[i])
    assert offsets == expected


def test_a_decoder_that_takes_back_text_falls_back_to_whole_prefixes():
    # "\b" erases the previous character: the prefix decodes are not monotone, so a character
    # belongs to the token after which every longer prefix keeps it.
    pieces = ["x", "ab", "\b", "b"]

    def decode(ids):
        out: list[str] = []
        for i in ids:
            for c in pieces[i]:
                out.pop() if c == "\b" else out.append(c)
        return "".join(out)

    assert spans_module._prefix_ends_windowed([0, 1, 2, 3], "xab", decode) is None
    assert token_char_offsets([0, 1, 2, 3], decode) == [(0, 1), (1, 2), (2, 2), (2, 3)]


def test_offsets_of_1000_tokens_take_a_linear_number_of_short_decodes():
    ids = (encode(f"<python>{GATHER}\nprint('café ☕')</python>\n") * 40)[:1000]
    assert len(ids) == 1000
    calls: list[int] = []

    def counting_decode(token_ids):
        calls.append(len(token_ids))
        return TOKENIZER.decode(token_ids)

    token_char_offsets(ids, counting_decode)
    assert len(calls) <= 2 * len(ids)
    assert sum(calls) - len(ids) <= 20 * len(ids)  # beyond the one full decode, short windows only


# -- masks -------------------------------------------------------------------------------------


def test_mask_selects_tokens_overlapping_a_span():
    text = f"x = 1\n{GATHER}\nprint(results)"
    ids = encode(text)
    [span] = launch_statement_spans(text)
    mask = token_mask_for_spans(ids, text, [span], TOKENIZER.decode)
    chosen = TOKENIZER.decode([i for i, m in zip(ids, mask) if m])
    assert GATHER in chosen and "x = 1" not in chosen and "print" not in chosen


def test_mask_takes_the_lead_byte_of_a_character_at_a_span_start():
    def decode(ids):
        return bytes(ids).decode("utf-8", errors="replace")

    ids = list("ab☕c".encode())
    assert token_mask_for_spans(ids, "ab☕c", [(2, 3)], decode) == [False, False, True, True, True, False]


def test_text_may_lack_the_stop_sequence_or_carry_a_re_appended_one():
    reply = f"<python>{GATHER}</python>"
    ids = encode(reply)
    cut = reply[: -len("</python>")]  # the sampler cut the stop string from the text, not the tokens
    spans = codeact_launch_spans(cut)
    assert token_mask_for_spans(ids, cut, spans, TOKENIZER.decode) == token_mask_for_spans(
        ids, reply, spans, TOKENIZER.decode
    )
    short_ids = encode(cut)
    mask = token_mask_for_spans(short_ids, reply, spans, TOKENIZER.decode)  # text re-appended the stop
    assert GATHER in TOKENIZER.decode([i for i, m in zip(short_ids, mask) if m])


def test_mismatched_text_is_an_alignment_error_naming_lengths_and_position():
    ids = encode("x = launch_subagent('a')")
    with pytest.raises(SpanAlignmentError, match=r"\(23 chars\).*\(24 chars\).*at char 4"):
        token_mask_for_spans(ids, "x = spawn_subagent('a')", [(0, 5)], TOKENIZER.decode)


def test_span_beyond_the_decodable_text_is_an_error():
    ids = encode("x = 1")
    with pytest.raises(SpanAlignmentError, match="beyond"):
        token_mask_for_spans(ids, "x = 1\ny = launch_subagent()", [(6, 27)], TOKENIZER.decode)
