"""Infrastructure failures are never trained on.

A tree whose model call failed because of the sampler (a server down, a timeout, a reply it
could not read) says nothing about the policy: its reward would be a zero the model did not
earn. After a round is sampled, `sample_cleanly` looks for such failures:

- a policy call of the round raised a `SamplerError` of an infrastructure kind, or another
  exception (counted by `SeededPolicy` in `InFlight.failures`; `prompt_too_long` is the model's
  own: its turns outgrew the context);
- a node's recorded error is a failed or timed-out policy call of such a kind, or
  `sera.eval.failures.classify` calls the tree's error an infrastructure one.

Then the round is not credited: the backend recovers (`SamplerBackend.recover`: a vLLM backend
restarts a dead server and reloads the current adapter; the in-process one has nothing to
restart) and the round is sampled again with the same seeds. A second failure, or a backend that
cannot recover, raises `InfraFailure` (`sera.serving.errors`, one line); the loop checkpoints
what it completed and stops.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sera.eval.failures import NOT_INFRA_KINDS, classify, one_line
from sera.policy.errors import SAMPLER_ERROR_KINDS
from sera.serving.errors import InfraFailure
from sera.types import RolloutTree

_POLICY_FAILURE = re.compile(r"policy call failed: \w+: (\w+): ")
_R = TypeVar("_R")


class Recovering(Protocol):
    """What `sample_cleanly` needs from a sampler backend."""

    restarts: int
    """Server restarts done so far in this run."""

    def recover(self, reason: str) -> None:
        """Make the sampler usable again after an infrastructure failure; `InfraFailure` when it cannot."""
        ...

    def where(self) -> str:
        """Where to look when sampling fails, as a clause ("see the vLLM server log ...")."""
        ...


def node_failure_kind(error: str | None) -> str | None:
    """The failure kind of a node's recorded error when it is a failed policy call, else None."""
    if not error:
        return None
    if error.startswith("policy call timed out"):
        return "policy_timeout"
    if error.startswith("policy call failed"):
        found = _POLICY_FAILURE.match(error)
        return found.group(1) if found and found.group(1) in SAMPLER_ERROR_KINDS else "policy_error"
    return None


def tree_failures(tree: RolloutTree) -> list[str]:
    """One line per infrastructure failure recorded in `tree` (empty when there is none)."""
    lines = []
    failure = classify(tree)
    if failure is not None and failure.infra:
        lines.append(f"{tree.task_id}: {failure.kind}: {failure.message}")
    for node in tree.nodes.values():
        kind = node_failure_kind(node.error)
        if kind is not None and kind not in NOT_INFRA_KINDS and node.id != tree.root_id:
            lines.append(f"{tree.task_id} node {node.id}: {kind}: {one_line(node.error or '')}")
    return lines


def round_failures(groups: list[list[RolloutTree]], raised: Mapping[str, int]) -> list[str]:
    """The infrastructure failures of a round: its trees' (`tree_failures`) and the failed calls
    `raised` counts by kind (those of infrastructure kinds)."""
    lines = [line for trees in groups for tree in trees for line in tree_failures(tree)]
    calls = {kind: n for kind, n in raised.items() if n and kind not in NOT_INFRA_KINDS}
    if calls:
        lines.append("failed policy calls " + ", ".join(f"{kind}: {n}" for kind, n in sorted(calls.items())))
    return lines


@dataclass(frozen=True)
class CleanRound:
    """How a round got sampled without infrastructure failures."""

    resampled: int
    """Times the round was sampled again (0 or 1)."""
    restarts: int
    """Server restarts its recovery needed."""
    first_failure: str | None
    """The first failure of the discarded attempt, if any."""


def sample_cleanly(sample: Callable[[], _R], groups: Callable[[_R], list[list[RolloutTree]]],
                   failures: Callable[[], Mapping[str, int]], backend: Recovering, step: int) -> tuple[_R, CleanRound]:
    """`sample()`, and once more after `backend.recover` if the first attempt had an infrastructure
    failure; `InfraFailure` if the second one has too. `failures()` is the running count of failed
    calls by kind; `groups(result)` the round's trees."""
    result, problems = _attempt(sample, groups, failures)
    if not problems:
        return result, CleanRound(resampled=0, restarts=0, first_failure=None)
    restarts = backend.restarts
    backend.recover(problems[0])
    again, more = _attempt(sample, groups, failures)
    if more:
        raise InfraFailure(f"step {step}: sampling failed on the infrastructure twice, so the round is not trained "
                           f"({len(more)} failures, first: {more[0]}); {backend.where()}")
    return again, CleanRound(resampled=1, restarts=backend.restarts - restarts, first_failure=problems[0])


def _attempt(sample: Callable[[], _R], groups: Callable[[_R], list[list[RolloutTree]]],
             failures: Callable[[], Mapping[str, int]]) -> tuple[_R, list[str]]:
    before = dict(failures())
    result = sample()
    raised = {kind: n - before.get(kind, 0) for kind, n in failures().items()}
    return result, round_failures(groups(result), raised)


__all__ = ["CleanRound", "Recovering", "node_failure_kind", "round_failures", "sample_cleanly",
           "tree_failures"]
