"""Named failures of a model call.

Every backend raises `SamplerError` with one of these kinds, so that a training run records
*what* went wrong with a call (and counts it) instead of dying of it. The runtime records the
error on the agent whose call failed.
"""

from __future__ import annotations

from typing import Literal, get_args

SamplerErrorKind = Literal[
    "endpoint_down",
    "server_error",
    "timeout",
    "bad_response",
    "missing_token_ids",
    "prompt_too_long",
    "invalid_request",
]
"""endpoint_down: connection refused or unreachable; server_error: 5xx after retries;
timeout: no answer in time after retries; bad_response: a reply that cannot be read (truncated
JSON, missing fields); missing_token_ids: the server ignored `return_token_ids` / logprobs while
they were required; prompt_too_long: the prompt does not fit even after the context policy;
invalid_request: a 4xx the server will not accept on retry."""

SAMPLER_ERROR_KINDS: tuple[str, ...] = get_args(SamplerErrorKind)


class SamplerError(RuntimeError):
    """A model call that failed in a named way."""

    def __init__(self, kind: SamplerErrorKind, detail: str) -> None:
        if kind not in SAMPLER_ERROR_KINDS:
            raise ValueError(f"unknown sampler error kind {kind!r}; known: {SAMPLER_ERROR_KINDS}")
        super().__init__(f"{kind}: {detail}")
        self.kind: SamplerErrorKind = kind
        self.detail = detail
