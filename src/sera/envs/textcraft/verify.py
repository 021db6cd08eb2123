"""The TextCraft-Synth success check, for the root task and for every child's subtask alike.

An agent succeeds iff it finished explicitly with a non-empty message and, for every target,
its inventory grew by at least the target count since the agent started. The increment is
measured against the agent's own start, so pre-existing items never count.
"""

from __future__ import annotations

from collections.abc import Mapping

from sera.runtime.agent_env import Verdict


def verify_crafted(
    targets: Mapping[str, int],
    start_inventory: Mapping[str, int],
    end_inventory: Mapping[str, int],
    finish_message: str | None,
) -> Verdict:
    """Check the crafted increments of `targets`."""
    missing = {
        item: need - (end_inventory.get(item, 0) - start_inventory.get(item, 0))
        for item, need in targets.items()
        if end_inventory.get(item, 0) - start_inventory.get(item, 0) < need
    }
    finished = bool(finish_message)
    return Verdict(
        success=finished and not missing,
        info={
            "target_items": dict(targets),
            "initial_inventory": dict(start_inventory),
            "final_inventory": dict(end_inventory),
            "missing_items": missing,
            "finished": finished,
        },
    )
