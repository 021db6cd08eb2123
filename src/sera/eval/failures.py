"""Why a rollout counts as an error, and whether that is the infrastructure's fault.

A model failure (a wrong answer, an exhausted budget, invalid replies) is a result, not an
error. An error is a rollout whose root could not be judged fairly; each has a `kind`:

| kind | where it is read from | infra |
|---|---|---|
| a `SamplerError` kind (`endpoint_down`, `server_error`, `timeout`, `bad_response`, `missing_token_ids`, `invalid_request`) | root `error`: `policy call failed: SamplerError: <kind>: ...` | yes |
| `prompt_too_long` | the same | no: the model's own turns outgrew the context |
| `policy_timeout` | root `error`: `policy call timed out ...` (the runtime's per-call limit) | yes |
| `policy_error` | root `error`: `policy call failed: <other exception>` | yes |
| `sandbox_isolation` | a `WeakIsolationError` (no `--unsafe-sandbox`) anywhere in the root's failure | yes |
| `root_env` | tree `error`: `the root environment failed: ...` | yes |
| `agent_crashed` | root `error`: `agent crashed: ...` (the environment raised) | yes |
| `launcher_timeout` | tree `error`: `finishing the launcher's pending work timed out ...` | yes |
| `rollout_timeout` | tree `error`: `rollout timed out ...` | no: the tree's own wall-time budget |
| `rollout_error` | any other tree `error` | no |
| `judge_endpoint` | a best-of-N group's external judge call (`--selector judge`) failed at the endpoint after the client's retries (down, 5xx, timeout): `ModelCall.error` `<role> call failed: ...` | yes |
| `judge_invalid` | such a call was answered, but unusably (not JSON, an invalid rubric or score) | yes |
| `crashed` | `run_rollout` raised (traceback in `<k>.error.txt`) | yes |
| `save_failed` | the tree could not be written | yes |
| `not_run` | no tree and no failure was recorded (the summary's fallback; should not happen) | yes |

Infrastructure failures are retried when the evaluation is rerun and count towards
`--max-infra-failures`; the others are final, like model failures, but still counted as errors.

The two `judge_*` kinds are **judge errors** (`JUDGE_KINDS`): the candidate was committed without
the judge's choice, so the tree is not a best-of-N result, whatever its outcome. They are checked
after the root's own failures (a dead policy server is named first) and win over a final tree
error, so the rollout is retried. Only test-time `best_of` groups are read: a counterfactual
group's unlabelled branch is training data, handled by the credit rules.
"""

from __future__ import annotations

import re

from sera.policy.errors import SAMPLER_ERROR_KINDS
from sera.text_safety import clean_text
from sera.types import Record, RolloutTree

NOT_INFRA_KINDS: frozenset[str] = frozenset({"prompt_too_long", "rollout_timeout", "rollout_error"})
"""Error kinds that are final: retrying would fail the same way."""
JUDGE_KINDS: frozenset[str] = frozenset({"judge_endpoint", "judge_invalid"})
"""Error kinds of an external judge that failed inside the tree (infrastructure, not the model)."""

MESSAGE_CHARS = 300
"""Longest failure message kept in a summary (the first line of the recorded error)."""

_SAMPLER_FAILURE = re.compile(r"policy call failed: \w+: (\w+): ")
_JUDGE_CALL_FAILED = re.compile(r"\w+ call failed: ")  # `JudgeClient`: the endpoint, not the reply
_WEAK_ISOLATION = "WeakIsolationError: "


class Failure(Record):
    """Why one rollout is counted as an error."""

    kind: str
    """What failed (see the module's table)."""
    infra: bool
    """The infrastructure's fault (server, sandbox, harness), not the model's: retried on rerun."""
    message: str
    """One line saying what happened."""


def failure(kind: str, message: str) -> Failure:
    """A `Failure` of `kind`, its message cut to its first line."""
    return Failure(kind=kind, infra=kind not in NOT_INFRA_KINDS, message=one_line(message))


def one_line(text: str) -> str:
    """The first non-empty line of `text`, JSON-safe, at most `MESSAGE_CHARS` characters."""
    text, _ = clean_text(text)
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."


def classify(tree: RolloutTree) -> Failure | None:
    """The tree's error, or None when its outcome is the model's (success or failure)."""
    found = _classify_root(tree)
    if found is not None and found.infra:
        return found
    return judge_failure(tree) or found


def judge_failure(tree: RolloutTree) -> Failure | None:
    """The first failed external judge call of the tree's best-of-N groups, or None."""
    for group in tree.fork_groups:
        if group.kind != "best_of":
            continue
        calls = [group.rubric_call, *(b.score_call for b in group.branches)]
        for call in calls:
            if call is None or not call.external or not call.error:
                continue
            kind = "judge_endpoint" if _JUDGE_CALL_FAILED.match(call.error) else "judge_invalid"
            return failure(kind, f"group {group.id} {call.role} call: {call.error}")
    return None


def _classify_root(tree: RolloutTree) -> Failure | None:
    root = tree.nodes.get(tree.root_id)
    root_error = root.error if root is not None else None
    if root_error is None and root is None:
        return failure("rollout_error", tree.error or "the tree has no root agent")
    for text in (tree.error, root_error):
        if text and _WEAK_ISOLATION in text:  # say why, in the sandbox's own words
            return failure("sandbox_isolation", text[text.index(_WEAK_ISOLATION) + len(_WEAK_ISOLATION):])
    if tree.error:
        if tree.error.startswith("the root environment failed"):
            return failure("root_env", tree.error)
        if tree.error.startswith("rollout timed out"):
            return failure("rollout_timeout", tree.error)
        if tree.error.startswith("finishing the launcher"):
            return failure("launcher_timeout", tree.error)
        return failure("rollout_error", tree.error)
    if not root_error:
        return None
    if root_error.startswith("policy call timed out"):
        return failure("policy_timeout", root_error)
    if root_error.startswith("policy call failed"):
        found = _SAMPLER_FAILURE.match(root_error)
        kind = found.group(1) if found and found.group(1) in SAMPLER_ERROR_KINDS else "policy_error"
        return failure(kind, root_error)
    if root_error.startswith("agent crashed"):
        return failure("agent_crashed", root_error)
    return None  # budget exhausted, invalid replies, ...: the model's outcome
