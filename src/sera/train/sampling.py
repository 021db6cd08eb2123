"""The loop's side of sampling: per-tree seeded, versioned policies, and a count of calls in flight.

Every tree gets a seed from (run seed, step, task id, k), and each of its model calls a seed from
the tree seed, the prompt and how often that prompt came before in the tree, so neither the
order in which concurrent agents call nor a resume changes what is sampled. Each completion is
stamped with the policy version whose weights produced it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sera.eval.seeds import sample_seed
from sera.policy.errors import SamplerError
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.types import Message, Task

TreePolicy = Callable[[Policy, Task, int], Policy]
"""`(sampler policy, task, k) -> the policy of tree k of the task`; the default returns the
sampler. A seam for tests (e.g. a scripted expert on some trees, so a random model's groups have
mixed outcomes), never for the paper's runs."""


def default_tree_policy(policy: Policy, task: Task, k: int) -> Policy:
    """Every tree samples from the model being trained."""
    return policy


class InFlight:
    """Counts policy calls in flight, so the loop can check the sampler is idle while training."""

    def __init__(self) -> None:
        self.count = 0
        """Calls started and not yet returned."""
        self.calls = 0
        """Calls made so far."""
        self.failures: dict[str, int] = {}
        """Calls that raised so far, by `SamplerError` kind (`policy_error` for any other exception)."""


class SeededPolicy:
    """A tree's policy: seeded calls (see the module docstring), counted in `InFlight`, stamped
    with `version`."""

    def __init__(self, inner: Policy, tree_seed: int, inflight: InFlight, version: int) -> None:
        self.inner = inner
        self.tree_seed = tree_seed
        self.inflight = inflight
        self.version = version
        self._seen: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:  # max_positions, chat_ids, ... of the sampler
        return getattr(self.inner, name)

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        key = hashlib.sha256(json.dumps([[m.role, m.content] for m in messages]).encode()).hexdigest()
        n = self._seen.get(key, 0)
        self._seen[key] = n + 1
        seed = sample_seed(self.tree_seed, key, n)
        self.inflight.count += 1
        self.inflight.calls += 1
        try:
            completion = await self.inner(messages, replace(sampling, seed=seed))
        except Exception as exc:  # counted for the loop's infrastructure check (`sera.train.infra`)
            kind = exc.kind if isinstance(exc, SamplerError) else "policy_error"
            self.inflight.failures[kind] = self.inflight.failures.get(kind, 0) + 1
            raise
        finally:
            self.inflight.count -= 1
        return replace(completion, policy_version=self.version)
