"""A deliberately unreliable scripted policy, so that counterfactual groups have mixed outcomes.

A scripted oracle is deterministic: its B counterfactual children all succeed, every group is
homogeneous and rubric training has nothing to rank. `SabotagedPolicy` makes a seeded fraction
of agents give up on their first call (they finish at once, claiming success), which is the
classic failure a rubric must catch: a confident report with no work behind it. Used by tests
and benchmarks to exercise credit on realistic mixed groups; never for evaluation.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from sera.agents.protocol import PROTOCOLS
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.types import Message, Usage

def is_root_agent(messages: list[Message]) -> bool:
    """True for the root agent's conversation in the built-in environments."""
    return any("delegation depth 0" in m.content for m in messages[:2])


class SabotagedPolicy:
    """`inner`, except that each agent gives up on its first call with probability `rate`.

    With `spare_root` the root agent (recognised by `is_root`, default: its prompt says it is at
    delegation depth 0, as both environments' prompts do) is never sabotaged, so only delegated
    work fails. Decisions come from one seeded RNG in
    call order, so a run is reproducible when the call order is.
    """

    def __init__(
        self,
        inner: Policy,
        *,
        rate: float,
        seed: int,
        protocol: str,
        is_root: Callable[[list[Message]], bool] | None = None,
        spare_root: bool = True,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {sorted(PROTOCOLS)}, got {protocol!r}")
        self.inner = inner
        self.rate = rate
        self.reply = PROTOCOLS[protocol].give_up_reply
        self.is_root = (is_root or is_root_agent) if spare_root else None
        self._rng = random.Random(seed)

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        first_call = sum(1 for m in messages if m.role == "assistant") == 0
        spare = self.is_root is not None and self.is_root(messages)
        if first_call and not spare and self._rng.random() < self.rate:
            return Completion(text=self.reply, finish_reason="stop", usage=Usage(completion_tokens=len(self.reply.split())))
        return await self.inner(messages, sampling)
