"""The KV cache of the sequences the in-process sampler is decoding, one row per sequence.

Per layer, keys and values live in buffers of shape (rows, kv heads, columns, head dim). Row i
holds live sequence i's cache in columns [0, length_i): sequences are right-padded, each at its
own length, so a new sequence joins by writing its own row (no other row moves) and a finished
one leaves by moving the last row into its place (one row copied). A decode step feeds one token
per row and writes each row's new keys at that row's own column (`StepLayer`); the attention mask
hides every row's columns past its length. Buffers grow by reallocation when a sequence needs
more rows or columns than they have, which is rare: they keep their size between batches.

The transformers model sees ordinary `DynamicCache` objects whose layers are replaced by the two
layer kinds below (the approach `BatchKVLayer` used before): `RowLayer` for a prefill into one
row after a reused prefix, `StepLayer` for a decode step over all live rows.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

COLUMN_QUANTUM = 256
"""Buffers are allocated in multiples of this many columns (fewer reallocations as prompts grow)."""


class RowLayer(DynamicLayer):
    """One layer's cache for prefilling row `row` after `start` cached tokens."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, row: int, start: int) -> None:
        super().__init__()
        self._k, self._v, self.row, self.start = keys, values, row, start
        self.device = keys.device
        self.is_initialized = True
        self.keys, self.values = keys[row:row + 1, :, :start], values[row:row + 1, :, :start]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        end = self.start + key_states.shape[-2]
        self._k[self.row, :, self.start:end] = key_states[0]
        self._v[self.row, :, self.start:end] = value_states[0]
        self.keys, self.values = self._k[self.row:self.row + 1, :, :end], self._v[self.row:self.row + 1, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.start  # the cached part; the mask sizes add the new tokens


class StepLayer(DynamicLayer):
    """One layer's cache for a decode step: rows 0..n-1, row i writing at column `columns[i]`."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, columns: torch.Tensor, width: int) -> None:
        super().__init__()
        n = columns.shape[0]
        self._k, self._v, self.columns, self.width = keys, values, columns, width
        self._rows = torch.arange(n, device=keys.device)
        self.device = keys.device
        self.is_initialized = True
        self.keys, self.values = keys[:n, :, :width], values[:n, :, :width]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        self._k[self._rows, :, self.columns] = key_states[:, :, 0]
        self._v[self._rows, :, self.columns] = value_states[:, :, 0]
        return self.keys, self.values  # views: they already show the written columns

    def get_seq_length(self) -> int:
        return self.width - 1  # the mask sizes add the one new token


class SlotCache:
    """The live sequences' keys/values, one row each (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        config = model.config
        self.config = config
        self.layers = len(DynamicCache(config=config).layers)
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        parameter = next(model.parameters())
        self.dtype, self.device = parameter.dtype, parameter.device
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    @property
    def rows(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    @property
    def columns(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    @property
    def bytes_per_token(self) -> int:
        """Bytes of keys and values of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * torch.finfo(self.dtype).bits // 8

    def ensure(self, rows: int, columns: int, live: list[int]) -> None:
        """At least `rows` rows and `columns` columns (rounded up to `COLUMN_QUANTUM`); `live[i]` is
        row i's length, copied over when the buffers grow."""
        if rows <= self.rows and columns <= self.columns:
            return
        rows = max(rows, self.rows)
        columns = max(self.columns, -(-columns // COLUMN_QUANTUM) * COLUMN_QUANTUM)
        shape = (rows, self.kv_heads, columns, self.head_dim)
        # Zeros, not empty: masked columns get no attention weight, but 0 x NaN would still be NaN.
        keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        for row, length in enumerate(live):
            for n in range(len(self.keys)):
                keys[n][row, :, :length] = self.keys[n][row, :, :length]
                values[n][row, :, :length] = self.values[n][row, :, :length]
        self.keys, self.values = keys, values

    def release(self) -> None:
        """Free the buffers (they are reallocated at the next use)."""
        self.keys, self.values = [], []

    def write(self, row: int, keys: list[torch.Tensor], values: list[torch.Tensor], length: int) -> None:
        """Copy the first `length` positions of per-layer (heads, len, dim) tensors into `row`."""
        for n in range(self.layers):
            self.keys[n][row, :, :length] = keys[n][:, :length]
            self.values[n][row, :, :length] = values[n][:, :length]

    def read(self, row: int, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of `row`'s first `length` positions, per layer (heads, length, dim)."""
        return ([k[row, :, :length].clone() for k in self.keys], [v[row, :, :length].clone() for v in self.values])

    def move(self, source: int, target: int, length: int) -> None:
        """Copy row `source`'s first `length` positions over row `target`."""
        for buffers in (self.keys, self.values):
            for buffer in buffers:
                buffer[target, :, :length] = buffer[source, :, :length]

    def prefill_cache(self, row: int, start: int) -> DynamicCache:
        """A cache that prefills `row` after its first `start` positions."""
        cache = DynamicCache(config=self.config)
        cache.layers = [RowLayer(self.keys[n], self.values[n], row, start) for n in range(self.layers)]
        return cache

    def step_cache(self, columns: torch.Tensor) -> DynamicCache:
        """A cache for one decode step of rows 0..len(columns)-1, row i writing at `columns[i]`."""
        width = int(columns.max()) + 1
        cache = DynamicCache(config=self.config)
        cache.layers = [StepLayer(self.keys[n], self.values[n], columns, width) for n in range(self.layers)]
        return cache


__all__ = ["COLUMN_QUANTUM", "RowLayer", "SlotCache", "StepLayer"]
