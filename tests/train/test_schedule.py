"""Stage schedule and clock (§7.6, §5.4)."""

from __future__ import annotations

import pytest

from sera.train.schedule import STAGES, ScheduleExhausted, StageClock, StageSchedule

SERA = "execution:16,delegation:2,rubric_generation:2"


@pytest.mark.parametrize(
    ("version", "stage"),
    [(0, "execution"), (15, "execution"), (16, "delegation"), (17, "delegation"),
     (18, "rubric_generation"), (19, "rubric_generation"), (20, "execution"),
     (39, "rubric_generation"), (40, "execution")],
)
def test_sera_schedule_positions(version, stage):
    assert StageSchedule.parse(SERA).stage_at(version) == stage


def test_parse_tolerates_whitespace_and_prints_canonical_text():
    schedule = StageSchedule.parse("  execution : 16 ,delegation:2 , rubric_generation:2 ")
    assert schedule.entries == (("execution", 16), ("delegation", 2), ("rubric_generation", 2))
    assert schedule.total == 20
    assert str(schedule) == SERA
    assert StageSchedule.parse(str(schedule)) == schedule
    assert STAGES == ("execution", "delegation", "rubric_generation")


@pytest.mark.parametrize(
    ("text", "message"),
    [("execution:16,critique:2", r"unknown stage 'critique'; allowed: execution, delegation, rubric_generation"),
     ("execution:16,delegation:x", r"'delegation:x': length 'x' is not an integer"),
     ("execution:0", r"'execution': length must be an integer >= 1, got 0"),
     ("execution:-2", r"'execution': length must be an integer >= 1, got -2"),
     ("execution:16,delegation:2,execution:4", r"'execution' is listed twice"),
     ("execution", r"'execution' is not 'stage:length'"),
     ("", "empty"), ("   ", "empty")],
)
def test_parse_errors_name_the_bad_part(text, message):
    with pytest.raises(ValueError, match=message):
        StageSchedule.parse(text)


def test_finite_cycles_run_out():
    schedule = StageSchedule.parse("execution:1,delegation:1", cycles=2)
    assert [schedule.stage_at(v) for v in range(4)] == ["execution", "delegation"] * 2
    with pytest.raises(ScheduleExhausted, match="version 4"):
        schedule.stage_at(4)
    with pytest.raises(ValueError, match="cycles"):
        StageSchedule.parse("execution:1", cycles=0)
    with pytest.raises(ValueError, match="version"):
        schedule.stage_at(-1)


def test_clock_advances_only_on_trained_updates():
    clock = StageClock(StageSchedule.parse(SERA))
    assert (clock.version, clock.stage) == (0, "execution")
    for _ in range(16):
        assert clock.record_update(True) is True
    assert clock.stage == "delegation"
    assert clock.record_update(False) is False  # a skipped step stays on the same version
    assert (clock.version, clock.stage) == (16, "delegation")
    with pytest.raises(TypeError, match="bool"):
        clock.record_update(1)


def test_clock_state_round_trip():
    clock = StageClock(StageSchedule.parse(SERA), version=17)
    state = clock.state_dict()
    assert state == {"schedule": SERA, "cycles": -1, "version": 17}
    resumed = StageClock(StageSchedule.parse(SERA))
    resumed.load_state_dict(state)
    assert (resumed.version, resumed.stage) == (17, "delegation")
    resumed.load_state_dict({**state, "schedule": "execution: 16, delegation: 2, rubric_generation: 2"})
    assert resumed.version == 17


def test_clock_refuses_a_checkpoint_from_another_schedule():
    clock = StageClock(StageSchedule.parse("execution:12,delegation:4"))
    with pytest.raises(ValueError, match=r"'execution:16,delegation:2,rubric_generation:2'.*'execution:12,delegation:4'"):
        clock.load_state_dict({"schedule": SERA, "cycles": -1, "version": 3})
    with pytest.raises(ValueError, match="lacks"):
        clock.load_state_dict({"schedule": "execution:12,delegation:4"})
    assert clock.version == 0
