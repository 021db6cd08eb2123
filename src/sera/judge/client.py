"""Client of an external OpenAI-compatible judge model (Kimi in the paper).

`judge_child` labels a child agent's trajectory as success or failure against its assigned
goal; `complete_json` sends any other request whose reply must be a JSON object (rubric writing
or scoring by an external model in ablations). Both:
- go through `sera.policy.openai_http`: 5xx, timeouts and dropped connections are retried with
  capped exponential backoff within a total time budget (`http=`, default `JUDGE_HTTP`: the
  reference's 2 retries, min(2^k, 8) s; its rubric calls used 5 retries, min(2^k, 30) s);
- hold at most `max_concurrency` requests in flight;
- read replies from a disk cache when one is configured (only usable replies are stored);
- count every call in the client's `usage` (`JudgeUsage`): answered calls with their tokens,
  failures by kind, unusable replies, and cache hits apart (each result also carries its usage,
  which the launchers count in the rollout tree);
- never raise for an endpoint failure: they return an invalid result naming it, because a
  training run must not die of one bad judge call (the branch is simply left unlabelled).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import httpx2
from pydantic import Field

from sera.judge.cache import CachedReply, ReplyCache, request_key
from sera.judge.parse import ReplyParseError, extract_json_object, parse_judgement
from sera.judge.prompts import build_judge_messages, render_trajectory
from sera.judge.usage import JudgeUsage
from sera.policy.errors import SamplerError
from sera.policy.openai_http import CallStats, HttpSettings, OpenAIEndpoint
from sera.policy.openai_replies import read_chat_reply
from sera.types import AgentNode, Message, Record, Usage

log = logging.getLogger(__name__)

KIMI_JUDGE_EXTRA_BODY: dict[str, Any] = {
    "max_prompt_tokens": 10240,
    "reasoning_effort": "none",
    "enable_thinking": False,
}
"""The paper's judge settings sent in `extra_body` to a Kimi endpoint (sera-spec §5.3); pass as
`extra_body=` when the server understands them."""

JUDGE_HTTP = HttpSettings(max_retries=2, backoff_s=(1.0, 8.0))
"""The judge's default timeouts and retries: the reference's 2 retries, min(2^k, 8) s apart."""


class Judgement(Record):
    """The judge's verdict on one child trajectory."""

    valid: bool
    """True when the judge answered with a well-formed verdict."""
    success: bool | None = None
    """The verdict; None when invalid."""
    reason: str | None = None
    """The judge's justification; None when invalid."""
    error: str | None = None
    """Why the judgement is invalid (endpoint failure or unusable reply); None when valid."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens of the call (those of the original call on a cache hit)."""
    cached: bool = False
    """True when the reply came from the cache (no request was sent)."""
    raw_text: str | None = None
    """The judge's reply text, when there was one."""


class JsonReply(Record):
    """An external model's reply that had to be a JSON object."""

    valid: bool
    """True when the reply held a JSON object."""
    data: dict[str, Any] | None = None
    """The object; None when invalid."""
    error: str | None = None
    """Why the reply is unusable; None when valid."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens of the call."""
    cached: bool = False
    """True when the reply came from the cache."""
    raw_text: str | None = None
    """The reply text, when there was one."""


@dataclass(frozen=True)
class _Fetched:
    text: str | None
    usage: Usage
    cached: bool
    key: str
    error: str | None


class JudgeClient:
    """Async client of an external judge / rubric model."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "EMPTY",
        http: HttpSettings = JUDGE_HTTP,
        max_retries: int | None = None,
        backoff_s: tuple[float, float] | None = None,
        max_concurrency: int = 16,
        temperature: float = 1.0,
        max_tokens: int = 1024,
        extra_body: dict[str, Any] | None = None,
        cache_dir: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        """`http`: timeouts and retries; `max_retries` and `backoff_s`, when given, override
        those fields of it."""
        self.base_url = base_url
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        if max_retries is not None:
            http = replace(http, max_retries=max_retries)
        if backoff_s is not None:
            http = replace(http, backoff_s=backoff_s)
        self.cache = ReplyCache(cache_dir) if cache_dir is not None else None
        self.usage = JudgeUsage()
        self.endpoint = OpenAIEndpoint(
            base_url, api_key=api_key, settings=http, max_concurrency=max_concurrency, http_client=http_client
        )

    @property
    def stats(self) -> CallStats:
        """Requests sent, retries and failures by kind."""
        return self.endpoint.stats

    async def judge_child(
        self,
        goal: str,
        trajectory: str | AgentNode,
        final_state: str,
        parent_goal: str | None = None,
    ) -> Judgement:
        """Did the child accomplish `goal`? `trajectory` is rendered text or the recorded agent."""
        text = render_trajectory(trajectory) if isinstance(trajectory, AgentNode) else trajectory
        messages = build_judge_messages(goal, text, final_state, parent_goal)
        fetched = await self._fetch(messages, role="judge", operation="judge_child")
        if fetched.error is not None:
            return Judgement(valid=False, error=fetched.error, usage=fetched.usage, cached=fetched.cached)
        parsed = parse_judgement(fetched.text or "")
        self._settle("judge", fetched, usable=parsed.valid)
        return Judgement(
            valid=parsed.valid,
            success=parsed.success,
            reason=parsed.reason,
            error=parsed.error,
            usage=fetched.usage,
            cached=fetched.cached,
            raw_text=fetched.text,
        )

    async def complete_json(
        self,
        messages: list[Message],
        *,
        role: str,
        operation: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> JsonReply:
        """Send `messages`; the reply must hold a JSON object. Counted under `role`."""
        fetched = await self._fetch(
            messages, role=role, operation=operation or role, temperature=temperature, max_tokens=max_tokens
        )
        if fetched.error is not None:
            return JsonReply(valid=False, error=fetched.error, usage=fetched.usage, cached=fetched.cached)
        try:
            data: dict[str, Any] | None = extract_json_object(fetched.text or "")
            error = None
        except ReplyParseError as exc:
            data, error = None, f"invalid JSON reply: {exc}"
        self._settle(role, fetched, usable=data is not None)
        return JsonReply(
            valid=data is not None,
            data=data,
            error=error,
            usage=fetched.usage,
            cached=fetched.cached,
            raw_text=fetched.text,
        )

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self.endpoint.close()

    # -- internals -----------------------------------------------------------------------------

    async def _fetch(
        self,
        messages: list[Message],
        *,
        role: str,
        operation: str,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> _Fetched:
        """The reply text from the cache or the endpoint; endpoint failures are returned, and
        counted, here. Answered calls are counted by `_settle` once the reply is parsed."""
        temperature = self.temperature if temperature is None else temperature
        max_tokens = self.max_tokens if max_tokens is None else max_tokens
        key = request_key(operation, self.model, messages, temperature, max_tokens, self.extra_body)
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            self.usage.record_cache_hit(role)
            return _Fetched(hit.text, hit.usage, cached=True, key=key, error=None)

        payload = [{"role": m.role, "content": m.content} for m in messages]
        try:
            body = await self.endpoint.chat(
                model=self.model,
                messages=payload,
                temperature=temperature,
                max_tokens=max_tokens,
                extra_body=self.extra_body or None,
            )
            reply = read_chat_reply(body)
        except SamplerError as error:
            self.usage.record_failure(role, error.kind)
            return _Fetched(None, Usage(), cached=False, key=key, error=f"{role} call failed: {error}")
        except Exception as error:  # an unforeseen fault must not end the run either
            log.exception("%s call to %s failed unexpectedly", role, self.endpoint.url("chat/completions"))
            self.usage.record_failure(role, f"unexpected:{type(error).__name__}")
            return _Fetched(None, Usage(), cached=False, key=key, error=f"{role} call failed: {error!r}")
        return _Fetched(reply.text, reply.usage, cached=False, key=key, error=None)

    def _settle(self, role: str, fetched: _Fetched, *, usable: bool) -> None:
        """Count an answered call and cache its reply if it was usable."""
        if fetched.cached:
            return  # already counted as a cache hit
        self.usage.record_call(role, fetched.usage, invalid=not usable)
        if usable and self.cache is not None and fetched.text is not None:
            self.cache.put(fetched.key, CachedReply(text=fetched.text, usage=fetched.usage))
