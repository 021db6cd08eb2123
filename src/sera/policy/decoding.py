"""What decoding one request involves, independent of how rows are batched (`sera.policy.engine`):
the job, its result, the per-row state with its stop checks, and the choice of the next token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from sera.policy.batching import PendingRequest
from sera.policy.repetition import REPETITION, loops_at_end


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
    repetition_stop: int = 0
    """Loop span that ends the completion with `repetition` (`sera.policy.repetition`); 0: off."""


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
    """`stop` (EOS or a stop string), `repetition` (a degenerate loop) or `length`."""


Finished = list[tuple[PendingRequest[DecodeJob], DecodeResult]]


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


class RowState:
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
        if self.job.repetition_stop and loops_at_end(self.token_ids, self.job.repetition_stop):
            return self._result(self._decode(self.token_ids, tokenizer), REPETITION)
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
