"""Budgets and limits of the recursive runtime (defaults as in the paper's runs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sera.runtime.policy import SamplingParams


@dataclass(frozen=True)
class RuntimeConfig:
    """Budgets and limits shared by every agent of a rollout."""

    max_calls_per_agent: int = 20
    """Policy calls each agent may make (root and child alike; children have their own)."""
    max_depth: int = 3
    """Deepest agent depth (root = 0); an agent at this depth cannot delegate."""
    policy_timeout_s: float = 1800.0
    """Limit on one policy call; a call that takes longer ends its agent with an error."""
    rollout_timeout_s: float = 3600.0
    """Limit on the whole tree; on expiry every running agent is cancelled and recorded."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """Sampling settings of every agent step."""
    max_children_per_step: int = 16
    """Children one agent step may launch (a loop of launches in one cell, a long `<delegate>`
    list); further launches of that step are refused and the agent is told why."""
    max_agents_per_tree: int = 256
    """Agents one rollout may create (counterfactual branches included); launches past it are
    refused and the agent is told why."""
    max_tree_chars: int = 32_000_000
    """Characters of replies and observations one rollout may accumulate; past it no agent makes
    another policy call (each ends with an error saying so) and launches are refused."""
    cancel_grace_s: float = 30.0
    """After the rollout timeout, how long cancelled agents may take to wind down before the
    tree is recorded anyway."""

    def child_budget(self, requested: int | None) -> int:
        """The policy calls a launched agent gets: what was asked for, within [1, max_calls_per_agent]."""
        cap = self.max_calls_per_agent
        return cap if requested is None else max(1, min(requested, cap))

    def __post_init__(self) -> None:
        if self.max_calls_per_agent < 1:
            raise ValueError(f"max_calls_per_agent must be >= 1, got {self.max_calls_per_agent}")
        if self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {self.max_depth}")
        for name in ("max_children_per_step", "max_agents_per_tree", "max_tree_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
