"""The progress display: plain lines off a terminal, one live line redrawn on a terminal."""

from __future__ import annotations

import io

from sera.train.progress import Progress, format_duration

STEPS = [
    {"step": 0, "policy_version": 0, "stage": "execution", "trained": True, "success": 0.5, "time/step": 2.0,
     "tokens/policy/completion": 1000, "tokens/act/completion": 1},
    {"step": 1, "policy_version": 1, "stage": "delegation", "trained": False, "root_success": 0.25, "time/step": 2.0,
     "tokens/act/completion": 300},
    {"step": 2, "policy_version": 1, "stage": "delegation", "trained": True, "success": 1.0, "time/step": 4.0},
]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal():
    stream = io.StringIO()
    with Progress(4, stream) as progress:
        assert not progress.interactive
        for record in STEPS:
            progress.update(record)
        progress.log("a message")
    assert stream.getvalue().splitlines() == [
        # ETA = versions left x mean seconds per update so far (skipped rounds count): 3 x 2, 3 x 4, 2 x 4
        "step 0 | v1/4 | execution | success 0.50 | 500 tok/s | ETA 0:06",
        "step 1 | v1/4 | delegation (skipped) | success 0.25 | 150 tok/s | ETA 0:12",
        "step 2 | v2/4 | delegation | success 1.00 | ETA 0:08",
        "a message",
    ]


def test_eta_is_unknown_before_the_first_update_and_done_at_the_end():
    progress = Progress(1, io.StringIO())
    assert progress.status({"step": 0, "policy_version": 0, "stage": "execution", "trained": False}).endswith("ETA ?")
    assert progress.status({"step": 1, "policy_version": 0, "stage": "execution", "trained": True,
                            "time/step": 1.0}).endswith("ETA 0:00")
    assert format_duration(3725) == "1:02:05" and format_duration(59.6) == "1:00"


def test_a_terminal_gets_one_line_redrawn_in_place():
    stream = FakeTerminal()
    progress = Progress(4, stream)
    assert progress.interactive
    progress.update(STEPS[0])
    progress.log("checkpointed")
    progress.update(STEPS[1])
    progress.close()
    progress.close()  # idempotent
    text = stream.getvalue()
    assert "\x1b[" in text and "\r" in text  # cursor control: the line is rewritten, not appended
    assert "checkpointed\n" in text
    assert text.count("\n") <= 3  # no line per step: the message and the final line only
    final = text.rsplit("\r\x1b[2K", 1)[-1]
    assert final.startswith("step 1 | v1/4 | delegation (skipped) | success 0.25")
    assert progress.last_line.startswith("step 1 |")
