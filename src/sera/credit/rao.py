"""RAO execution reward for one node of the agent tree (§6.3)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def rao_reward(
    own_success: bool | None, child_successes: Sequence[bool | None] = (), lam: float = 0.0
) -> float | None:
    """`r = own_success + lam · (succeeded direct children / labelled direct children)` (§6.3).

    `own_success` is the node's verified (root, TextCraft children) or judged (TextWorld
    children) outcome; None means no valid label, and the caller drops the node (the
    reference marks it `skip_gradient_update`), so the reward is None too. Unlabelled children
    are excluded from both counts; with no labelled child there is no bonus. Every shipped
    recipe uses `lam = 0` (§11.1 item 2), making the reward the node's own success.
    """
    if not math.isfinite(lam):
        raise ValueError(f"lam must be finite, got {lam!r}")
    if own_success is None:
        return None
    if own_success not in (True, False):
        raise ValueError(f"own_success must be a bool or None, got {own_success!r}")
    for index, child in enumerate(child_successes):
        if child is not None and child not in (True, False):
            raise ValueError(f"child_successes[{index}] must be a bool or None, got {child!r}")
    labelled = [c for c in child_successes if c is not None]
    bonus = lam * sum(bool(c) for c in labelled) / len(labelled) if labelled else 0.0
    return float(own_success) + bonus
