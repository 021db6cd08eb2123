"""The parts of an `EvalJob` that need checking or building before a run: shard, HTTP settings,
trained weights, best-of-N and its judge. Bad input raises `EvalSetupError` with one line that
names the option, as `sera eval` prints it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from sera.eval.errors import EvalSetupError

if TYPE_CHECKING:
    from sera.eval.shards import ShardSpec
    from sera.launchers.best_of_n import BestOf
    from sera.policy.checkpoint_model import CheckpointSource
    from sera.policy.openai_http import HttpSettings
    from sera.runtime.delegation import Launcher


def shard_spec(text: str | None, runs: int | None, new_run: bool) -> ShardSpec | None:
    """`shard` ("i/n") parsed, `runs` checked."""
    from sera.eval.shards import ShardError, ShardSpec

    if runs is not None and runs < 1:
        raise EvalSetupError(f"--runs {runs}: give at least one run (--runs 3 repeats the evaluation with three seeds)")
    if new_run and (runs is not None or text is not None):
        raise EvalSetupError("--new-run applies to a single run; give --runs or --shard another --out instead")
    if text is None:
        return None
    try:
        return ShardSpec.parse(text)
    except ShardError as exc:
        raise EvalSetupError(str(exc)) from None


def http_settings(connect: float | None, request: float | None, total: float | None, retries: int | None) -> HttpSettings:
    """`HttpSettings` with the given timeouts and retries (the defaults find a hung server within
    `total_timeout_s`, 5 minutes, and report it as `timeout`)."""
    from sera.policy.openai_http import HttpSettings

    given = {"connect_timeout_s": connect, "request_timeout_s": request, "total_timeout_s": total, "max_retries": retries}
    try:
        return replace(HttpSettings(), **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise EvalSetupError(f"--connect-timeout, --request-timeout, --total-timeout, --max-retries: {exc}") from None


def checkpoint(model: str) -> CheckpointSource | None:
    """`model` as trained weights (a `sera train` checkpoint, an adapter), validated; None for a
    plain model."""
    from sera.policy.checkpoint_model import CheckpointModelError, resolve

    try:
        return resolve(model)
    except CheckpointModelError as exc:
        raise EvalSetupError(str(exc)) from None


def best_of(n: int, selector: str, max_forks: int, policy: str, judge_url: str | None, judge_model: str | None,
            log: Callable[[str], None]) -> BestOf | None:
    """Best-of-N settings (None for N = 1)."""
    from sera.launchers.best_of_n import SELECTORS, BestOf

    if n < 1:
        raise EvalSetupError(f"--best-of must be at least 1 (1 evaluates without selection; the paper's best-of uses 2), got {n}")
    if selector not in SELECTORS:
        raise EvalSetupError(f"unknown --selector {selector!r}; known: {', '.join(SELECTORS)}")
    if n == 1:
        return None
    if selector == "self" and policy == "oracle":
        raise EvalSetupError("--best-of with --selector self needs a policy that writes and scores rubrics; the oracle is a "
                             "script with no model: use --policy hf or openai, or --selector judge, first or random")
    if selector == "judge" and not (judge_url and judge_model):
        raise EvalSetupError("--selector judge needs the external model's endpoint: --judge-url URL and --judge-model NAME")
    if policy == "oracle":
        log(f"note: the oracle is deterministic, so its {n} candidates per delegation are identical")
    return BestOf(n=n, selector=selector, max_forks=max_forks, judge_model=judge_model if selector == "judge" else None)  # type: ignore[arg-type]


def judge(best: BestOf | None, url: str | None, api_key_env: str) -> object:
    """The external model of selector judge (greedy), or None."""
    if best is None or best.selector != "judge":
        return None
    from sera.judge import JudgeClient

    assert url is not None and best.judge_model is not None  # checked by best_of
    return JudgeClient(url, best.judge_model, api_key=os.environ.get(api_key_env, "EMPTY"), temperature=0.0)


def best_of_launcher(best: BestOf | None, policy: object, judge: object) -> Callable[[int], Launcher] | None:
    """A fresh best-of-N launcher per rollout (seeded by it), or None for plain children."""
    if best is None:
        return None
    from sera.launchers.best_of_n import SCORE_SAMPLING, WRITE_SAMPLING, best_of_launcher
    from sera.policy.factory import fit_sampling

    write, score = fit_sampling(WRITE_SAMPLING, policy), fit_sampling(SCORE_SAMPLING, policy)  # type: ignore[arg-type]
    return lambda seed: best_of_launcher(best, policy, judge=judge, seed=seed,  # type: ignore[arg-type]
                                         write_sampling=write, score_sampling=score)
