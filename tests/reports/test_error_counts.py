"""`sera report` counts infrastructure failures and judge errors apart from model failures, and
names a partial summary (a run still going, or stopped) as a problem."""

from __future__ import annotations

import json
from pathlib import Path

from sera.reports.writer import build_report
from .conftest import Runs, copy_run, edit_json


def test_table1_has_errors_infrastructure_and_judge_per_run(runs: Runs, tmp_path: Path):
    r0, r1 = copy_run(runs.tc / "runs/r0", tmp_path / "tc/r0"), copy_run(runs.tc / "runs/r1", tmp_path / "tc/r1")
    summary = json.loads((r1 / "summary.json").read_bytes())
    overall = {**summary["overall"], "errors": 3}
    edit_json(r1 / "summary.json", overall=overall, infra_failures=2, judge_errors=1,
              errors_by_kind={"judge_endpoint": 1, "endpoint_down": 1, "rollout_error": 1})
    built = build_report([tmp_path / "tc"], tmp_path / "out")
    assert built.problems == []
    (table,) = json.loads(built.json.read_text())["table1"]
    (row,) = table["rows"]
    assert [row[k]["values"] for k in ("errors", "infra_failures", "judge_errors")] == [[0.0, 3.0], [0.0, 2.0], [0.0, 1.0]]
    assert [(r["infra_failures"], r["judge_errors"]) for r in row["runs"]] == [(0, 0), (2, 1)]
    page = built.markdown.read_text()
    assert "errors / run (infra, judge) |" in page and "| 1.5 ± 2.1 (1 ± 1.4, 0.5 ± 0.7) |" in page
    assert r0.is_dir()


def test_a_partial_summary_is_named_as_a_problem(runs: Runs, tmp_path: Path):
    run = copy_run(runs.tc / "runs/r0", tmp_path / "r0")
    edit_json(run / "summary.json", complete=False, planned_rollouts=3, finished_rollouts=2)
    built = build_report([run], tmp_path / "out")
    assert [p.line() for p in built.problems] == [
        f"{run / 'summary.json'}: partial: 2 of 3 rollouts finished (the run is going, or was stopped); "
        "counted as it stands, rerun its sera eval command to finish it"]
    assert built.eval_runs == 1
