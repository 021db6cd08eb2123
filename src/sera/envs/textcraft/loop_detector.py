"""The TextCraft loop detector: end an agent whose last cells repeat a short pattern.

The reference agent (platoon's `CodeActAgent`, used unchanged by the SERA TextCraft agents)
checks its cell history before every model call: if the last `repeats · p` cells, for some
period p from 1 to `max_period`, are `repeats` copies of one p-cell pattern, it makes no model
call and runs `finish(FINISH_MESSAGE)` instead. Cells are compared by their code with leading
and trailing whitespace removed; a reply with no code counts as the empty cell. Defaults: 4
repeats, periods up to 3. Our environment applies the same rule at the same moment: the runtime asks
`TextCraftAgentEnv.forced_step()` before each policy call, and the finish it returns is recorded
as a step of its own (`Step.forced = "loop_detector"`), never trained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FINISH_MESSAGE = "Stuck in a loop, terminating early."
"""The finish message of a stopped agent (the reference's, so parents read the same report)."""


@dataclass(frozen=True)
class LoopDetector:
    """When the detector stops an agent."""

    repeats: int = 4
    """Copies of the pattern, back to back at the end of the history, that count as a loop."""
    max_period: int = 3
    """Longest pattern (in cells) looked for; every period from 1 up to this one is tried."""

    def __post_init__(self) -> None:
        if self.repeats < 2 or self.max_period < 1:
            raise ValueError(f"loop detector needs repeats >= 2 and max_period >= 1, got {self}")

    def period(self, codes: Sequence[str]) -> int | None:
        """The shortest period p whose pattern fills the last `repeats · p` cells, or None."""
        cells = [code.strip() for code in codes]
        longest = min(self.max_period, len(cells) // self.repeats)
        for p in range(1, longest + 1):
            tail = cells[-p * self.repeats:]
            if all(tail[i] == tail[i % p] for i in range(len(tail))):
                return p
        return None


def is_loop_stop(finish_message: str | None) -> bool:
    """True when an agent's finish was the loop detector's."""
    return finish_message == FINISH_MESSAGE
