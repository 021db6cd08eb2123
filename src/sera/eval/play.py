"""`play_task`: one rollout of one task with any policy (by default you, typing replies, as
`sera play` runs it), its tree saved where asked, callable from Python."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from sera.envs.registry import EnvSpec, get_env
from sera.eval.failures import Failure, classify
from sera.eval.json_safe import make_json_safe
from sera.runtime.policy import Policy
from sera.runtime.config import RuntimeConfig
from sera.types import RolloutTree, Task


@dataclass(frozen=True)
class PlayResult:
    """One played rollout."""

    tree: RolloutTree
    """The rollout tree: every agent, step and child (open it with `sera.view.write_view`)."""
    problem: Failure | None
    """The tree's error when it has one (e.g. the sandbox refused; `.infra` for the setup's
    fault, not the policy's); None when the outcome is the policy's, success or failure."""


def play_task(task: Task, env: str | EnvSpec, policy: Policy | None = None, *, out: Path | None = None,
              config: RuntimeConfig | None = None, seed: int | None = None) -> PlayResult:
    """Run `task` once in environment `env` (a name, e.g. "textcraft-synth", or its spec) with
    `policy` (None: `HumanPolicy`, replies typed on stdin); write the tree as JSON to `out` when
    given (unsafe strings escaped, as the evaluation stores it)."""
    from sera.runtime.rollout import run_rollout

    spec = get_env(env) if isinstance(env, str) else env
    if policy is None:
        from sera.policy.human import HumanPolicy

        policy = HumanPolicy(protocol=spec.protocol)
    tree = asyncio.run(run_rollout(task, policy, spec.root_env(task), config, seed=seed))
    if out is not None:
        out.write_text(make_json_safe(tree)[0].to_json(indent=2), encoding="utf-8")
    return PlayResult(tree, classify(tree))
