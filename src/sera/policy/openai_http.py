"""Talking to an OpenAI-compatible server: timeouts, retries, error kinds, one client setup.

Shared by the vLLM sampler (`sera.policy.openai_sampler`) and the external judge
(`sera.judge.client`), so neither depends on the other. Replies are read as raw JSON text
(`decode_json_body`) rather than through the openai client's models, so that a truncated body
or a missing field becomes a named `bad_response` instead of a parser crash.

Every failure is a `SamplerError` with a kind (`sera.policy.errors`); transient ones (5xx,
429, timeouts, dropped connections) are retried with capped, jittered exponential backoff,
within one total time budget per call. With the defaults a server that accepts connections but
never answers is reported as `timeout` after `total_timeout_s` (5 minutes).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2
import openai

from sera.policy.errors import SamplerError

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


@dataclass(frozen=True)
class HttpSettings:
    """How patiently one call to an endpoint waits and retries (the CLI exposes these)."""

    connect_timeout_s: float = 10.0
    """Longest wait to open a connection; a host that does not accept is `timeout` fast."""
    request_timeout_s: float = 180.0
    """Longest wait of one attempt for the server's reply (replies are not streamed, so this
    bounds a whole generation); a hung attempt is retried."""
    total_timeout_s: float = 300.0
    """Budget of one call from its first attempt to its last, backoff waits included (waiting
    for a concurrency slot is not counted); on expiry the call fails with `timeout`."""
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
        for name in ("connect_timeout_s", "request_timeout_s", "total_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    def delay(self, retry_index: int) -> float:
        """Seconds before retry number `retry_index` (0-based): exponential, capped, jittered.

        Jitter (a factor in [0.5, 1]) keeps many concurrent callers from retrying in lockstep
        against a server that has just come back.
        """
        base, cap = self.backoff_s
        return min(cap, base * 2**retry_index) * random.uniform(0.5, 1.0)

    def client_timeout(self) -> httpx2.Timeout:
        """The per-attempt timeout of the HTTP client."""
        return httpx2.Timeout(self.request_timeout_s, connect=self.connect_timeout_s)


@dataclass
class CallStats:
    """What an endpoint client has sent, for diagnostics and tests (not the run's accounting)."""

    attempts: int = 0
    """HTTP requests sent, retries included."""
    retries: int = 0
    """Attempts that were retries of a failed one."""
    failures: dict[str, int] = field(default_factory=dict)
    """Calls that failed for good, by `SamplerError` kind."""

    def count_failure(self, kind: str) -> None:
        """Count one call that failed for good."""
        self.failures[kind] = self.failures.get(kind, 0) + 1


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
    attempt: Callable[[], Awaitable[T]], settings: HttpSettings, stats: CallStats, endpoint: str
) -> T:
    """Run `attempt` until it succeeds, fails in a way retrying cannot fix, runs out of
    retries, or `settings.total_timeout_s` is spent.

    Raises `SamplerError`; the failure's kind is counted in `stats.failures`.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.total_timeout_s
    retries_done = 0
    while True:
        stats.attempts += 1
        budget = asyncio.timeout_at(deadline)
        spent = False
        try:
            async with budget:
                return await attempt()
        except TimeoutError:
            if not budget.expired():
                raise
            error = SamplerError("timeout", f"no reply from {endpoint} within total_timeout_s={settings.total_timeout_s:g}")
            spent = True
        except (openai.OpenAIError, SamplerError) as exc:
            error = classify_openai_error(exc, endpoint)
        wait = settings.delay(retries_done)
        retry = error.kind in RETRYABLE_KINDS and retries_done < settings.max_retries and not spent
        if retry and loop.time() + wait >= deadline:  # the budget would run out while waiting
            retry = False
            error = SamplerError(error.kind, f"{error.detail}; total_timeout_s={settings.total_timeout_s:g} spent")
        if not retry:
            if retries_done:
                error = SamplerError(error.kind, f"{error.detail} (after {retries_done} retries)")
            stats.count_failure(error.kind)
            raise error
        await asyncio.sleep(wait)
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


class OpenAIEndpoint:
    """One OpenAI-compatible server: its client, concurrency limit, retries and call stats."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        settings: HttpSettings,
        max_concurrency: int,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        """`max_concurrency` bounds the requests in flight; `http_client` replaces the
        transport (tests pass a mock)."""
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url = base_url
        self.settings = settings
        self.stats = CallStats()
        self._slots = asyncio.Semaphore(max_concurrency)
        # The client's own retries are off: ours classify, count, jitter and keep the total budget.
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=settings.client_timeout(),
            max_retries=0,
            http_client=http_client,
        )

    def url(self, route: str) -> str:
        """The full address of `route` (e.g. `chat/completions`), as error messages name it."""
        return f"{self.base_url.rstrip('/')}/{route}"

    async def chat(self, **request: Any) -> dict[str, Any]:
        """POST `/chat/completions` with `request` (the openai client's arguments); the JSON reply."""
        return await self._post("chat/completions", lambda: self._client.chat.completions.with_raw_response.create(**request))

    async def completions(self, **request: Any) -> dict[str, Any]:
        """POST `/completions` with `request`; the JSON reply."""
        return await self._post("completions", lambda: self._client.completions.with_raw_response.create(**request))

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    async def _post(self, route: str, send: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
        endpoint = self.url(route)

        async def attempt() -> dict[str, Any]:
            raw = await send()
            return decode_json_body(raw.text, endpoint)

        async with self._slots:
            return await call_with_retries(attempt, self.settings, self.stats, endpoint)
