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

    def child_budget(self, requested: int | None) -> int:
        """The policy calls a launched agent gets: what was asked for, within [1, max_calls_per_agent]."""
        cap = self.max_calls_per_agent
        return cap if requested is None else max(1, min(requested, cap))

    def __post_init__(self) -> None:
        if self.max_calls_per_agent < 1:
            raise ValueError(f"max_calls_per_agent must be >= 1, got {self.max_calls_per_agent}")
        if self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {self.max_depth}")
