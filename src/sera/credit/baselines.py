"""Leave-one-out baselines: each item is compared with the mean of the others (§5.2, §6.2, §7.2).

No standard-deviation normalisation anywhere (`normalize_group_advantages=false` in the paper's
runs): advantages stay on the reward's own scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check_finite(name: str, values: Sequence[float]) -> list[float]:
    """The values as floats; ValueError naming the first non-finite one."""
    out = [float(v) for v in values]
    for index, value in enumerate(out):
        if not math.isfinite(value):
            raise ValueError(f"{name}[{index}] must be finite, got {value!r}")
    return out


def loo_advantages(rewards: Sequence[float]) -> list[float]:
    """`A_i = r_i - mean_{j != i} r_j` (§5.2 step 6: one rubric group per item).

    One reward -> `[0.0]` (no other item to compare with: the spec's "G < 2 -> A = 0");
    empty -> `[]`.
    """
    values = _check_finite("rewards", rewards)
    if len(values) < 2:
        return [0.0] * len(values)
    total = sum(values)
    return [r - (total - r) / (len(values) - 1) for r in values]


def root_balanced_loo(event_rewards: Sequence[Sequence[float]]) -> list[list[float]]:
    """Root-balanced LOO for delegation events (§6.2 step 4).

    `event_rewards[r]` are the shaped rewards `s_e` of rollout r's events (possibly none).
    With `m_r = mean_{e ∈ r} s_e` (0 when r has no event) and N rollouts:
    `A_e = s_e - (Σ_{r'} m_{r'} - m_r) / (N - 1)`; for N == 1, `A_e = s_e - m_r`.
    Each rollout weighs the same in the baseline however many events it has.
    Returns advantages in the same nested shape.
    """
    rollouts = [
        _check_finite(f"event_rewards[{r}]", events) for r, events in enumerate(event_rewards)
    ]
    means = [sum(events) / len(events) if events else 0.0 for events in rollouts]
    n = len(rollouts)
    total = sum(means)
    out: list[list[float]] = []
    for events, m_r in zip(rollouts, means):
        baseline = m_r if n == 1 else (total - m_r) / (n - 1)
        out.append([s - baseline for s in events])
    return out


def execution_baselines(root_rewards: Sequence[float]) -> list[float]:
    """Execution-stage baseline per root rollout (§7.2).

    `b_i = (Σ_j R_j - R_i) / (K - 1)`: the mean root reward of the *other* rollouts of the task;
    K == 1 -> `b_i = R_i` (plain mean subtraction). Every datum of rollout i, root or
    descendant, is then centred with `b_i` (see `execution_advantage`), so a child's reward
    is compared with other rollouts' root successes (§11.1 item 10).
    """
    values = _check_finite("root_rewards", root_rewards)
    if len(values) == 1:
        return list(values)
    total = sum(values)
    return [(total - r) / (len(values) - 1) for r in values]


def execution_advantage(trajectory_reward: float, baseline: float) -> float:
    """`A_d = r_τ(d) - b_i` for a datum of trajectory τ in rollout i (§7.2)."""
    if not math.isfinite(trajectory_reward) or not math.isfinite(baseline):
        raise ValueError(
            f"trajectory_reward and baseline must be finite, "
            f"got {trajectory_reward!r}, {baseline!r}"
        )
    return trajectory_reward - baseline
