"""Wilson intervals against known values, and the report's wording rule on constructed inputs:
a change is claimed only when the 95% intervals do not overlap or the paired exact test on the
same tasks gives p < 0.05."""

from __future__ import annotations

import math

import pytest

from sera.pipeline.summary import Facts, summary_sentences
from sera.reports.wording import compare, describe_nll, describe_success
from sera.stats import PairedChange, Rate, wilson_interval


@pytest.mark.parametrize(("k", "n", "low", "high"), [
    (0, 4, 0.0, 0.4899),      # z² / (n + z²): 0/4 is "0-49%", not "0%"
    (1, 4, 0.0456, 0.6994),   # trainer-design §3.11: "1/4 ≈ 5-70%"
    (5, 10, 0.2366, 0.7634),
    (8, 10, 0.4902, 0.9433),
    (81, 263, 0.2553, 0.3662),  # the textbook example (Wikipedia, binomial proportion CI)
    (16, 16, 0.8064, 1.0),
])
def test_wilson_interval_known_values(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=5e-5) and hi == pytest.approx(high, abs=5e-5)


def test_wilson_closed_forms_and_bad_input() -> None:
    z2 = 1.959963984540054 ** 2
    for n in (1, 3, 50):
        assert wilson_interval(0, n) == (0.0, pytest.approx(z2 / (n + z2)))
        assert wilson_interval(n, n) == (pytest.approx(n / (n + z2)), 1.0)
    lo, hi = wilson_interval(3, 7)
    assert math.isclose(lo + hi, 2 * (3 / 7 + z2 / 14) / (1 + z2 / 7))  # symmetric about the Wilson centre
    for k, n in ((0, 0), (5, 4), (-1, 4)):
        with pytest.raises(ValueError):
            wilson_interval(k, n)
    assert Rate.of(0, 0).low is None and Rate.of(0, 0).share is None


def test_zero_solved_is_worded_with_its_interval() -> None:
    assert describe_success(Rate.of(0, 4)) == "not solved on this set (0/4; 95% CI 0–49%)"
    assert describe_success(Rate.of(1, 4)) == "1/4 solved (25%; 95% CI 5–70%)"
    assert describe_success(Rate.of(0, 0)) == "no rollout was evaluated"


def test_overlapping_intervals_claim_no_change() -> None:
    # 0/4 -> 2/4 looks like a rise, but 0-49% and 15-85% overlap: no claim.
    line = compare("Success", "before SFT", Rate.of(0, 4), "after SFT", Rate.of(2, 4))
    assert "no measurable change at this sample size" in line
    assert "rose" not in line and "fell" not in line and "improv" not in line
    # Equal counts overlap as well.
    assert "no measurable change" in compare("Success", "a", Rate.of(3, 8), "b", Rate.of(3, 8))


def test_separated_intervals_claim_the_direction() -> None:
    rose = compare("Parseable replies", "before SFT", Rate.of(0, 16), "after SFT", Rate.of(16, 16))
    assert rose.startswith("Parseable replies rose from 0/16 before SFT to 16/16 after SFT")
    assert "do not overlap" in rose and "no measurable" not in rose
    fell = compare("Success", "after SFT", Rate.of(19, 20), "after RL", Rate.of(2, 20))
    assert fell.startswith("Success fell from 19/20") and "do not overlap" in fell
    assert "cannot be compared" in compare("Success", "a", Rate.of(0, 0), "b", Rate.of(1, 2))


@pytest.mark.parametrize(("gained", "lost", "p"), [
    (0, 0, 1.0), (3, 3, 1.0), (5, 0, 0.0625), (6, 0, 0.03125), (8, 0, 0.0078125),
    (9, 2, 0.0654296875),  # 2 * P(Bin(11, 1/2) <= 2) = 2 * 67 / 2048
])
def test_paired_exact_test_known_values(gained: int, lost: int, p: float) -> None:
    assert PairedChange(gained, lost, 32).p_value == pytest.approx(p)


def test_paired_change_counts_only_tasks_evaluated_both_times() -> None:
    before = {"a#0": False, "b#0": True, "c#0": False, "d#0": True}
    after = {"a#0": True, "b#0": False, "c#0": True, "e#0": True}
    assert PairedChange.of(before, after) == PairedChange(gained=2, lost=1, paired=3)


def test_a_paired_test_can_claim_what_overlapping_intervals_cannot() -> None:
    before, after = Rate.of(18, 32), Rate.of(26, 32)
    assert before.overlaps(after)  # 40-72% and 64-91%
    rose = compare("Success", "after SFT", before, "after RL", after, PairedChange(8, 0, 32))
    assert rose.startswith("Success rose from 18/32 after SFT to 26/32 after RL")
    assert "8 gained, 0 lost, p = 0.00781" in rose and "overlap" in rose
    # The same totals with gains and losses mixed: the test cannot tell, and nothing is claimed.
    mixed = compare("Success", "after SFT", before, "after RL", after, PairedChange(11, 3, 32))
    assert "no measurable change" in mixed and "p = 0.0574" in mixed and "rose" not in mixed
    fell = compare("Success", "a", after, "b", before, PairedChange(0, 8, 32))
    assert fell.startswith("Success fell from 26/32 a to 18/32 b")


def test_boundary_touching_intervals_count_as_overlap() -> None:
    a, b = Rate(k=0, n=4, low=0.0, high=0.5), Rate(k=2, n=4, low=0.5, high=0.9)
    assert a.overlaps(b) and "no measurable change" in compare("Success", "a", a, "b", b)


def test_summary_sentences_follow_the_numbers() -> None:
    facts = Facts(success={"before SFT": Rate.of(0, 4), "after SFT": Rate.of(0, 4), "after RL": Rate.of(1, 4)},
                  valid_replies={"before SFT": Rate.of(0, 16), "after SFT": Rate.of(16, 16)},
                  nll=[1.41, 0.095, 0.033], rl_status="done", rl_steps=2, rl_updates=0, rl_stopped_by="deadline",
                  infra_failures=1, tasks=4)
    text = "\n".join(summary_sentences(facts))
    assert "Success before SFT: not solved on this set (0/4; 95% CI 0–49%)." in text
    assert text.count("no measurable change at this sample size") == 2  # 0/4 -> 0/4 -> 1/4
    assert "Parseable replies rose from 0/16 before SFT to 16/16 after SFT" in text
    assert "Held-out NLL on the expert's demonstrations fell (1.410 → 0.095 → 0.033" in text
    assert "RL made 0 optimizer update(s) in 2 step(s) (stopped by the time budget)" in text
    assert "measured the starting weights again" in text
    assert "1 evaluation rollout(s) failed for infrastructure reasons" in text
    assert "same 4 held-out tasks" in text
    for word in ("improved", "learned", "better", "worse"):
        assert word not in text
    assert describe_nll([2.0]) == "Held-out NLL was not measured after any epoch."
    assert "rose" in describe_nll([1.0, 1.5])


def test_rl_is_described_by_its_status() -> None:
    failed = summary_sentences(Facts(rl_status="failed", rl_note="TrainError: 5 consecutive steps skipped",
                                     rl_steps=5, rl_updates=0))
    assert failed == ["RL failed after 0 optimizer update(s) in 5 step(s) (TrainError: 5 consecutive steps skipped); "
                      "there is no evaluation after RL."]
    skipped = summary_sentences(Facts(rl_status="skipped", rl_note="pipeline.rl is false"))
    assert skipped == ["RL did not run (pipeline.rl is false)."]
    killed = summary_sentences(Facts(rl_status="interrupted", rl_steps=3, rl_updates=2))
    assert killed == ["RL did not finish (2 optimizer update(s) in 3 step(s) so far); rerun the job to resume it."]
    # No evaluation after RL: nothing said about what it measured.
    done = summary_sentences(Facts(rl_status="done", rl_steps=1, rl_updates=0))
    assert done == ["RL made 0 optimizer update(s) in 1 step(s)."]
    quiet = summary_sentences(Facts(rl_status="done", rl_steps=40, rl_updates=0, rl_stopped_by="no_signal"))
    assert quiet == ["RL made 0 optimizer update(s) in 40 step(s) (stopped early: too many steps in a row had nothing "
                     "to train on, as when every tree of a task gets the same reward)."]


def test_the_pre_flight_says_when_rl_will_see_no_variance_and_how_large_k_would_have_to_be() -> None:
    from sera.pipeline.summary import Facts, signal_sentences, variance_chance

    none = Facts(success={"before SFT": Rate.of(0, 32), "after SFT": Rate.of(0, 32)}, trees_per_task=4)
    (line,) = signal_sentences(none)
    assert line.startswith("Pre-flight: none of the 32 evaluated rollouts succeeded after SFT")
    high = Rate.of(0, 32).high
    needed = next(n for n in range(2, 100) if variance_chance(high, n) >= 0.5)
    assert needed > 4 and f"K would need to be at least {needed}" in line
    some = Facts(success={"after SFT": Rate.of(30, 32)}, trees_per_task=8)
    assert signal_sentences(some) == [f"Pre-flight: at the after SFT rate, a group of K=8 trees has both outcomes with "
                                      f"probability {100 * variance_chance(30 / 32, 8):.0f}% (RL trains only such groups)."]
    (small,) = signal_sentences(Facts(success={"after SFT": Rate.of(0, 8)}, trees_per_task=8))
    assert "K=8 gives an even chance of a mixed group only at that end" in small  # 0/8: up to 32%
    every = signal_sentences(Facts(success={"after SFT": Rate.of(8, 8)}, trees_per_task=4))
    assert every[0].startswith("Pre-flight: every one of the 8") and "lower end" in every[0]
    assert signal_sentences(Facts(success={"after SFT": Rate.of(0, 8)})) == [], "no RL, no pre-flight"
