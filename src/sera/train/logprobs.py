"""The learner's side of the log-probabilities: recompute log p(completion token | everything before).

This is the quantity the sampler reports per token (`TransformersSampler`: log-softmax of the
raw logits at temperature 1, no top-p), computed here in one teacher-forced forward pass. The
CISPO importance ratio is `exp(learner - sampler)`, so both must measure the same thing.
Gradients flow unless the caller wraps the call in `torch.no_grad()` / `inference_mode()`.
Only the logits of completion positions are materialised (`logits_to_keep`): a 49k vocabulary
times a long prompt would otherwise dominate memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def sequence_logprobs(model: Any, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> torch.Tensor:
    """Log-probability of each completion token given the prompt and the earlier completion
    tokens: a float32 tensor of shape (len(completion_ids),)."""
    return batched_sequence_logprobs(model, [(prompt_ids, completion_ids)])[0]


def batched_sequence_logprobs(
    model: Any, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, pad_id: int = 0
) -> list[torch.Tensor]:
    """`sequence_logprobs` for many (prompt, completion) pairs in one left-padded forward pass.

    Left padding aligns every completion to the right edge, so only the last
    `max(len(completion)) + 1` positions need logits. Positions count real tokens only, so a
    padded row is computed as it would be alone.
    """
    if not pairs:
        return []
    for n, (prompt, completion) in enumerate(pairs):
        if not prompt:
            raise ValueError(f"pair {n}: the prompt is empty; the first completion token needs a context")
        if not completion:
            raise ValueError(f"pair {n}: the completion is empty")
    device = next(model.parameters()).device
    sequences = [list(prompt) + list(completion) for prompt, completion in pairs]
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, sequence in enumerate(sequences):
        input_ids[i, width - len(sequence) :] = torch.tensor(sequence)
        mask[i, width - len(sequence) :] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    longest = max(len(completion) for _, completion in pairs)
    # Logits at position t predict token t+1: keep the last `longest + 1` and drop the final one.
    logits = model(
        input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False,
        logits_to_keep=longest + 1,
    ).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    out: list[torch.Tensor] = []
    for i, (_, completion) in enumerate(pairs):
        rows = logprobs[i, longest - len(completion) :]
        targets = torch.tensor(list(completion), device=device)[:, None]
        out.append(rows.gather(-1, targets)[:, 0])
    return out
