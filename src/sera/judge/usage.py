"""What one judge client has spent, by role: calls, failures by kind, unusable replies, tokens,
cache hits.

This is the client's own diagnostic (like `OpenAISampler.stats`). The run's record of what
supervision cost is the rollout trees' counters (`sera.counters`: judge calls and tokens per
tree, summed per step), which the launchers fill from each label.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from sera.types import Usage


@dataclass
class RoleCounts:
    """Counters of one role (e.g. `judge`, `rubric`, `score`)."""

    calls: int = 0
    """Calls sent (answered, failed or unusable); cache hits excluded."""
    failed: dict[str, int] = field(default_factory=dict)
    """Calls that failed, by `SamplerError` kind (or `unexpected:<type>`)."""
    invalid_replies: int = 0
    """Answered calls whose reply could not be used (e.g. an unparseable judgement)."""
    prompt_tokens: int = 0
    """Prompt tokens of answered calls."""
    completion_tokens: int = 0
    """Completion tokens of answered calls."""
    cache_hits: int = 0
    """Calls answered from the cache: no request, no tokens."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with the failures summed and by kind."""
        return {
            "calls": self.calls,
            "failed": sum(self.failed.values()),
            "failed_by_kind": dict(sorted(self.failed.items())),
            "invalid_replies": self.invalid_replies,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cache_hits": self.cache_hits,
        }


class JudgeUsage:
    """Per-role counts of one client; safe from threads as well as from one event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roles: dict[str, RoleCounts] = {}

    def record_call(self, role: str, usage: Usage, *, invalid: bool = False) -> None:
        """One answered call of `role`, with its tokens."""
        with self._lock:
            counts = self._roles.setdefault(role, RoleCounts())
            counts.calls += 1
            counts.invalid_replies += int(invalid)
            counts.prompt_tokens += usage.prompt_tokens
            counts.completion_tokens += usage.completion_tokens

    def record_failure(self, role: str, kind: str) -> None:
        """One call of `role` that failed with `kind`."""
        with self._lock:
            counts = self._roles.setdefault(role, RoleCounts())
            counts.calls += 1
            counts.failed[kind] = counts.failed.get(kind, 0) + 1

    def record_cache_hit(self, role: str) -> None:
        """One call of `role` answered from the cache."""
        with self._lock:
            self._roles.setdefault(role, RoleCounts()).cache_hits += 1

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The counts by role, as plain JSON data."""
        with self._lock:
            return {role: counts.to_dict() for role, counts in sorted(self._roles.items())}
