"""The report's sentences, generated from the numbers so that they never claim more than the
statistics allow.

The rule: two evaluations of the same fixed task set claim a change only when (a) their Wilson
95% intervals do not overlap (`sera.pipeline.stats.Rate`), or (b) the paired exact test on the
same tasks (`sera.pipeline.stats.PairedChange`, McNemar) gives p < 0.05; the sentence says which.
Otherwise it says the run shows no measurable change at this sample size, whatever the point
estimates. A rate of 0/n is "not solved on this set" with its interval (0/4 is 0-49%), never
"cannot solve". Held-out NLL is a single number per epoch with no interval here, so its sentence
states the direction only, and says what it measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sera.pipeline.stats import PairedChange, Rate

PAIRED_ALPHA = 0.05
"""Two-sided level of the paired exact test below which a change is claimed."""


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


@dataclass(frozen=True)
class Facts:
    """What the summary sentences are made from (all read from the run's files)."""

    success: dict[str, Rate] = field(default_factory=dict)
    """Success on the fixed set per completed evaluation, by label (`before SFT`, `after SFT`,
    `after RL`), in the order they ran; infrastructure failures are not in n."""
    paired: dict[tuple[str, str], PairedChange] = field(default_factory=dict)
    """Task-by-task comparison of consecutive evaluations, keyed by their two labels."""
    valid_replies: dict[str, Rate] = field(default_factory=dict)
    """Parseable replies per completed evaluation, same labels."""
    nll: list[float] = field(default_factory=list)
    """Held-out NLL before SFT and after each epoch (empty without SFT)."""
    rl_status: str | None = None
    """The RL phase's status (`done`, `failed`, `interrupted`, `skipped`, ...); None: no RL phase recorded."""
    rl_note: str | None = None
    """Its one-line error, or why it was skipped."""
    rl_steps: int | None = None
    """RL rounds recorded (None: no RL run on disk)."""
    rl_updates: int | None = None
    """RL optimizer updates recorded (None: no RL run on disk)."""
    rl_stopped_by: str | None = None
    """Why a finished RL stopped before `steps.max_steps` (`deadline`, or `no_signal`: too many
    steps in a row had nothing to train on), or None."""
    infra_failures: int = 0
    """Evaluation rollouts lost to the infrastructure (not model results)."""
    tasks: int | None = None
    """Tasks of the fixed evaluation set."""
    trees_per_task: int | None = None
    """RL's group size K (None: no RL configured): the pre-flight reads it."""


def summary_sentences(facts: Facts) -> list[str]:
    """The report's summary: each evaluation's success, each consecutive pair compared, the
    reply format, the held-out NLL, what RL did, infrastructure losses and the sample size."""
    out = [f"Success {label}: {describe_success(rate)}." for label, rate in facts.success.items()]
    labels = list(facts.success)
    for a, b in zip(labels, labels[1:]):
        out.append(compare("Success", a, facts.success[a], b, facts.success[b], facts.paired.get((a, b))))
    replies = list(facts.valid_replies)
    for a, b in zip(replies, replies[1:]):
        out.append(compare("Parseable replies", a, facts.valid_replies[a], b, facts.valid_replies[b]))
    if facts.nll:
        out.append(describe_nll(facts.nll))
    out += signal_sentences(facts)
    out += rl_sentences(facts)
    if facts.infra_failures:
        out.append(f"{facts.infra_failures} evaluation rollout(s) failed for infrastructure reasons; they are "
                   f"reported apart and not counted as model results.")
    if facts.tasks is not None:
        out.append(f"Each evaluation is one greedy rollout on each of the same {facts.tasks} held-out tasks; "
                   f"a change is claimed only where the 95% intervals separate or the paired exact test "
                   f"gives p < {PAIRED_ALPHA}.")
    return out


def variance_chance(p: float, k: int) -> float:
    """Probability that a group of `k` trees at success rate `p` has both outcomes (a learning signal)."""
    return 1.0 - p ** k - (1.0 - p) ** k


def signal_sentences(facts: Facts) -> list[str]:
    """The pre-flight: RL starts from the last evaluation before it (after SFT, else before
    SFT); at 0 successes its groups of K trees would see no variance. Says how large K would
    have to be for an even chance of a mixed group if the true rate were the interval's upper end."""
    k = facts.trees_per_task
    start = facts.success.get("after SFT") or facts.success.get("before SFT")
    if k is None or start is None or start.n == 0 or start.high is None:
        return []
    label = "after SFT" if "after SFT" in facts.success else "before SFT"
    if 0 < start.k < start.n:
        chance = variance_chance(start.k / start.n, k)
        return [f"Pre-flight: at the {label} rate, a group of K={k} trees has both outcomes with probability "
                f"{100 * chance:.0f}% (RL trains only such groups)."]
    which, bound = ("none", start.high) if start.k == 0 else ("every one", 1.0 - (start.low or 0.0))
    needed = next((n for n in range(2, 4097) if 1.0 - (1.0 - bound) ** n - bound ** n >= 0.5), None)
    if needed is not None and needed <= k:
        grow = f"K={k} gives an even chance of a mixed group only at that end"
    else:
        grow = (f"K would need to be at least {needed}" if needed else "no K up to 4096 would do") + " for an even chance of a mixed group"
    return [f"Pre-flight: {which} of the {start.n} evaluated tasks succeeded {label}, so RL's groups of K={k} trees "
            f"will likely all get the same reward and make no update; even at the interval's "
            f"{'upper' if start.k == 0 else 'lower'} end ({100 * (bound if start.k == 0 else 1 - bound):.0f}%), "
            f"{grow}."]


def rl_sentences(facts: Facts) -> list[str]:
    """What RL did, by the phase's status (a failed or unfinished RL is never described as done)."""
    done = f"{facts.rl_updates} optimizer update(s) in {facts.rl_steps} step(s)" if facts.rl_updates is not None else None
    if facts.rl_status == "skipped":
        return [f"RL did not run ({facts.rl_note})."]
    if facts.rl_status == "failed":
        return ["RL failed" + (f" after {done}" if done else "") + f" ({facts.rl_note}); there is no evaluation after RL."]
    if facts.rl_status in ("interrupted", "running"):
        return ["RL did not finish" + (f" ({done} so far)" if done else "") + "; rerun the job to resume it."]
    if facts.rl_status != "done" or done is None:
        return []
    stop = {"deadline": " (stopped by the time budget)",
            "no_signal": " (stopped early: too many steps in a row had nothing to train on, as when every tree"
                         " of a task gets the same reward)"}.get(facts.rl_stopped_by or "", "")
    line = f"RL made {done}{stop}"
    if facts.rl_updates == 0 and "after RL" in facts.success:
        line += "; the evaluation after RL measured the starting weights again"
    return [line + "."]
