"""The one counter system: every usage counter a rollout records, declared here by name.

A rollout's counters (`RolloutTree.counters`) are the record of what it cost; anything wider (an
evaluation's summary, a training step, a whole run) is the sum of its trees' counters
(`sum_counters`). Code counts through `Rollout.count` / `NodeHandle.count`, which refuse a name
that is not a `Counter`, so a misspelt counter is an error and this list is complete.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum


class Counter(StrEnum):
    """Names of the usage counters of one rollout (the value is the key in `RolloutTree.counters`)."""

    # The runtime
    AGENTS = "agents"
    """Agent nodes created (root, children, counterfactual branches)."""
    POLICY_CALLS = "policy_calls"
    """Agent steps: policy calls made by agents (rubric writing and scoring excluded)."""
    PROMPT_TOKENS = "prompt_tokens"
    """Prompt tokens of agent steps."""
    COMPLETION_TOKENS = "completion_tokens"
    """Completion tokens of agent steps."""
    LAUNCHES_REFUSED = "launches_refused"
    """Launches the runtime refused because a bound was reached (children per step, agents per
    tree, tree size); each is also recorded on the launching node's `bounds_hit`."""
    # Environments
    CELLS = "cells"
    """CodeAct cells run in the sandbox (TextCraft)."""
    TOOL_CALLS = "tool_calls"
    """Tool calls made from cells (TextCraft)."""
    WORLD_ACTIONS = "world_actions"
    """Actions taken in the shared world (TextWorld)."""
    # Rubrics (SERA)
    RUBRIC_CALLS = "rubric_calls"
    """Rubric-writing model calls."""
    RUBRIC_COMPLETION_TOKENS = "rubric_completion_tokens"
    """Completion tokens of rubric-writing calls."""
    RUBRIC_INVALID = "rubric_invalid"
    """Rubrics that could not be used (unparseable, out of the schema, or no reply)."""
    SCORE_CALLS = "score_calls"
    """Rubric-scoring model calls."""
    SCORE_COMPLETION_TOKENS = "score_completion_tokens"
    """Completion tokens of rubric-scoring calls."""
    SCORE_INVALID = "score_invalid"
    """Scores that could not be used."""
    RUBRIC_PIPELINE_ERRORS = "rubric_pipeline_errors"
    """Rubric writing, scoring or labelling that failed with an exception (a bug, not model output)."""
    # Counterfactual branches and supervision
    FORK_GROUPS = "fork_groups"
    """Counterfactual groups run."""
    FORK_GROUPS_SKIPPED_BUDGET = "fork_groups_skipped_budget"
    """Launches that could have forked but ran plainly because the copy budget was spent."""
    WORLD_CLONES = "world_clones"
    """World copies made (branch copies and merge bases)."""
    JUDGE_CALLS = "judge_calls"
    """External judge verdicts asked for (cache hits included)."""
    JUDGE_PROMPT_TOKENS = "judge_prompt_tokens"
    """Prompt tokens the judge was sent (cache hits cost none)."""
    JUDGE_COMPLETION_TOKENS = "judge_completion_tokens"
    """Completion tokens the judge answered with (cache hits cost none)."""
    VERIFIER_CALLS = "verifier_calls"
    """Programmatic verifier checks spent as training labels (free supervision)."""
    # Best-of-N at test time
    BEST_OF_GROUPS = "best_of_groups"
    """Delegations resolved by best-of-N selection (each ran N candidates on copies of the world)."""
    BEST_OF_CANDIDATES = "best_of_candidates"
    """Candidate subtrees run by best-of-N selection (N per group, nested ones included)."""
    BEST_OF_SKIPPED_CAP = "best_of_skipped_cap"
    """Launches that ran as one plain child because the task's best-of-N fork cap was reached."""
    # Evaluation
    SANITIZED_STRINGS = "sanitized_strings"
    """Strings of a tree that had unsafe characters (lone surrogates, NUL, control bytes) escaped
    so the tree could be saved as JSON (set by the evaluation harness when it saves)."""


def check_counter(name: str) -> Counter:
    """`name` as a `Counter`; a clear error for a name that is not declared."""
    try:
        return Counter(name)
    except ValueError:
        raise ValueError(f"unknown counter {name!r}; declare it in sera.counters.Counter") from None


def sum_counters(counters: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The sum of several trees' counters, by name, sorted (a step's or a run's aggregate)."""
    total: dict[str, int] = {}
    for one in counters:
        for name, value in one.items():
            total[name] = total.get(name, 0) + value
    return dict(sorted(total.items()))
