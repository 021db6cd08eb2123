"""Reusing the KV cache of token prefixes the sampler has already computed.

An agent's next prompt is its previous prompt, its own completion and a new observation; every
agent of a run starts with the same system prompt. Without reuse each call prefills its whole
prompt again: on a 2-core CPU that was most of the sampling time (SmolLM2, ~1,100-token prompts,
~2.8 s each, against ~170 new tokens per turn).

`PrefixCache` keeps the keys/values of finished sequences (prompt + completion) and finds, for a
new prompt, the cached sequence sharing its longest prefix. Sequences are indexed by a hash chain
over blocks of `BLOCK` tokens (block k's key hashes block k's tokens and block k-1's key), so a
lookup walks the prompt's blocks once; the match is then extended token by token inside the
first differing block and checked against the stored ids, so a hash collision can never reuse
the wrong keys.

Entries are evicted least recently used first once their bytes pass the budget. An entry whose
whole prompt a later sequence extends (an agent's previous turn: the new prompt holds the old
prompt and the reply as re-rendered by the chat template) is dropped when the longer one is
stored; an entry matched only on a shared system prompt stays. The
cache holds keys computed with one set of weights: `check_weights` drops everything when any
parameter changed in place since the entries were made (an optimizer step, a loaded state dict),
so a stale prefix can never be served after an update.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

BLOCK = 32
"""Tokens per hashed block of the index."""


@dataclass
class CacheEntry:
    """One cached sequence."""

    ids: list[int]
    """The token ids whose keys/values are stored (a prompt and the completion fed back so far)."""
    prompt_len: int
    """How many of `ids` were the prompt (the rest were generated)."""
    keys: list[torch.Tensor]
    """Per layer, (kv heads, len(ids), head dim)."""
    values: list[torch.Tensor]
    """Per layer, (kv heads, len(ids), head dim)."""
    block_keys: list[int] = field(default_factory=list)
    """The index keys of the entry's full blocks, in order."""

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in itertools.chain(self.keys, self.values))


@dataclass(frozen=True)
class PrefixMatch:
    """The longest cached prefix of a prompt."""

    entry_id: int
    """Which entry."""
    entry: CacheEntry
    """The entry itself."""
    length: int
    """Tokens of the prompt whose keys/values the entry holds."""

    @property
    def supersedes(self) -> bool:
        """The prompt extends the entry's whole prompt: it continues that conversation, and the
        entry can be dropped once the longer sequence is stored."""
        return self.length >= self.entry.prompt_len


@dataclass
class PrefixStats:
    """Counters of the cache (cumulative)."""

    lookups: int = 0
    """Prompts looked up."""
    hit_tokens: int = 0
    """Prompt tokens served from the cache."""
    prompt_tokens: int = 0
    """Prompt tokens looked up."""
    stored: int = 0
    """Entries stored."""
    evicted: int = 0
    """Entries dropped for the budget."""
    invalidations: int = 0
    """Times everything was dropped because the weights changed."""


def _block_chain(ids: list[int], blocks: int) -> list[int]:
    keys, previous = [], 0
    for k in range(blocks):
        previous = hash((previous, tuple(ids[k * BLOCK:(k + 1) * BLOCK])))
        keys.append(previous)
    return keys


class PrefixCache:
    """Keys/values of finished sequences, found by longest shared prefix, within a byte budget."""

    def __init__(self, budget_bytes: int) -> None:
        """`budget_bytes` <= 0 disables the cache (lookups miss, nothing is stored)."""
        self.budget_bytes = budget_bytes
        self.stats = PrefixStats()
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()  # least recently used first
        self._index: dict[int, dict[int, None]] = {}  # block key -> entries holding that chain
        self._bytes = 0
        self._next_id = 0
        self._weights: tuple[int, ...] | None = None

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the entries."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def check_weights(self, model: Any) -> None:
        """Drop every entry if any parameter of `model` changed (or was added) since the last check."""
        versions = tuple(p._version for p in model.parameters())
        if self._weights is not None and versions != self._weights and self._entries:
            self.clear()
            self.stats.invalidations += 1
        self._weights = versions

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self._index.clear()
        self._bytes = 0

    def lookup(self, ids: list[int], max_length: int) -> PrefixMatch | None:
        """The entry sharing the longest prefix with `ids`, capped at `max_length` tokens (None
        when no entry shares a whole block)."""
        self.stats.lookups += 1
        self.stats.prompt_tokens += len(ids)
        if not self._entries or max_length < BLOCK:
            return None
        candidates: dict[int, None] | None = None
        matched_blocks = 0
        previous = 0
        for k in range(min(len(ids), max_length) // BLOCK):
            previous = hash((previous, tuple(ids[k * BLOCK:(k + 1) * BLOCK])))
            holders = self._index.get(previous)
            if not holders:
                break
            candidates, matched_blocks = holders, k + 1
        if candidates is None:
            return None
        entry_id = next(i for i in reversed(self._entries) if i in candidates)  # most recently used
        entry = self._entries[entry_id]
        length = matched_blocks * BLOCK
        limit = min(len(entry.ids), len(ids), max_length)
        while length < limit and entry.ids[length] == ids[length]:
            length += 1
        if entry.ids[:length] != ids[:length]:  # a hash collision: never reuse keys of other tokens
            return None
        self._entries.move_to_end(entry_id)
        self.stats.hit_tokens += length
        return PrefixMatch(entry_id, entry, length)

    def store(self, ids: list[int], keys: list[torch.Tensor], values: list[torch.Tensor], *, prompt_len: int,
              replaces: int | None = None) -> None:
        """Keep a sequence whose first `prompt_len` ids were its prompt (the tensors are owned by
        the cache from now on); `replaces`: an entry this one continues, dropped now."""
        if not self.enabled or len(ids) < BLOCK:
            return
        if replaces is not None and replaces in self._entries:
            self._remove(replaces)
        entry = CacheEntry(ids=list(ids), prompt_len=prompt_len, keys=keys, values=values)
        if entry.nbytes > self.budget_bytes:
            return
        entry.block_keys = _block_chain(entry.ids, len(ids) // BLOCK)
        entry_id = self._next_id
        self._next_id += 1
        self._entries[entry_id] = entry
        for key in entry.block_keys:
            self._index.setdefault(key, {})[entry_id] = None
        self._bytes += entry.nbytes
        self.stats.stored += 1
        while self._bytes > self.budget_bytes and len(self._entries) > 1:
            self._remove(next(iter(self._entries)))
            self.stats.evicted += 1

    def _remove(self, entry_id: int) -> None:
        entry = self._entries.pop(entry_id)
        self._bytes -= entry.nbytes
        for key in entry.block_keys:
            holders = self._index.get(key)
            if holders is not None:
                holders.pop(entry_id, None)
                if not holders:
                    del self._index[key]


__all__ = ["BLOCK", "CacheEntry", "PrefixCache", "PrefixMatch", "PrefixStats"]
