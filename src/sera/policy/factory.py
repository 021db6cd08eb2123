"""Build the policy a command line asks for: the scripted oracle, an in-process model, or a server.

`--policy oracle` needs nothing; `--policy hf` loads any transformers model in this process
(default: the embedded SmolLM2-135M-Instruct); `--policy openai` talks to an OpenAI-compatible
server (vLLM, SGLang, a hosted API). Sampling defaults come from the environment (the paper's
evaluation settings) and are clamped to the model's context when it is known.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sera.runtime.policy import Policy, SamplingParams
from sera.types import Task

if TYPE_CHECKING:
    from sera.policy.checkpoint_model import CheckpointSource
    from sera.policy.openai_http import HttpSettings

POLICY_KINDS = ("oracle", "hf", "openai")


@dataclass(frozen=True)
class PolicyRequest:
    """What the user asked for on the command line."""

    kind: str
    """`oracle`, `hf` (in-process transformers) or `openai` (an OpenAI-compatible server)."""
    model: str | None = None
    """Model name or path (hf: default `smollm2`; openai: the served model name, required)."""
    base_url: str | None = None
    """Server URL for `openai`, e.g. `http://127.0.0.1:8000/v1`."""
    api_key: str | None = None
    """API key for `openai` (default: env `OPENAI_API_KEY`, else `EMPTY`)."""
    device: str = "cpu"
    """Device of an in-process model."""
    dtype: str = "float32"
    """Weights dtype of an in-process model (`float32`, `bfloat16`)."""
    http: HttpSettings | None = None
    """Timeouts and retries of `openai` calls (None: `HttpSettings()`'s defaults)."""
    checkpoint: CheckpointSource | None = None
    """hf: the trained weights `model` names (`sera.policy.checkpoint_model.resolve`, done once
    by the caller so the checkpoint is validated once); None: `model` is a plain model."""


def build_policy(
    request: PolicyRequest, oracle_for: Callable[[list[Task]], Policy], tasks: list[Task]
) -> tuple[Policy, str]:
    """The policy and a short description of it for result files."""
    if request.kind not in POLICY_KINDS:
        raise ValueError(f"unknown policy {request.kind!r}; known: {', '.join(POLICY_KINDS)}")
    if request.kind == "oracle":
        return oracle_for(tasks), "oracle"
    if request.kind == "hf":
        from sera.policy.transformers_sampler import TransformersSampler

        model = request.model or "smollm2"
        if request.checkpoint is not None:
            from sera.policy.checkpoint_model import load_sampler

            return load_sampler(request.checkpoint, dtype=request.dtype, device=request.device), f"hf:{model}"
        sampler = TransformersSampler.load(model, dtype=request.dtype, device=request.device)
        return sampler, f"hf:{model}"
    if not request.base_url:
        raise ValueError("--policy openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    if not request.model:
        raise ValueError("--policy openai needs --model: the name the server serves")
    from sera.policy.openai_sampler import OpenAISampler

    api_key = request.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    # Evaluation does not need token ids, so any OpenAI-compatible server will do.
    sampler = OpenAISampler(request.base_url, request.model, api_key=api_key, http=request.http, require_token_ids=False)
    return sampler, f"openai:{request.model}"


def fit_sampling(sampling: SamplingParams, policy: Policy) -> SamplingParams:
    """Clamp the prompt cap so that prompt + completion fit the model's context, when known."""
    max_positions = getattr(policy, "max_positions", None)
    if not max_positions:
        return sampling
    max_tokens = min(sampling.max_tokens, max_positions // 2)
    room = max_positions - max_tokens
    cap = room if sampling.max_prompt_tokens is None else min(sampling.max_prompt_tokens, room)
    return replace(sampling, max_tokens=max_tokens, max_prompt_tokens=cap)
