"""The in-process sampler: a transformers causal LM behind the `Sampler` protocol.

Concurrent calls are batched continuously (`sera.policy.engine`): a worker thread admits
requests whenever a row is free, also while others decode, prefills each prompt alone after the
longest prefix whose keys/values it already holds (`sera.policy.prefix_cache`: an agent's earlier
turns, the shared system prompt), and decodes one token per step for all live rows from a slot
KV cache (`sera.policy.kv_slots`); a finished sequence leaves at once.

What a `Completion` holds, exactly:

- `token_ids`: every token the model generated, in order. A sequence ended by EOS includes the
  EOS token (the learner must see the model choose to stop). A sequence ended by a stop string
  includes the token that completed the stop string (and any characters that token carries
  past it); nothing after it is generated.
- `text`: `token_ids` decoded without special tokens, so a stop string is included, exactly as
  generated (with whatever its last token carries past it): the agent's history then shows
  the model its own turns, and the next prompt extends this one for prefix merging. With EOS,
  the text excludes EOS. An immediate EOS gives `text == ""`, `token_ids == [eos]`, finish
  reason `stop`.
- `logprobs`: for each token of `token_ids`, `log_softmax(logits)` of the model's raw logits at
  temperature 1 without top-p: the quantity the learner recomputes (`sera.train.logprobs`)
  for the CISPO importance ratio, *not* the probability under the sampling distribution
  (which differs when temperature != 1 or top_p < 1).
- `finish_reason`: `stop` (EOS or a stop string), `repetition` (the last
  `SamplingParams.repetition_stop` tokens loop, `sera.policy.repetition`) or `length`
  (`max_tokens` reached).
- `prompt_token_ids`: always; `prompt_messages`: the messages kept when the context policy
  (`sera.policy.context.ContextPolicy`) changed the prompt; after a token cut they are the
  messages the cut ids were rendered from.

Sampling with a `seed` uses a per-request generator, so a seeded call returns the same tokens
whatever else shares its batch (up to float rounding of padded batches, which matters only on
exact ties).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import torch

from sera.memory import trim_heap
from sera.policy.batching import BatchRecord, RequestQueue
from sera.policy.decoding import DecodeJob, DecodeResult, check_full_attention
from sera.policy.engine import DecodeEngine
from sera.policy.prefix_cache import PrefixCache, PrefixStats
from sera.policy.context import ContextPolicy, Overflow, check_prompt_ids
from sera.policy.errors import SamplerError
from sera.policy.tokenizing import chat_ids
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message, Usage


DEFAULT_PREFIX_CACHE_BYTES = 2 * 1024**3
"""Prefix-cache memory when none is given: ~45k tokens of SmolLM2-135M keys/values in fp32."""


class TransformersSampler:
    """A `Sampler` that runs a transformers model in this process with dynamic batching."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 32,
        max_batch_tokens: int | None = None,
        device: str | torch.device | None = None,
        context_overflow: Overflow = "cut_tokens",
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
    ) -> None:
        """`model` is any full-attention transformers causal LM. `max_batch_size` caps the rows
        decoded at once; `max_batch_tokens` caps their KV cache, counted as rows x (longest
        prompt + largest max_tokens) (None: no cap; one request always runs). `device` defaults
        to the model's own device (a given device moves the model there). `context_overflow`:
        what the context policy does when the head plus the newest turn are over the cap.
        `prefix_cache_bytes`: memory for reusing computed prompt prefixes (0: off). Torch
        threads stay as the caller set them."""
        if tokenizer.chat_template is None:
            raise ValueError("the tokenizer has no chat template; TransformersSampler needs one")
        self.model = model.eval()
        if device is not None:
            self.model.to(device)
        self.device = next(self.model.parameters()).device
        check_full_attention(self.model)
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(model, tokenizer)
        self.max_positions: int | None = getattr(model.config, "max_position_embeddings", None)
        self.context = ContextPolicy.from_renderer(
            lambda messages, generation: self.chat_ids(messages, add_generation_prompt=generation), context_overflow
        )
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._requests: RequestQueue[DecodeJob] = RequestQueue()
        self.prefix_cache = PrefixCache(prefix_cache_bytes)
        """Keys/values of finished sequences, reused by later prompts that extend them."""
        self._engine = DecodeEngine(
            self.model, tokenizer, self._requests, eos_ids=self.eos_ids, max_rows=max_batch_size,
            fits=None if max_batch_tokens is None else lambda jobs: _padded_tokens(jobs) <= max_batch_tokens,
            prefix_cache=self.prefix_cache,
        )
        self._thread = threading.Thread(target=self._engine.run, name="sera-sampler", daemon=True)
        self._thread.start()

    @classmethod
    def load(
        cls,
        name_or_path: str = "smollm2",
        *,
        dtype: str = "float32",
        device: str = "cpu",
        max_batch_size: int = 32,
        max_batch_tokens: int | None = None,
    ) -> TransformersSampler:
        """Load a model with `sera.policy.models.load_model` (default: the embedded SmolLM2)."""
        from sera.policy.models import load_model

        model, tokenizer = load_model(name_or_path, dtype=dtype, device=device)
        return cls(model, tokenizer, max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens)

    @property
    def batch_records(self) -> list[BatchRecord]:
        """One record per busy period so far (requests, prompt lengths, live rows per step, joins,
        reused and prefilled prompt tokens)."""
        return list(self._engine.records)

    @property
    def prefix_stats(self) -> PrefixStats:
        """Counters of the prefix cache (lookups, tokens served from it, evictions)."""
        return self.prefix_cache.stats

    def release_memory(self) -> None:
        """Free the KV buffers and the prefix cache (e.g. before a learner update; they are
        rebuilt on demand) and hand the pages back to the system (`sera.memory`). Only while no
        call is in flight."""
        if self._engine.busy:
            raise RuntimeError("release_memory() while sampler calls are in flight")
        self.prefix_cache.clear()
        self._engine.slots.release()
        trim_heap()

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        """Complete a chat: template with a generation prompt, context policy, then decode."""
        if not messages:
            raise SamplerError("invalid_request", "no messages to complete")
        fit = self.context.fit(messages, sampling.max_prompt_tokens)
        assert fit.prompt_ids is not None  # this policy renders ids
        return await self._complete(fit.prompt_ids, sampling, prompt_messages=fit.messages if fit.changed else None)

    async def complete_tokens(self, prompt_token_ids: list[int], sampling: SamplingParams) -> Completion:
        """Complete raw prompt ids (no chat template). A prompt over `max_prompt_tokens` is an
        error here: without messages there are no turns to drop."""
        ids = list(prompt_token_ids)
        if not ids:
            raise SamplerError("invalid_request", "empty prompt_token_ids")
        check_prompt_ids(ids, sampling.max_prompt_tokens)
        return await self._complete(ids, sampling, prompt_messages=None)

    async def close(self) -> None:
        """Stop the worker thread; calls still queued fail with `endpoint_down`."""
        self._requests.close()
        await asyncio.to_thread(self._thread.join)

    # -- internals ---------------------------------------------------------------------------

    async def _complete(
        self, prompt_ids: list[int], sampling: SamplingParams, *, prompt_messages: list[Message] | None
    ) -> Completion:
        job = self._job(prompt_ids, sampling)
        try:
            result: DecodeResult = await self._requests.submit(job)
        except SamplerError:
            raise
        except Exception as error:  # a failed batch (out of memory, a model bug): name it for the run log
            detail = f"the model failed on this batch: {type(error).__name__}: {error}"
            raise SamplerError("server_error", detail) from error
        return Completion(
            text=result.text,
            token_ids=result.token_ids,
            logprobs=result.logprobs,
            prompt_token_ids=prompt_ids,
            prompt_messages=prompt_messages,
            finish_reason=result.finish_reason,
            usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(result.token_ids)),
        )

    def _job(self, prompt_ids: list[int], sampling: SamplingParams) -> DecodeJob:
        if sampling.max_tokens < 1:
            raise SamplerError("invalid_request", f"max_tokens must be >= 1, got {sampling.max_tokens}")
        if sampling.temperature < 0:
            raise SamplerError("invalid_request", f"temperature must be >= 0, got {sampling.temperature}")
        if not 0 < sampling.top_p <= 1:
            raise SamplerError("invalid_request", f"top_p must be in (0, 1], got {sampling.top_p}")
        if any(not s for s in sampling.stop):
            raise SamplerError("invalid_request", f"empty stop string in {sampling.stop!r}")
        if sampling.repetition_stop < 0:
            raise SamplerError("invalid_request", f"repetition_stop must be >= 0, got {sampling.repetition_stop}")
        if self.max_positions is not None and len(prompt_ids) + sampling.max_tokens > self.max_positions:
            raise SamplerError(
                "prompt_too_long",
                f"prompt of {len(prompt_ids)} tokens + max_tokens {sampling.max_tokens} exceeds the model's "
                f"{self.max_positions} positions; lower max_tokens or set max_prompt_tokens",
            )
        vocab = self.model.config.vocab_size
        bad = [i for i in prompt_ids if not 0 <= i < vocab]
        if bad:
            raise SamplerError(
                "invalid_request", f"prompt token ids outside the vocabulary (size {vocab}): {bad[:5]}"
            )
        generator = torch.Generator()
        if sampling.seed is None:
            generator.seed()
        else:
            generator.manual_seed(sampling.seed)
        return DecodeJob(
            prompt_ids=prompt_ids,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            stop=tuple(sampling.stop),
            generator=generator,
            repetition_stop=sampling.repetition_stop,
        )

    def chat_ids(self, messages: list[Message], *, add_generation_prompt: bool = True) -> list[int]:
        """Token ids of `messages` under the tokenizer's chat template."""
        return chat_ids(self.tokenizer, messages, add_generation_prompt=add_generation_prompt)


def _padded_tokens(jobs: list[DecodeJob]) -> int:
    """KV positions these jobs' rows allocate (each row as long as the longest need)."""
    return len(jobs) * (max(len(j.prompt_ids) for j in jobs) + max(j.max_tokens for j in jobs))


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """End-of-sequence ids: the tokenizer's eos plus the model's generation config eos ids."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation config names an eos token")
    return frozenset(ids)


__all__ = ["TransformersSampler", "BatchRecord"]
