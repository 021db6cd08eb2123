"""Batched decoding with a KV cache: the work the sampler's worker thread does for one batch.

Each prompt is prefilled on its own (no padding, so its prompt is computed exactly as it would be
alone, and no batch x length x length attention is ever formed); the per-row caches are then
laid out left-padded in one preallocated batch cache, and every decode step feeds one token per
live row. Preallocation matters: transformers' `DynamicCache` concatenates the whole cache at
every step, which cost more than the model itself in our measurements. A finished row leaves at
once (its cache rows are dropped, so later steps compute only live rows), and left-padding
columns no live row needs any more are trimmed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from sera.policy.batching import BatchRecord, PendingRequest


@dataclass
class DecodeJob:
    """One prompt to complete, as the decode loop sees it."""

    prompt_ids: list[int]
    """Prompt token ids (chat template already applied)."""
    temperature: float
    """0 means greedy."""
    top_p: float
    """Nucleus mass, applied after temperature."""
    max_tokens: int
    """Completion cap; reaching it finishes with `length`."""
    stop: tuple[str, ...]
    """Stop strings, matched against the decoded tail of the completion (`stop_window`)."""
    generator: torch.Generator
    """This request's own RNG (CPU), so a seeded request samples the same whatever its batch."""


@dataclass(frozen=True)
class DecodeResult:
    """What the decode loop produced for one job."""

    token_ids: list[int]
    """Every generated token, including the EOS token or the tokens that spell a stop string."""
    logprobs: list[float]
    """log softmax of the raw logits (temperature 1, no top-p) at each generated token."""
    text: str
    """`token_ids` decoded without special tokens: a stop string is included, as generated."""
    finish_reason: str
    """`stop` (EOS or a stop string) or `length`."""


Finished = list[tuple[PendingRequest[DecodeJob], DecodeResult]]


class BatchKVLayer(DynamicLayer):
    """A full-attention cache layer whose keys/values live in buffers sized for the whole batch.

    `update` writes the new step in place and returns views; the base class would concatenate
    the whole cache at every step.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()
        self._key_buffer, self._value_buffer = keys, values
        self.length = length
        self.device = keys.device
        self.is_initialized = True
        self._expose()

    def _expose(self) -> None:
        self.keys = self._key_buffer[:, :, : self.length]
        self.values = self._value_buffer[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        end = self.length + key_states.shape[-2]
        if end > self._key_buffer.shape[-2]:
            allocated = self._key_buffer.shape[-2]
            raise RuntimeError(f"batch KV cache full: {end} positions needed, {allocated} allocated")
        self._key_buffer[:, :, self.length : end] = key_states
        self._value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def place_row(self, row: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Write one prompt's prefilled keys/values (heads, length, dim) right-aligned at `row`."""
        start = self.length - keys.shape[-2]
        self._key_buffer[row, :, start : self.length] = keys
        self._value_buffer[row, :, start : self.length] = values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._key_buffer, self._value_buffer = self._key_buffer[indices], self._value_buffer[indices]
        self._expose()

    def drop_leading(self, columns: int) -> None:
        """Forget the first `columns` positions (padding of every live row)."""
        self._key_buffer = self._key_buffer[:, :, columns:]
        self._value_buffer = self._value_buffer[:, :, columns:]
        self.length -= columns
        self._expose()


def check_full_attention(model: Any) -> None:
    """Refuse models whose cache is not plain full attention (sliding windows, linear attention)."""
    kinds = {type(layer).__name__ for layer in DynamicCache(config=model.config).layers}
    if kinds != {DynamicLayer.__name__}:
        raise ValueError(
            "TransformersSampler supports full-attention decoders only; "
            f"this model's cache layers are {sorted(kinds)}"
        )


STOP_WINDOW_SLACK = 4
"""Tokens a stop-string window holds beyond the stop string's length in bytes: room for the
token before the stop string (a SentencePiece decode drops a leading space at the start of a
window) and for a multi-byte character completed by a later token."""


def stop_window(stop: tuple[str, ...]) -> int:
    """Non-special tokens to decode to find any of `stop` (0 without stop strings).

    A stop string is found at the step that brings its last byte, so it lies within the newest
    tokens: at most one per byte, since every non-special token decodes to at least one byte.
    """
    if not stop:
        return 0
    return max(len(s.encode("utf-8")) for s in stop) + STOP_WINDOW_SLACK


class _Row:
    """Decode state of one live sequence."""

    def __init__(self, request: PendingRequest[DecodeJob], special_ids: frozenset[int] = frozenset()) -> None:
        self.request = request
        self.job = request.payload
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.special_ids = special_ids  # dropped by the decode, so they do not count toward the window
        self.window = stop_window(self.job.stop)

    def finish_if_done(self, tokenizer: Any, eos_ids: frozenset[int]) -> DecodeResult | None:
        """The result when the newest token ends the sequence, else None.

        Stop strings are looked for in the decoded tail only (the whole completion would make
        every step cost its length); the result's text is the whole completion, stop string
        included, exactly as decoded from `token_ids`.
        """
        if self.token_ids[-1] in eos_ids:
            return self._result(self._decode(self.token_ids[:-1], tokenizer), "stop")
        if self.job.stop:
            tail = self._decode(self.token_ids[self._tail_start():], tokenizer)
            if any(s in tail for s in self.job.stop):
                return self._result(self._decode(self.token_ids, tokenizer), "stop")
        if len(self.token_ids) >= self.job.max_tokens:
            return self._result(self._decode(self.token_ids, tokenizer), "length")
        return None

    def _tail_start(self) -> int:
        """Index of the first token of the stop-string window (special tokens are not counted)."""
        start, needed = len(self.token_ids), self.window
        while start > 0 and needed > 0:
            start -= 1
            if self.token_ids[start] not in self.special_ids:
                needed -= 1
        return start

    @staticmethod
    def _decode(ids: list[int], tokenizer: Any) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    def _result(self, text: str, finish_reason: str) -> DecodeResult:
        return DecodeResult(list(self.token_ids), list(self.logprobs), text, finish_reason)


def choose_tokens(logits: torch.Tensor, jobs: list[DecodeJob]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick the next token of each row and its log-probability under the raw logits.

    `logits` is (rows, vocab) in float32. Greedy rows take the argmax. Sampled rows draw one
    uniform number from their own generator and invert the CDF of the temperature-scaled,
    top-p-filtered distribution, so a row's draw never depends on the other rows.
    """
    raw_logprobs = torch.log_softmax(logits, dim=-1)
    tokens = logits.argmax(dim=-1)
    sampled = [i for i, job in enumerate(jobs) if job.temperature > 0]
    if sampled:
        index = torch.tensor(sampled, device=logits.device)
        temps = torch.tensor([jobs[i].temperature for i in sampled], device=logits.device)
        probs = torch.softmax(logits[index] / temps[:, None], dim=-1)
        order = None
        top_p = torch.tensor([jobs[i].top_p for i in sampled], device=logits.device)
        if bool((top_p < 1.0).any()):
            probs, order = probs.sort(dim=-1, descending=True)
            mass_before = probs.cumsum(dim=-1) - probs
            probs = probs.masked_fill(mass_before >= top_p[:, None], 0.0)  # the top token always stays
        cdf = probs.cumsum(dim=-1)
        draws = torch.stack([torch.rand((), generator=jobs[i].generator) for i in sampled])
        targets = draws.to(logits.device)[:, None] * cdf[:, -1:]
        picked = torch.searchsorted(cdf, targets, right=True).clamp_(max=cdf.shape[-1] - 1)
        if order is not None:
            picked = order.gather(-1, picked)
        tokens[index] = picked[:, 0]
    return tokens, raw_logprobs.gather(-1, tokens[:, None])[:, 0]


def _prefill(
    model: Any, rows: list[_Row], device: torch.device
) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
    """Prefill every prompt alone, then lay the caches out left-padded in one batch cache.

    Returns the batch cache, the attention mask (1 = real token) and the last-position logits.
    """
    lengths = [len(row.job.prompt_ids) for row in rows]
    width = max(lengths)
    capacity = width + max(row.job.max_tokens for row in rows)
    batch_cache = DynamicCache(config=model.config)
    row_logits = []
    for i, row in enumerate(rows):
        cache = DynamicCache(config=model.config)
        ids = torch.tensor([row.job.prompt_ids], device=device)
        row_logits.append(model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1])
        for n, layer in enumerate(cache.layers):
            if i == 0:
                heads, dim = layer.keys.shape[1], layer.keys.shape[-1]
                # Zeros, not empty: padding is masked out, but 0 x NaN would still poison the output.
                keys = layer.keys.new_zeros((len(rows), heads, capacity, dim))
                values = layer.values.new_zeros((len(rows), heads, capacity, layer.values.shape[-1]))
                batch_cache.layers[n] = BatchKVLayer(keys, values, width)
            batch_cache.layers[n].place_row(i, layer.keys[0], layer.values[0])
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, length in enumerate(lengths):
        mask[i, width - length :] = 1
    return batch_cache, mask, torch.stack(row_logits).float()


def decode_batch(
    model: Any, tokenizer: Any, requests: list[PendingRequest[DecodeJob]], *, device: torch.device,
    eos_ids: frozenset[int],
) -> tuple[BatchRecord, Finished]:
    """Run one batch to the end and resolve each request as its row finishes.

    Returns the batch record and the results of the rows that finished at the last step, left
    unresolved so that the scheduler can record the batch before anyone sees them.
    """
    started = time.perf_counter()
    special_ids = frozenset(getattr(tokenizer, "all_special_ids", ()))
    rows = [_Row(request, special_ids) for request in requests]
    prompt_lens = tuple(len(row.job.prompt_ids) for row in rows)
    live_rows: list[int] = []
    with torch.inference_mode():
        cache, mask, logits = _prefill(model, rows, device)
        # Each row continues at its own length: positions count real tokens only.
        next_pos = torch.tensor(prompt_lens, device=device)
        while True:
            tokens, logprobs = choose_tokens(logits, [row.job for row in rows])
            keep: list[int] = []
            finished: Finished = []
            for i, (row, token, logprob) in enumerate(zip(rows, tokens.tolist(), logprobs.tolist())):
                row.token_ids.append(token)
                row.logprobs.append(logprob)
                result = row.finish_if_done(tokenizer, eos_ids)
                if result is not None:
                    finished.append((row.request, result))
                elif not row.request.cancelled:
                    keep.append(i)
            if not keep:
                break
            for request, result in finished:
                request.resolve(result)
            if len(keep) < len(rows):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                rows, mask, tokens, next_pos = [rows[i] for i in keep], mask[index], tokens[index], next_pos[index]
                mask = _trim_left_padding(cache, mask)
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=-1)
            live_rows.append(len(rows))
            logits = model(
                input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None], cache=cache,
                use_cache=True,
            ).logits[:, -1].float()
            next_pos = next_pos + 1
    record = BatchRecord(len(requests), prompt_lens, tuple(live_rows), time.perf_counter() - started)
    return record, finished


def _trim_left_padding(cache: DynamicCache, mask: torch.Tensor) -> torch.Tensor:
    """Drop leading columns that are padding in every live row (after the longest rows left)."""
    pad_columns = int((mask.sum(dim=0) == 0).int().cumprod(dim=0).sum())
    if pad_columns == 0:
        return mask
    for layer in cache.layers:
        layer.drop_leading(pad_columns)
    return mask[:, pad_columns:]
