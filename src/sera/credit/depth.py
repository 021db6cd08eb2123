"""Depth inverse-frequency weights (§7.3): each depth level gets a share that does not grow
with how many trajectories live at that depth, so deep, bushy levels do not drown the root."""

from __future__ import annotations

from collections.abc import Sequence


def depth_weights(datum_depths: Sequence[int], datum_trajectory_ids: Sequence[str]) -> list[float]:
    """Per-datum weight over a whole batch (§7.3).

    With `D_d` datums and `T_d` distinct trajectories at depth d: `u_d = 1 / T_d`,
    `Z = N / Σ_d D_d u_d`, and a datum at depth d gets `w_d = Z · u_d`. The weights sum to N
    (the number of datums); level d's total is proportional to `D_d / T_d`. The (already
    baseline-subtracted) advantage of each datum is multiplied by its weight.

    Trajectory ids must be unique across the whole batch (e.g. prefix node ids with the
    rollout), since the same id counts once. Raises ValueError on unequal lengths, a negative
    depth, or one trajectory id at two depths. Empty input -> [].
    """
    if len(datum_depths) != len(datum_trajectory_ids):
        raise ValueError(
            f"datum_depths has {len(datum_depths)} items but datum_trajectory_ids has "
            f"{len(datum_trajectory_ids)}"
        )
    trajectories_at: dict[int, set[str]] = {}
    datums_at: dict[int, int] = {}
    depth_of: dict[str, int] = {}
    for index, (depth, trajectory_id) in enumerate(zip(datum_depths, datum_trajectory_ids)):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"datum_depths[{index}] must be an int >= 0, got {depth!r}")
        seen_depth = depth_of.setdefault(trajectory_id, depth)
        if seen_depth != depth:
            raise ValueError(
                f"trajectory {trajectory_id!r} appears at depth {seen_depth} and at depth {depth} "
                f"(datum {index}); trajectory ids must be unique across the batch"
            )
        trajectories_at.setdefault(depth, set()).add(trajectory_id)
        datums_at[depth] = datums_at.get(depth, 0) + 1
    if not datums_at:
        return []
    raw = {depth: 1.0 / len(ids) for depth, ids in trajectories_at.items()}
    z = len(datum_depths) / sum(datums_at[depth] * u for depth, u in raw.items())
    return [z * raw[depth] for depth in datum_depths]
