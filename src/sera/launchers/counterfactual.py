"""Counterfactual collection for rubric training (sera-spec §5.1).

At a delegation point of a rubric-stage rollout the world is copied and B children (default 8)
run concurrently from the same state with the same goal, each on its own copy (their own
children share that copy). Branch 0 is committed back to the parent; the parent sees exactly
what a plain launch would have shown it: branch 0's result, no training text (the reference
appended "Selected branch: 0 ...", §11.1 item 11).

Committing merges branch 0's *changes* into the live world instead of adopting its whole state,
so parallel delegations of one step (or a sibling running meanwhile) keep their work (the
reference overwrote it, §11.1 item 5). Copies are budgeted per root rollout: the root's world
counts 1 and each group reserves B, up to `max_envs` (16: at most two groups of 8); past that,
launches run plainly. Nested delegations inside branches draw on the same budget.

One rubric per group, written from the delegation point before the branches start, scores
every branch; every branch gets a verified (TextCraft) or judged (TextWorld) label. Groups
whose rubric is invalid are not sent to an external judge.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

from sera.counters import Counter
from sera.launchers.frozen_rubric import count_rubric, count_score, rubric_context
from sera.launchers.labels import Label, Labeler, count_labels
from sera.launchers.rubric_calls import RubricScorer, RubricWriter, ScoredChild
from sera.runtime.delegation import ChildRequest, ChildResult, ChildRunner, Launcher, NodeHandle, PlainLauncher
from sera.types import ForkBranch, ForkGroup

DEFAULT_BRANCHES = 8
DEFAULT_MAX_ENVS = 16


def state_digest(world: object) -> str:
    """sha256 of a world's full state (all branches of a group must start from the same one)."""
    snapshot = world.snapshot()  # type: ignore[attr-defined]
    return hashlib.sha256(json.dumps(snapshot, sort_keys=True, default=str).encode()).hexdigest()


class CounterfactualLauncher:
    """Fork-B collection with a per-rollout copy budget (one root rollout at a time)."""

    def __init__(
        self,
        writer: RubricWriter,
        scorer: RubricScorer,
        labeler: Labeler,
        *,
        branches: int = DEFAULT_BRANCHES,
        max_envs: int = DEFAULT_MAX_ENVS,
        fallback: Launcher | None = None,
    ) -> None:
        if branches < 2:
            raise ValueError(f"branches must be >= 2 (a group ranks successes against failures), got {branches}")
        self.writer, self.scorer, self.labeler = writer, scorer, labeler
        self.branches, self.max_envs = branches, max_envs
        self.fallback = fallback or PlainLauncher()
        self.envs_created = 1  # the root's own world
        self._pending: list[tuple[ForkGroup, asyncio.Task[None]]] = []
        self._runner: ChildRunner | None = None

    def start(self, runner: ChildRunner) -> None:
        """The copy budget is per root rollout: a new rollout starts it afresh."""
        if self._runner is not None:
            raise RuntimeError("a CounterfactualLauncher budgets one root rollout at a time; make one per rollout")
        self._runner = runner
        self.envs_created = 1
        self.fallback.start(runner)

    async def launch(self, runner: ChildRunner, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        fork = request.fork
        if fork is None or self.envs_created >= self.max_envs:
            if fork is not None:
                runner.count(Counter.FORK_GROUPS_SKIPPED_BUDGET)
            return await self.fallback.launch(runner, parent, request)
        self.envs_created += self.branches  # a whole group, even past the cap (as the reference)
        group = runner.add_fork_group(ForkGroup(
            id="",
            parent_id=parent.node.id,
            parent_step=len(parent.node.steps),
            child_goal=request.goal,
            state_digest=state_digest(fork.world),
            parent_depth=parent.depth,
            initial_state=fork.observe(),
        ))
        context = rubric_context(runner, parent, request, fork_group_id=group.id, branch_index=0)
        writing = asyncio.create_task(self.writer.write(context))
        base = fork.world.clone()
        copies = [fork.world.clone() for _ in range(self.branches)]
        runner.count(Counter.WORLD_CLONES, self.branches + 1)
        runner.count(Counter.FORK_GROUPS)
        try:
            results = await asyncio.gather(
                *(
                    runner.run_child(parent, request.goal, fork.env_on(copy), request.budget, branch=(group.id, b))
                    for b, copy in enumerate(copies)
                )
            )
        except BaseException:
            writing.cancel()
            raise
        group.merge_conflicts = fork.world.merge(copies[0], base)
        group.committed_branch = 0
        group.branches = [ForkBranch(index=b, node_id=r.node_id) for b, r in enumerate(results)]
        self._pending.append((group, asyncio.create_task(self._supervise(runner, group, writing, parent.node.goal))))
        return results[0]

    async def _supervise(self, runner: ChildRunner, group: ForkGroup, writing: asyncio.Task, parent_goal: str) -> None:
        written = await writing
        count_rubric(runner, written)
        group.rubric_call = written.call
        nodes = [runner.node(b.node_id) for b in group.branches]
        if written.rubric is None:
            group.rubric_error = written.error
            if self.labeler.external:  # no rubric to train: do not spend judge calls
                for branch in group.branches:
                    branch.label_error = "not labelled: the group has no valid rubric"
                return
        else:
            group.rubric, group.rubric_hash = written.rubric.to_dict(), written.rubric.hash()
        scoring = [self.scorer.score(written.rubric, n) for n in nodes] if written.rubric else []
        labels, scores = await asyncio.gather(
            asyncio.gather(*(self.labeler.label(n, parent_goal) for n in nodes)), asyncio.gather(*scoring)
        )
        scores = scores or [None] * len(nodes)
        count_labels(runner, labels)
        for branch, label, scored in zip(group.branches, labels, scores):
            _fill(branch, label, scored)
            if scored is not None:
                count_score(runner, scored)

    async def finish(self, runner: ChildRunner) -> None:
        await self.fallback.finish(runner)
        pending, self._pending, self._runner = self._pending, [], None
        outcomes = await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
        for (group, _), outcome in zip(pending, outcomes):
            if isinstance(outcome, BaseException):  # a bug, not model output: keep the reason
                runner.count(Counter.RUBRIC_PIPELINE_ERRORS)
                group.rubric_error = f"counterfactual supervision failed: {type(outcome).__name__}: {outcome}"


def _fill(branch: ForkBranch, label: Label, scored: ScoredChild | None) -> None:
    branch.label, branch.label_source, branch.label_error = label.success, label.source, label.error
    if scored is not None:
        branch.rubric_score = scored.score
        branch.score_call = scored.call
