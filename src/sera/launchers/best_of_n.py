"""Best-of-N at test time (sera-spec §8.3, the paper's Table 4): one more launcher.

At each delegation that can fork, the world is copied and N candidate children run
concurrently from the same state with the same goal, each on its own copy. Candidates, and
every agent they launch, sample at temperature 1 (the root keeps the evaluation's temperature);
each candidate gets its own seed, derived from the rollout's seed, the group and its index, so
seeded samplers do not return N copies of one trajectory. A delegation inside a candidate goes
through this launcher again, so selection is bottom-up: a candidate's subtree is already the
best of its own children when it is scored.

Which candidate is committed is the selector's choice:

- `self`: the policy writes one rubric from the delegation point (temperature 0) when the
  launch happens, concurrently with the candidates; the rubric is frozen; once all candidates
  have ended, the policy scores each with it (temperature 0); the highest valid score wins,
  ties go to the first; no valid rubric or no valid score commits the first;
- `judge`: the same, with an external OpenAI-compatible model writing and scoring
  (`sera.judge.JudgeClient` behind `ExternalRubricWriter` / `ExternalRubricScorer`);
- `first` and `random` (seeded by the rollout's seed and the group): controls that run the same
  candidates and choose without looking at them.

The committed candidate's changes are merged into the parent's world exactly as the
counterfactual launcher commits its branch (`ForkableWorld.merge`); the others leave no trace in
the world or in the live tree (`RolloutTree.live_nodes`), though they stay in the record. The
parent sees the committed candidate's ordinary result and nothing about the selection.

Forks are capped per root rollout: a group reserves N candidates of the cap (default 32, nested
groups included); a launch that would pass it runs as one plain child, counted
(`best_of_skipped_cap`) and noted on the parent's `bounds_hit`. Parallel launches of one step
fork concurrently and merge their changes (the reference resolved them one after another).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from sera.counters import Counter
from sera.launchers.counterfactual import state_digest
from sera.launchers.frozen_rubric import count_rubric, count_score, rubric_context
from sera.launchers.rubric_calls import (
    ExternalRubricScorer,
    ExternalRubricWriter,
    PolicyRubricScorer,
    PolicyRubricWriter,
    RubricScorer,
    RubricWriter,
    ScoredChild,
    WrittenRubric,
)
from sera.runtime.delegation import ChildRequest, ChildResult, ChildRunner, Launcher, NodeHandle, PlainLauncher
from sera.runtime.policy import Policy, SamplingParams
from sera.types import ForkBranch, ForkGroup, ModelCall

Selector = Literal["self", "judge", "first", "random"]
"""How the committed candidate is chosen."""
SELECTORS: tuple[str, ...] = get_args(Selector)
RUBRIC_SELECTORS = ("self", "judge")
"""Selectors that write and score a rubric (the others look at no candidate)."""

DEFAULT_MAX_FORKS = 32
"""Candidates one root rollout may run (the reference's task-wide fork cap)."""
CANDIDATE_TEMPERATURE = 1.0
"""Sampling temperature of candidates and everything they launch (the paper's)."""
WRITE_SAMPLING = SamplingParams(temperature=0.0, max_tokens=1024, logprobs=False)
"""Rubric writing at test time: greedy, 1,024 tokens (sera-spec §8.3 item 2)."""
SCORE_SAMPLING = SamplingParams(temperature=0.0, max_tokens=512, logprobs=False)
"""Candidate scoring at test time: greedy, 512 tokens (sera-spec §8.3 item 4)."""


@dataclass(frozen=True)
class BestOf:
    """The settings of best-of-N selection (what an evaluation records in its fingerprint)."""

    n: int
    """Candidates per delegation (the paper: 2). At least 2; N = 1 is a plain evaluation."""
    selector: Selector = "self"
    """What chooses the committed candidate."""
    max_forks: int = DEFAULT_MAX_FORKS
    """Candidates one root rollout may run, nested ones included."""
    temperature: float = CANDIDATE_TEMPERATURE
    """Sampling temperature of candidates and their descendants."""
    judge_model: str | None = None
    """The external model of the `judge` selector (recorded; the client is passed separately)."""

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ValueError(f"best-of-N needs N >= 2 candidates (N = 1 is a plain evaluation), got {self.n}")
        if self.selector not in SELECTORS:
            raise ValueError(f"unknown selector {self.selector!r}; known: {', '.join(SELECTORS)}")
        if self.max_forks < 0:
            raise ValueError(f"max_forks must be >= 0, got {self.max_forks}")
        if self.temperature < 0:
            raise ValueError(f"the candidates' temperature must be >= 0, got {self.temperature}")

    def record(self) -> dict[str, Any]:
        """The settings as plain data (run fingerprint, summary)."""
        out: dict[str, Any] = {"n": self.n, "selector": self.selector, "max_forks": self.max_forks,
                               "temperature": self.temperature}
        if self.selector == "judge":
            out["judge_model"] = self.judge_model
        return out


@dataclass(frozen=True)
class Choice:
    """The committed candidate and why (`reason` starts with its kind: `best:`, `tie:`, ...)."""

    index: int
    reason: str


def pick_best(scores: list[float | None]) -> Choice:
    """The highest valid score; ties to the lowest index; no valid score: the first candidate."""
    valid = [(s, i) for i, s in enumerate(scores) if s is not None]
    if not valid:
        return Choice(0, "no_valid_score: no candidate got a valid score; the first is committed")
    top = max(s for s, _ in valid)
    tied = [i for s, i in valid if s == top]
    shown = ", ".join("invalid" if s is None else f"{s:.3f}" for s in scores)
    if len(tied) > 1:
        return Choice(tied[0], f"tie: candidates {tied} share the best score {top:.3f} ({shown}); the first is committed")
    return Choice(tied[0], f"best: candidate {tied[0]} has the best score {top:.3f} ({shown})")


def candidate_seed(seed: int, group_id: str, index: int) -> int:
    """A candidate's sampling seed: distinct per (rollout seed, group, index), stable across runs."""
    digest = hashlib.sha256(f"best_of:{seed}:{group_id}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


class BestOfNLauncher:
    """Runs N candidates per delegation on copies of the world and commits the selected one.

    One instance serves one root rollout at a time (the fork cap is per rollout); `seed` drives
    the `random` selector and, with the rollout's sampling seed, the candidates' seeds.
    """

    def __init__(
        self,
        settings: BestOf,
        writer: RubricWriter | None = None,
        scorer: RubricScorer | None = None,
        *,
        seed: int | None = None,
        fallback: Launcher | None = None,
    ) -> None:
        if settings.selector in RUBRIC_SELECTORS and (writer is None or scorer is None):
            raise ValueError(f"the {settings.selector!r} selector needs a rubric writer and a scorer")
        self.settings = settings
        self.writer, self.scorer = writer, scorer
        self.seed = seed
        self.fallback = fallback or PlainLauncher()
        self.forks = 0
        """Candidates run so far in the current rollout."""
        self._runner: ChildRunner | None = None

    def start(self, runner: ChildRunner) -> None:
        if self._runner is not None:
            raise RuntimeError("a BestOfNLauncher caps the forks of one root rollout at a time; make one per rollout")
        self._runner = runner
        self.forks = 0
        self.fallback.start(runner)

    async def finish(self, runner: ChildRunner) -> None:
        self._runner = None
        await self.fallback.finish(runner)

    async def launch(self, runner: ChildRunner, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        fork, n = request.fork, self.settings.n
        if fork is None:  # the environment cannot copy its world here
            return await self.fallback.launch(runner, parent, request)
        if self.forks + n > self.settings.max_forks:
            runner.count(Counter.BEST_OF_SKIPPED_CAP)
            parent.node.bounds_hit.append(
                f"best-of-{n}: the fork cap of {self.settings.max_forks} candidates per task was reached; "
                "this launch ran as one child"
            )
            return await self.fallback.launch(runner, parent, request)
        self.forks += n
        group = runner.add_fork_group(ForkGroup(
            id="",
            parent_id=parent.node.id,
            parent_step=len(parent.node.steps),
            child_goal=request.goal,
            state_digest=state_digest(fork.world),
            parent_depth=parent.depth,
            initial_state=fork.observe(),
            kind="best_of",
            selector=self.settings.selector,
            temperature=self.settings.temperature,
        ))
        writing = None
        if self.writer is not None and self.settings.selector in RUBRIC_SELECTORS:
            writing = asyncio.create_task(self.writer.write(rubric_context(runner, parent, request)))
        base = fork.world.clone()
        copies = [fork.world.clone() for _ in range(n)]
        runner.count(Counter.WORLD_CLONES, n + 1)
        runner.count(Counter.BEST_OF_GROUPS)
        runner.count(Counter.BEST_OF_CANDIDATES, n)
        try:
            results = await asyncio.gather(*(
                runner.run_child(parent, request.goal, fork.env_on(copy), request.budget,
                                 branch=(group.id, b), sampling=self._sampling(runner, group.id, b))
                for b, copy in enumerate(copies)
            ))
            group.branches = [ForkBranch(index=b, node_id=r.node_id) for b, r in enumerate(results)]
            choice = await self._choose(runner, group, writing)
        except BaseException:
            if writing is not None:
                writing.cancel()
            group.selection = group.selection or "cancelled: the rollout ended before a candidate was committed"
            raise
        group.committed_branch, group.selection = choice.index, choice.reason
        group.merge_conflicts = fork.world.merge(copies[choice.index], base)
        return results[choice.index]

    def _sampling(self, runner: ChildRunner, group_id: str, index: int) -> SamplingParams:
        base = runner.config.sampling
        seed = None if base.seed is None else candidate_seed(base.seed, group_id, index)
        return replace(base, temperature=self.settings.temperature, seed=seed)

    async def _choose(self, runner: ChildRunner, group: ForkGroup, writing: asyncio.Task[WrittenRubric] | None) -> Choice:
        selector, n = self.settings.selector, len(group.branches)
        if selector == "first":
            return Choice(0, "first: the control commits the first candidate")
        if selector == "random":
            index = random.Random(f"best_of:{self.seed}:{group.id}").randrange(n)
            return Choice(index, f"random: the control drew candidate {index} (seed {self.seed})")
        assert writing is not None and self.scorer is not None
        try:
            return await self._score(runner, group, writing, self.scorer)
        except Exception as exc:  # a bug, not model output: keep the reason, commit the first
            runner.count(Counter.RUBRIC_PIPELINE_ERRORS)
            return Choice(0, f"error: selection failed ({type(exc).__name__}: {exc}); the first is committed")

    async def _score(self, runner: ChildRunner, group: ForkGroup, writing: asyncio.Task[WrittenRubric],
                     scorer: RubricScorer) -> Choice:
        written = await writing
        _count_written(runner, written)
        group.rubric_call = written.call
        if written.rubric is None:
            group.rubric_error = written.error
            return Choice(0, f"no_rubric: {written.error or 'no rubric was written'}; the first is committed")
        frozen = written.rubric
        group.rubric, group.rubric_hash = frozen.to_dict(), frozen.hash()
        scored = await asyncio.gather(*(scorer.score(frozen, runner.node(b.node_id)) for b in group.branches))
        for branch, one in zip(group.branches, scored):
            _count_scored(runner, one)
            branch.rubric_score, branch.score_call = one.score, one.call
        return pick_best([one.score for one in scored])


def _count_external(runner: ChildRunner, call: ModelCall) -> None:
    runner.count(Counter.JUDGE_CALLS)
    runner.count(Counter.JUDGE_PROMPT_TOKENS, call.usage.prompt_tokens)
    runner.count(Counter.JUDGE_COMPLETION_TOKENS, call.usage.completion_tokens)


def _count_written(runner: ChildRunner, written: WrittenRubric) -> None:
    """Policy rubric calls as `rubric_*`; an external model's as judge calls (plus `rubric_invalid`)."""
    if written.call is not None and written.call.external:
        _count_external(runner, written.call)
        if written.rubric is None:
            runner.count(Counter.RUBRIC_INVALID)
    else:
        count_rubric(runner, written)


def _count_scored(runner: ChildRunner, scored: ScoredChild) -> None:
    """Policy scoring calls as `score_*`; an external model's as judge calls (plus `score_invalid`)."""
    if scored.call is not None and scored.call.external:
        _count_external(runner, scored.call)
        if scored.score is None:
            runner.count(Counter.SCORE_INVALID)
    else:
        count_score(runner, scored)


def best_of_launcher(
    settings: BestOf,
    policy: Policy | None = None,
    *,
    judge: Any = None,
    seed: int | None = None,
    write_sampling: SamplingParams = WRITE_SAMPLING,
    score_sampling: SamplingParams = SCORE_SAMPLING,
) -> BestOfNLauncher:
    """A fresh launcher for one rollout: `self` needs the `policy` (it writes and scores), `judge`
    a `sera.judge.JudgeClient`; `first` and `random` need neither."""
    if settings.selector == "self":
        if policy is None:
            raise ValueError("the 'self' selector needs the policy: it writes and scores the rubric")
        return BestOfNLauncher(settings, PolicyRubricWriter(policy, write_sampling),
                               PolicyRubricScorer(policy, score_sampling), seed=seed)
    if settings.selector == "judge":
        if judge is None:
            raise ValueError("the 'judge' selector needs an external judge model (a JudgeClient)")
        return BestOfNLauncher(settings, ExternalRubricWriter(judge), ExternalRubricScorer(judge), seed=seed)
    return BestOfNLauncher(settings, seed=seed)
