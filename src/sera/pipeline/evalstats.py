"""What one evaluation folder says, for the report: success with its interval, and how the
agents behaved, read from `summary.json` and the saved trees.

- **success**: verified root successes over the rollouts that are model results; rollouts the
  infrastructure broke are counted apart (`infra_failures`), never as failures of the model;
  other error rollouts (e.g. a tree's own time limit) count as failures, as in `summary.json`.
- **parseable replies**: agent replies (policy calls; forced steps excluded) whose action parsed,
  over all replies, on the live trees of those rollouts;
- **tool errors**: parsed replies whose action raised an error (a failing cell, a refused tool
  call), over parsed replies;
- **agents per tree**, **delegation** (trees with at least one child), **rubric validity** (valid
  frozen rubrics over children a rubric was written for: `sera.train.step_metrics.rubric_metrics`;
  None when no rubric was written, e.g. a method without rubrics or no child launched);
- **supervision**: trees whose outcome the verifier checked, verifier label calls and judge calls
  (the trees' counters, `sera.train.step_metrics.cost_metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sera.eval.failures import classify
from sera.stats import Rate
from sera.reports.load_eval import load_eval
from sera.train.step_metrics import cost_metrics, rubric_metrics, shape_metrics
from sera.types import RolloutTree


class EvalReadError(ValueError):
    """An evaluation folder the report cannot read; the message is one line naming it."""


@dataclass(frozen=True)
class EvalStats:
    """One evaluation, as the report shows it."""

    rollouts: int
    """Rollouts of the set (tasks × samples)."""
    infra_failures: int
    """Rollouts the infrastructure broke: not model results, not in `success.n`."""
    errors: int
    """Other error rollouts (the model's outcome; counted as failures)."""
    success: Rate
    """Verified successes over the rollouts that are model results."""
    replies: Rate
    """Parseable replies over agent replies."""
    tool_errors: Rate
    """Parsed replies whose action raised an error, over parsed replies."""
    agents_per_tree: float | None
    """Mean live agents per tree (None without trees)."""
    delegation: Rate
    """Trees with at least one child over trees."""
    rubrics: Rate | None
    """Valid frozen rubrics over children a rubric was written for; None when none was written."""
    trees: int
    """Trees read (each root outcome checked by the verifier)."""
    verifier_calls: int
    """Verifier label calls spent (counterfactual labels; 0 in a plain evaluation)."""
    judge_calls: int
    """External judge calls spent."""
    wall_s: float
    """Wall seconds of the harness's last invocation (`summary.json`)."""
    outcomes: dict[str, bool]
    """Verified success per rollout that is a model result, keyed `task_id#sample` (the sample's
    order among that task's rollouts): what a paired comparison of two evaluations reads."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = value.to_json() if isinstance(value, Rate) else value
        return out


def reply_counts(trees: list[RolloutTree]) -> tuple[int, int, int]:
    """`(replies, parseable, parseable with an error)` over the live agents' policy calls."""
    replies = parsed = errors = 0
    for tree in trees:
        for node in tree.live_nodes().values():
            for step in node.steps:
                if step.forced is not None:
                    continue
                replies += 1
                if step.action.kind != "invalid":
                    parsed += 1
                    errors += step.error is not None
    return replies, parsed, errors


def read_trees(directory: Path) -> list[RolloutTree]:
    """Every tree under `rollouts/` that is a model result (infrastructure failures left out)."""
    trees = []
    for path in sorted((directory / "rollouts").glob("*/*.json")):
        try:
            tree = RolloutTree.from_json(path.read_bytes())
        except (ValueError, OSError) as exc:
            raise EvalReadError(f"{path}: unreadable tree ({str(exc).splitlines()[0]})") from None
        problem = classify(tree)
        if problem is None or not problem.infra:
            trees.append(tree)
    return trees


def eval_stats(directory: Path) -> EvalStats:
    """The statistics of the evaluation in `directory`; `EvalReadError` when it has no usable summary."""
    run, problems = load_eval(directory)
    if run is None:
        why = "; ".join(p.line() for p in problems) or "no summary.json"
        raise EvalReadError(f"{directory}: no usable evaluation ({why})")
    summary = run.summary
    trees = read_trees(directory)
    replies, parsed, errors = reply_counts(trees)
    shape, rubric, cost = shape_metrics(trees), rubric_metrics(trees), cost_metrics(trees)
    children = int(rubric["rubric/children"])
    valid = round(float(rubric.get("rubric/valid", 0.0)) * children)
    delegating = sum(any(n.parent_id is not None for n in t.live_nodes().values()) for t in trees)
    rollouts = summary.overall.tasks
    results = rollouts - summary.infra_failures
    return EvalStats(
        rollouts=rollouts, infra_failures=summary.infra_failures, errors=summary.overall.errors - summary.infra_failures,
        success=Rate.of(summary.overall.successes, results), replies=Rate.of(parsed, replies),
        tool_errors=Rate.of(errors, parsed), agents_per_tree=shape.get("agents/mean"),
        delegation=Rate.of(delegating, len(trees)), rubrics=Rate.of(valid, children) if children else None,
        trees=len(trees), verifier_calls=int(cost["calls/verifier"]), judge_calls=int(cost["calls/judge"]),
        wall_s=summary.wall_time_s, outcomes=outcomes(trees),
    )


def outcomes(trees: list[RolloutTree]) -> dict[str, bool]:
    """`task_id#sample` -> verified success, the samples of a task numbered in the trees' order."""
    seen: dict[str, int] = {}
    out = {}
    for tree in trees:
        sample = seen.get(tree.task_id, 0)
        seen[tree.task_id] = sample + 1
        out[f"{tree.task_id}#{sample}"] = bool(tree.root_success)
    return out
