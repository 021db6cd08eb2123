"""Launchers beyond the plain one: how a child runs when a launch happens during training or under
test-time selection, and the model calls and labels they need. They plug into the runtime's launch seam (`sera.runtime.delegation`)
and sit between `sera.rubric` / `sera.judge` below and `sera.train` above.

`frozen_rubric`: SERA's execution stage, a parent-written frozen rubric per child, scored by the
policy after the child returns. `counterfactual`: rubric training, B branches on copies of the
world, one rubric scoring all of them, each branch labelled. `rubric_calls`: who writes and who
scores a rubric (the policy, an external model, the fixed global rubric). `best_of_n`: test-time
selection, N candidates on copies of the world, one frozen rubric scoring all, the best
committed, bottom-up (`sera eval --best-of N`). `labels`: verified
(TextCraft) or judged (TextWorld) child labels and what they cost. The plain launcher, which
evaluation uses, is the runtime's own (`sera.runtime.delegation.PlainLauncher`).
"""

from sera.launchers.best_of_n import BestOf, BestOfNLauncher, best_of_launcher
from sera.launchers.counterfactual import CounterfactualLauncher
from sera.launchers.frozen_rubric import FrozenRubricLauncher
from sera.launchers.labels import JudgeLabeler, Label, Labeler, VerifierLabeler, judge_children

__all__ = [
    "BestOf",
    "BestOfNLauncher",
    "CounterfactualLauncher",
    "FrozenRubricLauncher",
    "JudgeLabeler",
    "Label",
    "Labeler",
    "VerifierLabeler",
    "best_of_launcher",
    "judge_children",
]
