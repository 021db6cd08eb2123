"""Named evaluation protocols: every setting a published result depends on, per environment.

`--protocol paper` is the paper's single-trajectory evaluation (sera-spec §8.1, §2.5): greedy
decoding (temperature 0), one trajectory per task, 20 policy calls per agent (root and child;
a child asking for more gets 20), delegation depth 3, and each environment's context, prompt and
completion caps. Errors count as failures (they always do, `sera.eval.summary`).

| | TextCraft-Synth | TextWorld-Sync |
|---|---|---|
| context / prompt / completion tokens | 10240 / 9728 / 512 | 13312 / 10240 / 3072 |
| calls per agent, depth | 20, 3 | 20, 3 |
| per-call / whole-rollout timeout | 1800 s / 3600 s | 1800 s / 3600 s (the reference has none in evaluation) |

Explicit flags override the protocol's values (`--temperature`, `--max-tokens`, `--max-calls`,
`--max-depth`, `--samples`); the prompt cap then shrinks so that prompt + completion still fit
the protocol's context. Whatever is resolved is what the run fingerprint records.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import SamplingParams


class ProtocolError(ValueError):
    """An unknown protocol, or settings the protocol cannot hold; the message is one line."""


@dataclass(frozen=True)
class EvalProtocol:
    """The settings of one protocol for one environment."""

    name: str
    """Protocol name (`paper`)."""
    temperature: float
    """Sampling temperature of every agent call."""
    samples: int
    """Trajectories per task."""
    max_calls_per_agent: int
    """Policy calls each agent may make (children get at most this)."""
    max_depth: int
    """Deepest agent depth (root = 0)."""
    context_tokens: int
    """Serving context: prompt + completion of one call must fit in it."""
    max_prompt_tokens: int
    """Prompt cap (longer prompts go through the context policy)."""
    max_tokens: int
    """Completion cap of one call."""
    policy_timeout_s: float = 1800.0
    """Limit on one policy call."""
    rollout_timeout_s: float = 3600.0
    """Limit on one whole tree."""


PROTOCOLS: dict[str, dict[str, EvalProtocol]] = {
    "paper": {
        "textcraft-synth": EvalProtocol("paper", 0.0, 1, 20, 3, context_tokens=10240, max_prompt_tokens=9728, max_tokens=512),
        "textworld-sync": EvalProtocol("paper", 0.0, 1, 20, 3, context_tokens=13312, max_prompt_tokens=10240, max_tokens=3072),
    },
}
"""Protocol name -> environment -> settings (sera-spec §8.1)."""

DEFAULT_MAX_CALLS = 20
"""Calls per agent without a protocol."""
DEFAULT_MAX_DEPTH = 3
"""Delegation depth without a protocol."""


@dataclass(frozen=True)
class EvalSettings:
    """What an evaluation runs with, after the protocol and the explicit flags."""

    config: RuntimeConfig
    """Budgets and sampling of every rollout."""
    samples: int
    """Rollouts per task."""
    protocol: str | None = None
    """The protocol asked for; None: the plain defaults."""
    context_tokens: int | None = None
    """The protocol's context (prompt + completion fit in it); None: the model's own, if known."""


def get_protocol(name: str, env: str) -> EvalProtocol:
    """The settings of protocol `name` for environment `env`; `ProtocolError` naming what is known."""
    if name not in PROTOCOLS:
        raise ProtocolError(f"unknown protocol {name!r}; known: {', '.join(sorted(PROTOCOLS))}")
    by_env = PROTOCOLS[name]
    if env not in by_env:
        raise ProtocolError(f"protocol {name!r} has no settings for {env}; it covers {', '.join(sorted(by_env))}")
    return by_env[env]


def resolve_settings(
    protocol: str | None,
    env: str,
    sampling: SamplingParams,
    *,
    temperature: float | None = None,
    max_tokens: int | None = None,
    max_calls: int | None = None,
    max_depth: int | None = None,
    samples: int | None = None,
) -> EvalSettings:
    """The settings of a run: the protocol's (or, without one, `sampling`, the environment's
    evaluation sampling, and the plain defaults), with every explicit (not None) flag on top."""
    if protocol is None:
        sampling = replace(
            sampling,
            temperature=sampling.temperature if temperature is None else temperature,
            max_tokens=sampling.max_tokens if max_tokens is None else max_tokens,
        )
        config = RuntimeConfig(
            max_calls_per_agent=DEFAULT_MAX_CALLS if max_calls is None else max_calls,
            max_depth=DEFAULT_MAX_DEPTH if max_depth is None else max_depth,
            sampling=sampling,
        )
        return EvalSettings(config=config, samples=1 if samples is None else samples)
    p = get_protocol(protocol, env)
    completion = p.max_tokens if max_tokens is None else max_tokens
    room = p.context_tokens - completion
    if room < 1:
        raise ProtocolError(
            f"--max-tokens {completion} leaves no room for a prompt in the {p.name} protocol's context of "
            f"{p.context_tokens} tokens for {env}"
        )
    sampling = replace(
        sampling,
        temperature=p.temperature if temperature is None else temperature,
        max_tokens=completion,
        max_prompt_tokens=min(p.max_prompt_tokens, room),
    )
    config = RuntimeConfig(
        max_calls_per_agent=p.max_calls_per_agent if max_calls is None else max_calls,
        max_depth=p.max_depth if max_depth is None else max_depth,
        policy_timeout_s=p.policy_timeout_s,
        rollout_timeout_s=p.rollout_timeout_s,
        sampling=sampling,
    )
    return EvalSettings(config=config, samples=p.samples if samples is None else samples,
                        protocol=p.name, context_tokens=p.context_tokens)
