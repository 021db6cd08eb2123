"""`sera report` on good input: Table 1 numbers (mean ± std over seeds by hand, the headline
rules), Table 2 counters, Table 7 stage sums, best-of pairing, PNGs, the page and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sera.cli import app
from sera.reports.writer import build_report
from .conftest import Runs, copy_run, edit_json

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report(runs: Runs, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("report")
    built = build_report([runs.tc, runs.tw, runs.train, runs.train_trees], out)
    assert built.problems == []
    return out, json.loads(built.json.read_text())


def table(data: dict, env: str) -> dict:
    (found,) = [t for t in data["table1"] if t["env"] == env]
    return found


def close(stat: dict, mean: float, std: float | None) -> None:
    assert math.isclose(stat["mean"], mean, abs_tol=1e-9), stat
    if std is None:
        assert stat["std"] is None
    else:
        assert math.isclose(stat["std"], std, abs_tol=1e-9), stat


def test_textcraft_mean_std_over_seeds_and_task_weighting(report):
    _, data = report
    tc = table(data, "textcraft-synth")
    (row,) = tc["rows"]  # seeds 0 and 1 of one configuration are one row
    assert [r["seed"] for r in row["runs"]] == [0, 1] and row["tasks"] == 3
    close(row["bands"]["easy"], 1.0, 0.0)
    close(row["bands"]["medium"], 0.5, math.sqrt(0.5))  # 1 and 0
    close(row["overall"], (1 + 2 / 3) / 2, (1 - 2 / 3) / math.sqrt(2))  # pooled: 3/3 and 2/3
    # Task-weighted with the full set's band sizes: seed 1 is (147·1 + 213·0) / (147 + 213).
    seed1 = 147 / 360
    assert row["headline_rule"] == "task-weighted"
    close(row["headline"], (1 + seed1) / 2, (1 - seed1) / math.sqrt(2))


def test_textworld_macro_average(report):
    _, data = report
    (row,) = table(data, "textworld-sync")["rows"]
    close(row["overall"], (1 + 4 / 5) / 2, (1 - 4 / 5) / math.sqrt(2))
    close(row["bands"]["easy"], 0.75, 0.5 / math.sqrt(2))
    macro1 = (0.5 + 1 + 1 + 1) / 4  # differs from the pooled 4/5: every band weighs the same
    assert row["headline_rule"] == "four-band macro average" and row["headline_bands"] == ["easy", "medium", "hard", "extreme"]
    close(row["headline"], (1 + macro1) / 2, (1 - macro1) / math.sqrt(2))


def test_runs_container_is_searched_not_read(report, runs: Runs):
    _, data = report
    assert any(note.startswith(f"{runs.tc}: holds evaluation runs below it") for note in data["notes"])


def test_stage_wall_clock_sums(report):
    _, data = report
    (sera,) = [t for t in data["table7"]["train"] if t["label"] == "sera"]
    stages = {s["stage"]: s for s in sera["stages"]}
    assert list(stages) == ["execution", "delegation", "rubric"]
    assert (stages["execution"]["steps"], stages["execution"]["trained"]) == (2, 1)
    assert stages["execution"]["seconds"] == pytest.approx(4.0)
    assert stages["execution"]["parts"] == pytest.approx({"sampling": 3.0, "credit": 0.75, "update": 0.25, "checkpoint": 0.0})
    assert stages["delegation"]["seconds"] == pytest.approx(0.75)
    assert stages["rubric"]["seconds"] == pytest.approx(0.5)  # no time/step: the sum of its parts


def test_supervision_counters(report):
    _, data = report
    train = {t["method"]: t for t in data["table2"]["train"]}
    # calls/judge and counters/judge_calls on one line are one count, not two.
    assert train["sera"]["counters_source"] == "metrics"
    assert {k: train["sera"]["counters"][k] for k in ("judge_calls", "judge_prompt_tokens", "judge_completion_tokens", "verifier_calls")} \
        == {"judge_calls": 7, "judge_prompt_tokens": 700, "judge_completion_tokens": 70, "verifier_calls": 16}
    assert train["rao"]["counters_source"] == "trees"
    assert (train["rao"]["counters"]["verifier_calls"], train["rao"]["counters"]["judge_calls"]) == (10, 5)
    (row,) = table(data, "textcraft-synth")["rows"]
    assert row["counters"]["policy_calls"]["n"] == 2 and row["counters"]["policy_calls"]["mean"] > 0


def test_pngs_are_written_and_embedded(report):
    out, data = report
    page = (out / "report.md").read_text()
    assert len(data["plots"]) == 3  # success per table (2) and one learning-curve plot (one environment)
    for relative in data["plots"]:
        png = out / relative
        assert png.read_bytes()[:8] == PNG_SIGNATURE
        assert f"]({relative})" in page
    import matplotlib.image

    assert matplotlib.image.imread(out / data["plots"][0]).shape[2] in (3, 4)  # decodes
    for heading in ("## Table 1", "## Table 2", "## Table 7", "## Learning curves"):
        assert heading in page
    assert "## Problems" not in page


def test_learning_curve_marks_skipped_steps(report):
    _, data = report
    (curve,) = [c for c in data["curves"] if c["label"] == "sera"]
    assert curve["trained"] == [True, False, True, True]
    assert curve["loss"] == [0.9, None, 0.7, 0.5]


def test_settings_split_rows_and_best_of_pairs(runs: Runs, tmp_path: Path):
    other = copy_run(runs.tc / "runs/r0", tmp_path / "depth2")
    fingerprint = json.loads((other / "run.json").read_bytes())
    edit_json(other / "run.json", runtime={**fingerprint["runtime"], "max_depth": 2})
    best = copy_run(runs.tc / "runs/r0", tmp_path / "bo2")
    edit_json(best / "run.json", best_of={"n": 2, "selector": "first", "max_forks": 32, "temperature": 1.0})
    summary = json.loads((best / "summary.json").read_bytes())
    counters = {**summary["counters"], "policy_calls": 2 * summary["counters"]["policy_calls"], "world_clones": 12}
    edit_json(best / "summary.json", counters=counters,
              best_of={"settings": {"n": 2, "selector": "first", "max_forks": 32, "temperature": 1.0}, "groups": 6, "candidates": 12})
    built = build_report([runs.tc, other, best], tmp_path / "out")
    data = json.loads(built.json.read_text())
    rows = {r["label"]: r for r in table(data, "textcraft-synth")["rows"]}
    assert sorted(rows) == ["oracle [runtime.max_depth=2]", "oracle [runtime.max_depth=3]", "oracle best-of-2"]
    assert [len(r["runs"]) for r in rows.values()] == [2, 1, 1]
    (comparison,) = data["table4"]
    assert comparison["baseline"] == "oracle [runtime.max_depth=3]" and comparison["differs"] == []
    base_calls, best_calls = comparison["compute"]["model calls"]
    plain = rows["oracle [runtime.max_depth=3]"]["counters"]["policy_calls"]["mean"] / 3
    assert base_calls == pytest.approx(plain) and best_calls == pytest.approx(2 * summary["counters"]["policy_calls"] / 3)
    assert comparison["selection"] == {"candidates": 12.0, "groups": 6.0}
    assert "## Table 4" in built.markdown.read_text()


def test_cli(runs: Runs, tmp_path: Path):
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(runs.tw), "-o", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r/report.md").is_file() and (tmp_path / "r/report.json").is_file()
    result = runner.invoke(app, ["report", str(tmp_path / "missing"), "-o", str(tmp_path / "r2")])
    assert result.exit_code == 2
    assert f"{tmp_path / 'missing'}: no such file or directory" in result.output
