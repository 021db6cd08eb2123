"""Reading OpenAI-style JSON replies (vLLM's shape) into `Completion`s.

vLLM returns the sampled token ids and log-probabilities when asked: `logprobs=True` gives
`choices[0].logprobs.content[i].logprob` (chat) or `choices[0].logprobs.token_logprobs`
(completions), and its extension `return_token_ids` adds `choices[0].token_ids` and the
top-level `prompt_token_ids` (chat) or `choices[0].prompt_token_ids` (completions). The shapes
followed are those of vLLM 0.32 (`vllm/entrypoints/openai/{chat_completion,completion}/protocol.py`).
A missing or mistyped field is a `bad_response` naming it.
"""

from __future__ import annotations

from typing import Any

from sera.policy.errors import SamplerError
from sera.runtime.policy import Completion
from sera.types import Usage


def _require(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise SamplerError("bad_response", f"reply lacks {where}.{key}")
    value = obj[key]
    if not isinstance(value, kind):
        raise SamplerError("bad_response", f"{where}.{key} is {type(value).__name__}: {value!r:.100}")
    return value


def _int_list(value: Any, where: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SamplerError("bad_response", f"{where} must be a list of ints, got {value!r:.100}")
    return value


def _float_list(values: list[Any], where: str) -> list[float]:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise SamplerError("bad_response", f"{where} must hold numbers, got {values!r:.100}")
    return [float(v) for v in values]


def _first_choice(body: dict[str, Any]) -> Any:
    choices = _require(body, "choices", list, "response")
    if not choices:
        raise SamplerError("bad_response", "reply has an empty choices list")
    return choices[0]


def read_usage(body: dict[str, Any]) -> Usage:
    """`usage` of an OpenAI-style reply."""
    usage = _require(body, "usage", dict, "response")
    return Usage(
        prompt_tokens=_require(usage, "prompt_tokens", int, "response.usage"),
        completion_tokens=_require(usage, "completion_tokens", int, "response.usage"),
    )


def read_chat_reply(body: dict[str, Any]) -> Completion:
    """A chat-completions reply (vLLM shape) as a `Completion`; ids/logprobs may be None."""
    choice = _first_choice(body)
    message = _require(choice, "message", dict, "response.choices[0]")
    text = message.get("content") or ""  # null content = empty completion, not an error
    if not isinstance(text, str):
        raise SamplerError("bad_response", f"response.choices[0].message.content is {type(text).__name__}")
    logprobs: list[float] | None = None
    if isinstance(choice.get("logprobs"), dict) and choice["logprobs"].get("content") is not None:
        entries = _require(choice["logprobs"], "content", list, "response.choices[0].logprobs")
        values = [_require(e, "logprob", (int, float), "response.choices[0].logprobs.content[i]") for e in entries]
        logprobs = _float_list(values, "response.choices[0].logprobs.content[*].logprob")
    return Completion(
        text=text,
        token_ids=_int_list(choice.get("token_ids"), "response.choices[0].token_ids"),
        logprobs=logprobs,
        prompt_token_ids=_int_list(body.get("prompt_token_ids"), "response.prompt_token_ids"),
        finish_reason=choice.get("finish_reason"),
        usage=read_usage(body),
    )


def read_text_completion_reply(body: dict[str, Any]) -> Completion:
    """A (legacy) completions reply (vLLM shape) as a `Completion`."""
    choice = _first_choice(body)
    text = _require(choice, "text", str, "response.choices[0]")
    logprobs: list[float] | None = None
    if isinstance(choice.get("logprobs"), dict):
        values = _require(choice["logprobs"], "token_logprobs", list, "response.choices[0].logprobs")
        logprobs = _float_list(values, "response.choices[0].logprobs.token_logprobs")
    return Completion(
        text=text,
        token_ids=_int_list(choice.get("token_ids"), "response.choices[0].token_ids"),
        logprobs=logprobs,
        prompt_token_ids=_int_list(choice.get("prompt_token_ids"), "response.choices[0].prompt_token_ids"),
        finish_reason=choice.get("finish_reason"),
        usage=read_usage(body),
    )
