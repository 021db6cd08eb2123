"""The in-process sampler's worker: continuous batching over a slot KV cache with prefix reuse.

One thread runs this loop until the sampler closes:

    admit   queued requests join the live rows (up to `max_rows` and the `fits` budget), also
            while other rows are decoding; each is prefilled alone into its own row, after the
            longest prefix the `PrefixCache` holds (an agent's previous turn, a shared system
            prompt), so only the new tokens are computed
    choose  one token per live row from its latest logits (`choose_tokens`: per-request seeds)
    finish  rows that hit EOS, a stop string or `max_tokens` are answered at once, their
            keys/values stored in the prefix cache, and their rows freed; cancelled rows leave
    decode  one forward pass feeds every remaining row its new token (`SlotCache.step_cache`)

Each prompt is computed exactly as it would be alone (no padding inside a prefill), and a decode
step's rows only see their own columns, so a seeded request samples the same tokens whatever
else is running (up to float rounding). A failed forward fails the requests it was computing
(`server_error` via the sampler) and the worker carries on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from sera.policy.batching import BatchRecord, PendingRequest, RequestQueue, SamplerClosed
from sera.policy.decoding import DecodeJob, RowState, choose_tokens
from sera.policy.errors import SamplerError
from sera.policy.kv_slots import SlotCache
from sera.policy.prefix_cache import PrefixCache, PrefixMatch


@dataclass
class LiveRow:
    """A sequence being decoded in row `slot` of the slot cache."""

    state: RowState
    """Tokens, log-probs and stop checks of the request."""
    slot: int
    """Its row in the slot cache (live rows are 0..n-1)."""
    length: int
    """Positions of its row that hold keys/values (prompt + tokens fed back so far)."""
    source: PrefixMatch | None
    """The prefix-cache entry its prompt extended, dropped when this sequence is stored."""


@dataclass
class _Period:
    """Counters of the current busy period (becomes a `BatchRecord`)."""

    started: float = field(default_factory=time.perf_counter)
    prompt_lens: list[int] = field(default_factory=list)
    live_rows: list[int] = field(default_factory=list)
    joined: int = 0
    reused: int = 0
    prefilled: int = 0

    def record(self) -> BatchRecord:
        return BatchRecord(len(self.prompt_lens), tuple(self.prompt_lens), tuple(self.live_rows),
                           time.perf_counter() - self.started, self.joined, self.reused, self.prefilled)


class DecodeEngine:
    """Runs `requests` through `model` until the queue closes (call `run` in a thread)."""

    def __init__(
        self, model: Any, tokenizer: Any, requests: RequestQueue[DecodeJob], *, eos_ids: frozenset[int],
        max_rows: int, fits: Callable[[list[DecodeJob]], bool] | None, prefix_cache: PrefixCache,
    ) -> None:
        self.model, self.tokenizer, self.requests = model, tokenizer, requests
        self.eos_ids, self.max_rows, self.fits, self.prefix = eos_ids, max_rows, fits, prefix_cache
        self.device = next(model.parameters()).device
        self.special_ids = frozenset(getattr(tokenizer, "all_special_ids", ()))
        self.slots = SlotCache(model)
        self.records: list[BatchRecord] = []
        """One record per busy period, in order."""
        self._live: list[LiveRow] = []
        self._logits: list[torch.Tensor] = []  # aligned with _live: each row's next-token logits
        self._backlog: list[PendingRequest[DecodeJob]] = []
        self._period: _Period | None = None

    @property
    def busy(self) -> bool:
        """Rows are decoding or requests wait to be admitted."""
        return bool(self._live or self._backlog)

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                self._backlog += self.requests.take(block=not self._live and not self._backlog)
                with torch.inference_mode():
                    self._admit()
                    if self._live:
                        self._step()
        except SamplerClosed as closed:
            self._backlog += closed.args[0]
            error = SamplerError("endpoint_down", "the sampler was closed before this request ran")
            for request in [*self._backlog, *(row.state.request for row in self._live)]:
                request.fail(error)
            self._live, self._logits, self._backlog = [], [], []
            self.slots.release()

    def _admit(self) -> None:
        waiting = [r for r in self._backlog if not r.cancelled]
        joining = bool(self._live)  # rows are decoding: whoever is admitted now joins them
        admitted = 0
        if waiting:
            self.prefix.check_weights(self.model)
            # Room for everything that may join now, allocated once rather than row by row.
            jobs = [row.state.job for row in self._live] + [r.payload for r in waiting[:self.max_rows - len(self._live)]]
            self.slots.ensure(rows=len(jobs), columns=max(len(j.prompt_ids) + j.max_tokens for j in jobs),
                              live=[row.length for row in self._live])
        for request in waiting:
            if len(self._live) >= self.max_rows:
                break
            if self._live and self.fits is not None and not self.fits([r.state.job for r in self._live] + [request.payload]):
                break
            admitted += 1
            try:
                self._prefill(request, joining)
            except Exception as error:  # noqa: BLE001 - this request's caller must hear of it
                request.fail(error)
        self._backlog = waiting[admitted:]

    def _prefill(self, request: PendingRequest[DecodeJob], joining: bool) -> None:
        job = request.payload
        ids = job.prompt_ids
        if self._period is None:
            self._period = _Period()
        self._period.joined += joining
        match = self.prefix.lookup(ids, max_length=len(ids) - 1) if self.prefix.enabled else None
        start = match.length if match is not None else 0
        slot = len(self._live)
        if match is not None:
            self.slots.write(slot, match.entry.keys, match.entry.values, start)
        new = torch.tensor([ids[start:]], device=self.device)
        positions = torch.arange(start, len(ids), device=self.device)[None]
        out = self.model(input_ids=new, position_ids=positions, cache=self.slots.prefill_cache(slot, start),
                         use_cache=True, logits_to_keep=1)
        self._live.append(LiveRow(RowState(request, self.special_ids), slot, len(ids), match))
        self._logits.append(out.logits[0, -1].float())
        self._period.prompt_lens.append(len(ids))
        self._period.reused += start
        self._period.prefilled += len(ids) - start

    def _step(self) -> None:
        rows = self._live
        tokens, logprobs = choose_tokens(torch.stack(self._logits), [row.state.job for row in rows])
        leaving: list[int] = []
        finished = []
        for row, token, logprob in zip(rows, tokens.tolist(), logprobs.tolist()):
            row.state.token_ids.append(token)
            row.state.logprobs.append(logprob)
            result = row.state.finish_if_done(self.tokenizer, self.eos_ids)
            if result is not None:
                finished.append((row, result))
                leaving.append(row.slot)
            elif row.state.request.cancelled:
                leaving.append(row.slot)
        for row, _ in finished:
            self._store(row)
        gone = set(leaving)
        feed = [(row, token) for row, token in zip(rows, tokens.tolist()) if row.slot not in gone]
        self._remove(sorted(leaving))
        if not self._live and not self._backlog:
            assert self._period is not None
            # Record first, then hand out the last results: whoever sees a result sees its period.
            self.records.append(self._period.record())
            self._period = None
        for row, result in finished:
            row.state.request.resolve(result)
        if self._live:
            self._decode([token for _, token in sorted(feed, key=lambda pair: pair[0].slot)])

    def _decode(self, tokens: list[int]) -> None:
        rows = self._live
        assert self._period is not None
        lengths = torch.tensor([row.length for row in rows], device=self.device)
        width = int(lengths.max()) + 1
        mask = (torch.arange(width, device=self.device)[None, :] <= lengths[:, None]).long()
        try:
            logits = self.model(
                input_ids=torch.tensor(tokens, device=self.device)[:, None], attention_mask=mask,
                position_ids=lengths[:, None], cache=self.slots.step_cache(lengths), use_cache=True,
            ).logits[:, -1].float()
        except Exception as error:  # noqa: BLE001 - every row of this step must hear of it
            for row in rows:
                row.state.request.fail(error)
            self._live, self._logits, self._period = [], [], None
            return
        for row in rows:
            row.length += 1
        self._logits = list(logits)
        self._period.live_rows.append(len(rows))

    # -- rows ------------------------------------------------------------------------------------

    def _store(self, row: LiveRow) -> None:
        """Keep a finished sequence's keys/values (its last token was never fed back)."""
        if not self.prefix.enabled:
            return
        ids = row.state.job.prompt_ids + row.state.token_ids[:-1]
        keys, values = self.slots.read(row.slot, row.length)
        source = row.source.entry_id if row.source is not None and row.source.supersedes else None
        self.prefix.store(ids[:row.length], keys, values, prompt_len=len(row.state.job.prompt_ids), replaces=source)

    def _remove(self, slots: list[int]) -> None:
        """Free rows: the last live row moves into each freed slot (highest first)."""
        for slot in reversed(slots):
            last = len(self._live) - 1
            if slot != last:
                row = self._live[last]
                self.slots.move(last, slot, row.length)
                row.slot = slot
                self._live[slot] = row
                self._logits[slot] = self._logits[last]
            self._live.pop()
            self._logits.pop()


__all__ = ["DecodeEngine", "LiveRow"]
