"""A step's datums as token-budget micro-batches for the learner (trainer-design §3.2).

Datums are sorted by length (longest first) and packed greedily: a micro-batch takes datums
while `rows × longest row ≤ max_tokens_per_microbatch` (right padding counts against the
budget, since it is computed). Sorting first keeps rows of one micro-batch of similar length,
so little padding is computed. A datum longer than the budget is not an error: it becomes a
micro-batch of its own (a long agent trajectory is still trained; the budget bounds how many
datums share a forward pass, not the length of one).

Datums without a trained token carry no gradient and are left out (no forward pass for them).
Position `i` of a datum is trained when `mask[i]`; its log-probability is read from the hidden
state at position `i - 1`, so `mask[0]` must be False (the first token has no context).

Each micro-batch carries, besides the padded ids, the flat list of its trained tokens: where
the hidden state that predicts them sits (`rows`, `cols`), the token ids (`targets`), the
sampler's log-probabilities (`sampler_logprobs`, NaN where none was reported) and the
per-token advantage × depth weight (`advantages`). The learner gathers hidden states at
(`rows`, `cols`) before the LM head, so logits are never computed for untrained positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sera.train.datums import Datum

PAPER_MAX_TOKENS_PER_MICROBATCH = 60_000
"""The reference's `max_tokens_per_mb` (sera-spec §7.5)."""


@dataclass(frozen=True)
class MicroBatch:
    """Right-padded datums that share one forward pass, and their trained tokens flattened."""

    input_ids: torch.Tensor
    """`[B, T]` token ids, right-padded with `pad_id`."""
    attention_mask: torch.Tensor
    """`[B, T]` 1 at real tokens, 0 at padding."""
    rows: torch.Tensor
    """`[N]` row of each trained token's predicting position."""
    cols: torch.Tensor
    """`[N]` column of each trained token's predicting position (the token's index minus one)."""
    targets: torch.Tensor
    """`[N]` the trained token ids."""
    sampler_logprobs: torch.Tensor
    """`[N]` float32: the sampler's log-probability of each trained token, NaN where none."""
    advantages: torch.Tensor
    """`[N]` float32: the datum's `advantage × weight`, repeated over its trained tokens."""
    datum_indices: tuple[int, ...]
    """Index of each row's datum in the step's datum list."""

    @property
    def trained_tokens(self) -> int:
        """Number of trained tokens N."""
        return int(self.targets.numel())

    @property
    def real_tokens(self) -> int:
        """Tokens that are not padding."""
        return int(self.attention_mask.sum())

    @property
    def padded_tokens(self) -> int:
        """Tokens computed, padding included (`B × T`)."""
        return int(self.input_ids.numel())


def plan_microbatches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices grouped into micro-batches: longest first, packed while rows × longest ≤ budget.

    An index whose length alone exceeds `max_tokens` gets a group of its own.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens_per_microbatch must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for index in order:
        # Sorted descending, so the group's first row is its longest.
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= max_tokens:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def make_microbatch(datums: Sequence[Datum], indices: Sequence[int], *, pad_id: int = 0) -> MicroBatch:
    """One right-padded micro-batch of `datums[i]` for `i` in `indices`."""
    chosen = [datums[i] for i in indices]
    width = max(len(d.tokens) for d in chosen)
    input_ids = torch.full((len(chosen), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(chosen), width), dtype=torch.long)
    rows: list[int] = []
    cols: list[int] = []
    targets: list[int] = []
    sampler: list[float] = []
    advantages: list[float] = []
    for row, datum in enumerate(chosen):
        input_ids[row, : len(datum.tokens)] = torch.tensor(datum.tokens, dtype=torch.long)
        attention[row, : len(datum.tokens)] = 1
        advantage = datum.advantage * datum.weight
        for position, trained in enumerate(datum.mask):
            if trained:
                rows.append(row)
                cols.append(position - 1)
                targets.append(datum.tokens[position])
                sampler.append(datum.sampler_logprobs[position])
                advantages.append(advantage)
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention,
        rows=torch.tensor(rows, dtype=torch.long),
        cols=torch.tensor(cols, dtype=torch.long),
        targets=torch.tensor(targets, dtype=torch.long),
        sampler_logprobs=torch.tensor(sampler, dtype=torch.float32),
        advantages=torch.tensor(advantages, dtype=torch.float32),
        datum_indices=tuple(indices),
    )


def microbatches(
    datums: Sequence[Datum], max_tokens_per_microbatch: int = PAPER_MAX_TOKENS_PER_MICROBATCH, *, pad_id: int = 0
) -> list[MicroBatch]:
    """The step's datums with a trained token, as length-bucketed micro-batches (see module doc).

    Raises ValueError for a datum whose first token is trained.
    """
    for n, datum in enumerate(datums):
        if datum.mask and datum.mask[0]:
            raise ValueError(
                f"datum {n} ({datum.trajectory_id!r}): its first token is marked trained, but the "
                "first token has no context to predict it from"
            )
    kept = [n for n, datum in enumerate(datums) if any(datum.mask)]
    groups = plan_microbatches([len(datums[n].tokens) for n in kept], max_tokens_per_microbatch)
    return [make_microbatch(datums, [kept[i] for i in group], pad_id=pad_id) for group in groups]


def trained_token_count(batches: Sequence[MicroBatch]) -> int:
    """|M| of the step: the token-mean denominator shared by all its micro-batches."""
    return sum(batch.trained_tokens for batch in batches)


def has_sampler_logprob(values: torch.Tensor) -> torch.Tensor:
    """Boolean mask of the entries that hold a sampler log-probability (not NaN)."""
    return ~torch.isnan(values)


__all__ = [
    "PAPER_MAX_TOKENS_PER_MICROBATCH",
    "MicroBatch",
    "make_microbatch",
    "microbatches",
    "plan_microbatches",
    "trained_token_count",
    "has_sampler_logprob",
]
