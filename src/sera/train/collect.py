"""Collect one training rollout for a stage: the right launcher, then the labels credit needs.

| stage / method              | launcher                                  | after the rollout            |
|-----------------------------|-------------------------------------------|------------------------------|
| execution, RAO              | plain                                     | judge every child (TextWorld)|
| execution, SERA             | frozen rubric per child, policy score     | -                            |
| delegation                  | plain                                     | -                            |
| rubric_generation           | B counterfactual branches, <= 16 copies   | (labels collected inside)    |
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sera.envs.registry import EnvSpec
from sera.rubric import REFERENCE, STRICT
from sera.runtime.config import RuntimeConfig
from sera.launchers.counterfactual import CounterfactualLauncher
from sera.launchers.frozen_rubric import FrozenRubricLauncher
from sera.launchers.labels import JudgeLabeler, Labeler, VerifierLabeler, judge_children
from sera.launchers.rubric_calls import (
    SCORE_SAMPLING,
    WRITE_SAMPLING,
    ExternalRubricScorer,
    ExternalRubricWriter,
    GlobalRubricWriter,
    PolicyRubricScorer,
    PolicyRubricWriter,
    RubricScorer,
    RubricWriter,
)
from sera.runtime.delegation import EnvFactory, Launcher, PlainLauncher
from sera.runtime.policy import Policy, SamplingParams
from sera.runtime.rollout import run_rollout
from sera.train.method import Method
from sera.train.schedule import Stage
from sera.types import RolloutTree, Task


@dataclass(frozen=True)
class Collector:
    """Everything a training rollout needs besides the task: policy, method, environment, judge."""

    policy: Policy
    """The policy being trained: agents, rubric writer and scorer."""
    method: Method
    """Credit rules and schedule."""
    env: EnvSpec
    """The environment (its credit settings, reply protocol and global rubric)."""
    runtime: RuntimeConfig
    """Budgets and sampling of agent steps."""
    judge: Any = None
    """A `sera.judge.JudgeClient`, needed for judged labels and external rubrics; None otherwise."""
    write_sampling: SamplingParams = WRITE_SAMPLING
    """How the policy samples a rubric (the paper: temperature 1, 1,024 tokens)."""
    score_sampling: SamplingParams = SCORE_SAMPLING
    """How the policy samples a score in execution (the paper: temperature 0, 1,024 tokens)."""
    score_max_tokens_rt: int | None = None
    """The scorer's completion cap in rubric training; None: the environment's (1,024 / 512)."""

    def __post_init__(self) -> None:
        needs_judge = [
            why
            for why, needed in (
                ("judged child labels", self.env.training.label_source == "judge"
                 and ("rubric_generation" in self.method.schedule or self.method.execution_credit == "rao")),
                ("external rubrics", self.method.rubric_writer == "external"),
                ("an external scorer", self.method.rubric_scorer == "external"),
            )
            if needed
        ]
        if needs_judge and self.judge is None:
            raise ValueError(
                f"method {self.method.name!r} needs an external judge model for {', '.join(needs_judge)}; "
                "give a JudgeClient (e.g. --judge-url/--judge-model)"
            )
        if self.method.rubric_writer == "global" and self.env.global_rubric is None:
            raise ValueError(
                f"method {self.method.name!r} scores with a global fixed rubric, and {self.env.name} has none "
                "(the paper's exists for TextCraft-Synth only, sera-spec §4.5)"
            )

    def _limits(self):
        return STRICT if self.method.rubric_limits == "strict" else REFERENCE

    def writer(self) -> RubricWriter:
        if self.method.rubric_writer == "global":
            assert self.env.global_rubric is not None  # checked when the collector was made
            return GlobalRubricWriter(self.env.global_rubric())
        if self.method.rubric_writer == "external":
            return ExternalRubricWriter(self.judge, self._limits())
        return PolicyRubricWriter(self.policy, self.write_sampling, limits=self._limits())

    def scorer(self, stage: Stage) -> RubricScorer:
        if self.method.rubric_scorer == "external":
            return ExternalRubricScorer(self.judge, self.method.score_mode)
        cap = self.score_sampling.max_tokens
        if stage == "rubric_generation":
            cap = self.score_max_tokens_rt or self.env.training.score_max_tokens_rt
        return PolicyRubricScorer(self.policy, replace(self.score_sampling, max_tokens=cap), self.method.score_mode)

    def labeler(self) -> Labeler:
        return JudgeLabeler(self.judge) if self.env.training.label_source == "judge" else VerifierLabeler()

    def launcher(self, stage: Stage) -> Launcher:
        """A fresh launcher for one root rollout of `stage`."""
        if stage == "rubric_generation":
            # The rubric stage trains the policy's rubric writing, whatever writes rubrics elsewhere.
            return CounterfactualLauncher(
                PolicyRubricWriter(self.policy, self.write_sampling, limits=self._limits()),
                self.scorer(stage), self.labeler(),
                branches=self.method.branches, max_envs=self.method.max_fork_envs,
            )
        if stage == "execution" and self.method.execution_credit == "rubric":
            return FrozenRubricLauncher(self.writer(), self.scorer(stage))
        return PlainLauncher()

    async def collect(
        self, task: Task, make_root_env: EnvFactory, stage: Stage, *, seed: int | None = None, policy_version: int = 0
    ) -> RolloutTree:
        """Run one root rollout of `task` for `stage` and attach the labels its credit needs."""
        tree = await run_rollout(
            task, self.policy, make_root_env, self.runtime,
            seed=seed, policy_version=policy_version, launcher=self.launcher(stage),
        )
        if stage == "execution" and self.method.execution_credit == "rao" and self.env.training.label_source == "judge":
            await judge_children(tree, self.labeler())  # counts its calls and tokens in the tree
        return tree

