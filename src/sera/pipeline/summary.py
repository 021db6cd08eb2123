"""The pipeline report's summary: the facts read from a job directory (`Facts`), and the
sentences made from them. The sentences about rates go through `sera.reports.wording`, the one
place the wording rule lives; what is here is pipeline-specific: the pre-flight (will RL's groups
see any variance?) and what the RL phase did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sera.reports.wording import RULE, compare, describe_nll, describe_success
from sera.stats import PairedChange, Rate


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
    samples: int = 1
    """Rollouts per task in each evaluation."""
    base_samples: int | None = None
    """Rollouts per task before SFT when fewer than `samples` (None: the same)."""
    temperature: float = 0.0
    """Sampling temperature of the evaluations (0: greedy)."""


def eval_sampling(samples: int, temperature: float, base_samples: int | None = None) -> str:
    """How each task of the fixed set is rolled out, e.g. `4 rollouts at temperature 1 (paired by
    task and sample: the same seeds every time)` or `one greedy rollout`; `base_samples` (fewer
    rollouts before SFT) adds how that evaluation pairs."""
    if not temperature:
        return "one greedy rollout"
    each = "one rollout" if samples == 1 else f"{samples} rollouts"
    text = f"{each} at temperature {temperature:g} (paired by task and sample: the same seeds every time"
    if base_samples is not None and base_samples < samples:
        before = "one rollout" if base_samples == 1 else f"{base_samples} rollouts"
        text += f"; before SFT {before} per task, paired with the same samples after SFT"
    return text + ")"


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
        out.append(f"Each evaluation is {eval_sampling(facts.samples, facts.temperature, facts.base_samples)} on each of the same "
                   f"{facts.tasks} held-out tasks; {RULE}.")
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
    return [f"Pre-flight: {which} of the {start.n} evaluated rollouts succeeded {label}, so RL's groups of K={k} trees "
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
