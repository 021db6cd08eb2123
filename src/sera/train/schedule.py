"""Which objective an optimizer step trains, as a function of the policy version (§7.6).

The clock is the policy version `v` (completed optimizer updates). A schedule such as
`execution:16,delegation:2,rubric_generation:2` repeats: versions 0-15 execution, 16-17
delegation, 18-19 rubric_generation, 20 starts the next cycle. A skipped step (no trainable
datum) does not advance the version, so the ratio is in *successful* updates (§5.4, §11.1.14).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

Stage = Literal["execution", "delegation", "rubric_generation"]
STAGES: tuple[Stage, ...] = get_args(Stage)


def _require_nonnegative_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


class ScheduleExhausted(RuntimeError):
    """A schedule with a finite number of cycles has no stage for this version."""


@dataclass(frozen=True)
class StageSchedule:
    """An ordered list of (stage, number of consecutive versions), repeated `cycles` times."""

    entries: tuple[tuple[Stage, int], ...]
    """The stages in order with their lengths (each >= 1, each stage at most once)."""
    cycles: int = -1
    """How many times the list repeats; -1 means forever."""

    def __post_init__(self) -> None:
        if not self.entries:
            raise ValueError("stage schedule is empty; give e.g. 'execution:16,delegation:2'")
        seen: set[str] = set()
        for stage, length in self.entries:
            if stage not in STAGES:
                raise ValueError(f"unknown stage {stage!r}; allowed: {', '.join(STAGES)}")
            if isinstance(length, bool) or not isinstance(length, int) or length < 1:
                raise ValueError(f"stage {stage!r}: length must be an integer >= 1, got {length!r}")
            if stage in seen:
                raise ValueError(f"stage {stage!r} is listed twice")
            seen.add(stage)
        if isinstance(self.cycles, bool) or not isinstance(self.cycles, int) or (
            self.cycles != -1 and self.cycles < 1
        ):
            raise ValueError(f"cycles must be -1 (forever) or an integer >= 1, got {self.cycles!r}")

    @classmethod
    def parse(cls, text: str, cycles: int = -1) -> StageSchedule:
        """Read `"stage:length,stage:length,..."` (whitespace around parts is ignored); unknown
        stages, lengths < 1 and repeated stages are rejected by the constructor."""
        if not text.strip():
            raise ValueError("stage schedule is empty; give e.g. 'execution:16,delegation:2'")
        entries: list[tuple[Any, int]] = []
        for part in text.split(","):
            stage, colon, length = (p.strip() for p in part.partition(":"))
            if not colon:
                raise ValueError(f"schedule part {part.strip()!r} is not 'stage:length'")
            try:
                entries.append((stage, int(length)))
            except ValueError:
                raise ValueError(
                    f"schedule part {part.strip()!r}: length {length!r} is not an integer"
                ) from None
        return cls(entries=tuple(entries), cycles=cycles)

    @property
    def total(self) -> int:
        """Versions in one cycle (the sum of the lengths)."""
        return sum(length for _, length in self.entries)

    def stage_at(self, version: int) -> Stage:
        """The stage trained at policy version `version` (§7.6).

        `cycle, offset = divmod(version, total)`, then walk the entries until the offset falls
        inside one. Raises ScheduleExhausted when `cycle >= cycles` for a finite schedule.
        """
        _require_nonnegative_int("version", version)
        cycle, offset = divmod(version, self.total)
        if self.cycles != -1 and cycle >= self.cycles:
            raise ScheduleExhausted(
                f"version {version} is past the end of schedule '{self}' "
                f"({self.cycles} cycles of {self.total} versions)"
            )
        for stage, length in self.entries:
            if offset < length:
                return stage
            offset -= length
        raise AssertionError("unreachable: offset < total")

    def __str__(self) -> str:
        """The canonical text, e.g. `execution:16,delegation:2,rubric_generation:2`."""
        return ",".join(f"{stage}:{length}" for stage, length in self.entries)


class StageClock:
    """The current policy version and its stage; advances only on a real optimizer update."""

    def __init__(self, schedule: StageSchedule, version: int = 0) -> None:
        _require_nonnegative_int("version", version)
        self.schedule = schedule
        self.version = version

    @property
    def stage(self) -> Stage:
        """The stage rollouts at the current version belong to."""
        return self.schedule.stage_at(self.version)

    def record_update(self, trained: bool) -> bool:
        """Advance the version iff the step trained; a skipped step stays (§5.4).
        Returns whether the clock advanced."""
        if not isinstance(trained, bool):
            raise TypeError(f"trained must be a bool, got {trained!r}")
        if trained:
            self.version += 1
        return trained

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to resume on the same stage."""
        return {
            "schedule": str(self.schedule),
            "cycles": self.schedule.cycles,
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the version; ValueError if the checkpoint was made under another schedule."""
        missing = [key for key in ("schedule", "cycles", "version") if key not in state]
        if missing:
            raise ValueError(f"stage clock state lacks {missing}")
        saved = StageSchedule.parse(state["schedule"], state["cycles"])
        if saved != self.schedule:
            raise ValueError(
                f"checkpoint schedule '{saved}' (cycles={saved.cycles}) differs from the "
                f"configured '{self.schedule}' (cycles={self.schedule.cycles})"
            )
        _require_nonnegative_int("stage clock state: version", state["version"])
        self.version = state["version"]
