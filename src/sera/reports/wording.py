"""How the reports put numbers in words, so that no sentence claims more than the statistics
allow. The wording rule lives here and nowhere else (`RULE`, `compare`):

Two evaluations of the same fixed task set claim a change only when (a) their Wilson 95%
intervals do not overlap (`sera.stats.Rate`), or (b) the paired exact test on the same tasks
(`sera.stats.PairedChange`, McNemar) gives p < `PAIRED_ALPHA`; the sentence says which.
Otherwise it says the run shows no measurable change at this sample size, whatever the point
estimates. A rate of 0/n is "not solved on this set" with its interval (0/4 is 0-49%), never
"cannot solve". Held-out NLL is a single number per epoch with no interval here, so its sentence
states the direction only, and says what it measures.
"""

from __future__ import annotations

from sera.stats import PairedChange, Rate

PAIRED_ALPHA = 0.05
"""Two-sided level of the paired exact test below which a change is claimed."""

RULE = (f"a change is claimed only where the 95% intervals separate or the paired exact test "
        f"gives p < {PAIRED_ALPHA}")
"""The rule in one clause, as the reports state it beside their numbers."""


def percent(x: float) -> str:
    """A share as a whole percentage (`0.4899` -> `49%`)."""
    return f"{100 * x:.0f}%"


def bounds(rate: Rate) -> str:
    """The 95% interval as `5–70%`; `no interval (n = 0)` when nothing was counted."""
    if rate.low is None or rate.high is None:
        return "no interval (n = 0)"
    return f"{100 * rate.low:.0f}–{percent(rate.high)}"


def interval(rate: Rate) -> str:
    """`95% CI 5–70%`."""
    return f"95% CI {bounds(rate)}"


def fraction(rate: Rate) -> str:
    """`k/n`."""
    return f"{rate.k}/{rate.n}"


def describe_count(rate: Rate) -> str:
    """`3/16 (19%; 95% CI 7–43%)`."""
    if rate.n == 0:
        return "0/0 (nothing counted)"
    return f"{fraction(rate)} ({percent(rate.k / rate.n)}; {interval(rate)})"


def describe_success(rate: Rate) -> str:
    """A success rate in words: `not solved on this set (0/4; 95% CI 0–49%)`, `1/4 solved (25%; 95% CI 5–70%)`."""
    if rate.n == 0:
        return "no rollout was evaluated"
    if rate.k == 0:
        return f"not solved on this set ({fraction(rate)}; {interval(rate)})"
    return f"{fraction(rate)} solved ({percent(rate.k / rate.n)}; {interval(rate)})"


def compare(quantity: str, before_label: str, before: Rate, after_label: str, after: Rate,
            paired: PairedChange | None = None) -> str:
    """One sentence comparing two rates: by the overlap of their 95% intervals, and by the paired
    exact test when the per-task outcomes of both are known (`paired`)."""
    if before.n == 0 or after.n == 0:
        return f"{quantity} {before_label} and {after_label} cannot be compared: nothing was counted in one of them."
    pair = f"{fraction(before)} {before_label} and {fraction(after)} {after_label}"
    test = (f"paired exact test on the {paired.paired} tasks evaluated both times: {paired.gained} gained, "
            f"{paired.lost} lost, p = {paired.p_value:.3g}") if paired is not None else None
    direction = "rose" if after.k / after.n > before.k / before.n else "fell"
    if not before.overlaps(after):
        return (f"{quantity} {direction} from {fraction(before)} {before_label} to {fraction(after)} {after_label} "
                f"(95% intervals {bounds(before)} and {bounds(after)} do not overlap"
                + (f"; {test})." if test else ")."))
    if paired is not None and paired.p_value < PAIRED_ALPHA and paired.gained != paired.lost:
        direction = "rose" if paired.gained > paired.lost else "fell"
        return (f"{quantity} {direction} from {fraction(before)} {before_label} to {fraction(after)} {after_label} "
                f"({test}; the 95% intervals {bounds(before)} and {bounds(after)} overlap, the paired test "
                f"uses that the tasks are the same).")
    return (f"{quantity}: {pair}; the 95% intervals ({bounds(before)}, {bounds(after)}) overlap"
            + (f" and the {test}" if test else "") + ", so this run shows no measurable change at this sample size.")


def describe_nll(values: list[float]) -> str:
    """Held-out NLL before training and after each epoch, in words (direction only)."""
    if len(values) < 2:
        return "Held-out NLL was not measured after any epoch."
    first, last = values[0], values[-1]
    trend = "fell" if last < first else "rose" if last > first else "did not change"
    path = " → ".join(f"{v:.3f}" for v in values)
    return (f"Held-out NLL on the expert's demonstrations {trend} ({path} nats/token over {len(values) - 1} "
            f"epoch(s)); it measures imitation of the demonstrations (reply format included), not task success.")
