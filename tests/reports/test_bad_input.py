"""`sera report` on bad input: each unusable input is one problem naming its file, and the rest
of the report still renders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from sera.cli import app
from sera.eval.names import task_file_name
from sera.eval.summary import summarise
from sera.reports.writer import build_report
from sera.types import RolloutTree

from .conftest import Runs, copy_run, edit_json, step, write_train_run


def report(paths: list[Path], out: Path) -> tuple[dict, str]:
    built = build_report(paths, out)
    return json.loads(built.json.read_text()), built.markdown.read_text()


def problems(data: dict) -> dict[str, str]:
    return {p["path"]: p["message"] for p in data["problems"]}


def rows(data: dict, env: str = "textcraft-synth") -> list[dict]:
    return [r for t in data["table1"] if t["env"] == env for r in t["rows"]]


def make_shards(runs: Runs, folder: Path, count: int) -> list[Path]:
    """`folder/shards/<i>-of-<count>/` cut from run r0 as `sera eval --shard` lays them out."""
    source = runs.tc / "runs/r0"
    selection = [t.id for t in runs.tc_tasks]
    made = []
    for i in range(count):
        shard = folder / "shards" / f"{i}-of-{count}"
        tasks = runs.tc_tasks[i::count]
        for task in tasks:
            copy_run(source / "rollouts" / task_file_name(task.id), shard / "rollouts" / task_file_name(task.id))
        (shard / "run.json").write_bytes((source / "run.json").read_bytes())
        trees = {(t.id, 0): RolloutTree.from_json((shard / "rollouts" / task_file_name(t.id) / "0.json").read_bytes()) for t in tasks}
        summary = summarise(tasks, trees, env="textcraft-synth", split="val", policy="oracle", wall_time_s=1.0, seed=0)
        (shard / "summary.json").write_text(summary.model_dump_json(), encoding="utf-8")
        (shard / "shard.json").write_text(json.dumps({"index": i, "count": count, "samples": 1, "selection": selection}), encoding="utf-8")
        made.append(shard)
    return made


def test_environments_are_never_averaged_together(runs: Runs, tmp_path: Path):
    data, _ = report([runs.tc / "runs/r0", runs.tw / "r0"], tmp_path / "out")
    assert {(t["env"], t["source"]) for t in data["table1"]} == {("textcraft-synth", "val"), ("textworld-sync", "dev")}
    paths = {t["env"]: [p for row in t["rows"] for run in row["runs"] for p in run["paths"]] for t in data["table1"]}
    assert paths == {"textcraft-synth": [str(runs.tc / "runs/r0")], "textworld-sync": [str(runs.tw / "r0")]}


def test_a_shard_set_sums_and_a_stray_model_is_left_out(runs: Runs, tmp_path: Path):
    good = make_shards(runs, tmp_path / "good", 3)
    data, _ = report([tmp_path / "good"], tmp_path / "out-good")
    assert data["problems"] == []
    (row,) = rows(data)  # three shards of one seed summed into one run of 3 tasks
    assert row["tasks"] == 3 and row["overall"]["mean"] == 1.0 and row["runs"][0]["paths"] == [str(p) for p in good]

    bad = make_shards(runs, tmp_path / "bad", 3)
    edit_json(bad[2] / "run.json", model="other-model")
    data, page = report([tmp_path / "bad"], tmp_path / "out-bad")
    found = problems(data)
    assert list(found) == [str(bad[2] / "run.json")]
    assert "model 'other-model'" in found[str(bad[2] / "run.json")] and found[str(bad[2] / "run.json")].endswith("left out")
    assert str(bad[2] / "run.json") in page
    (row,) = rows(data)  # the rest of the set still renders
    assert row["tasks"] == 2 and row["runs"][0]["paths"] == [str(p) for p in bad[:2]]

    partial = make_shards(runs, tmp_path / "partial", 3)
    shutil.rmtree(partial[1])
    data, _ = report([tmp_path / "partial"], tmp_path / "out-partial")
    assert problems(data) == {str(tmp_path / "partial/shards"): "shard set lacks 1/3: its run covers only the tasks of the shards present"}


def test_merged_run_is_read_instead_of_its_shards(runs: Runs, tmp_path: Path):
    merged = copy_run(runs.tc / "runs/r0", tmp_path / "merged")
    make_shards(runs, merged, 2)
    data, _ = report([merged], tmp_path / "out")
    assert data["problems"] == []
    (row,) = rows(data)
    assert row["runs"][0]["paths"] == [str(merged)]
    assert any("a merged run" in n for n in data["notes"])


def test_duplicate_run_is_left_out_and_named(runs: Runs, tmp_path: Path):
    twin = copy_run(runs.tc / "runs/r0", tmp_path / "twin")
    data, _ = report([runs.tc, twin], tmp_path / "out")
    assert "3 of the same tasks" in problems(data)[str(twin)]
    (row,) = rows(data)
    assert len(row["runs"]) == 2  # seeds 0 and 1, each once


def test_missing_summary_is_recomputed_from_the_trees(runs: Runs, tmp_path: Path):
    run = copy_run(runs.tc / "runs/r1", tmp_path / "r1")
    original = json.loads((run / "summary.json").read_bytes())
    (run / "summary.json").unlink()
    data, _ = report([run], tmp_path / "out")
    assert "recomputed from the trees of 3 tasks" in problems(data)[str(run / "summary.json")]
    (row,) = rows(data)
    assert row["runs"][0]["bands"] == original["by_difficulty"]
    assert row["runs"][0]["counters"] == original["counters"]


def test_corrupt_rollout_is_named_and_counted_as_an_error(runs: Runs, tmp_path: Path):
    run = copy_run(runs.tc / "runs/r0", tmp_path / "r0")
    (run / "summary.json").unlink()
    easy = next(t for t in runs.tc_tasks if t.difficulty == "easy")
    tree = run / "rollouts" / task_file_name(easy.id) / "0.json"
    tree.write_text('{"task_id": "tor', encoding="utf-8")
    data, page = report([run, runs.tw], tmp_path / "out")
    assert problems(data)[str(tree)].startswith("corrupt rollout")
    (row,) = rows(data)
    assert row["runs"][0]["bands"]["easy"] == {"tasks": 2, "successes": 1, "errors": 1, "success_rate": 0.5}
    assert len(rows(data, "textworld-sync")) == 1  # the rest renders
    assert "## Table 1" in page and str(tree) in page


def test_corrupt_summary_is_named_then_recomputed(runs: Runs, tmp_path: Path):
    run = copy_run(runs.tc / "runs/r0", tmp_path / "r0")
    (run / "summary.json").write_text("{not json", encoding="utf-8")
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "summary.json").write_text('{"env": "textcraft-synth"}', encoding="utf-8")
    data, _ = report([run, lone], tmp_path / "out")
    found = problems(data)
    assert found[str(run / "summary.json")].startswith("unreadable")
    assert found[str(lone / "summary.json")].startswith("not an evaluation summary")
    assert "nothing to recompute it from" in found[str(lone)]
    (row,) = rows(data)
    assert row["overall"]["mean"] == 1.0


def test_missing_and_damaged_metrics(runs: Runs, tmp_path: Path):
    no_metrics = write_train_run(tmp_path / "t1", [])
    (no_metrics / "metrics.jsonl").unlink()
    torn = write_train_run(tmp_path / "t2", [step(0, "execution", True, 0.5, {"step": 1.0}, loss=1.0),
                                             step(1, "execution", True, 0.5, {"step": 2.0}, loss=1.0)], seed=8)
    lines = (torn / "metrics.jsonl").read_text().splitlines()
    (torn / "metrics.jsonl").write_text("\n".join([lines[0], '{"step": 1, "sta', lines[1]]) + "\n", encoding="utf-8")
    data, page = report([no_metrics, torn, runs.tc], tmp_path / "out")
    found = problems(data)
    assert found[str(no_metrics / "metrics.jsonl")].startswith("missing")
    assert "skipped" in found[f"{torn / 'metrics.jsonl'}:2"]
    (t2,) = [t for t in data["table7"]["train"] if t["path"] == str(torn)]
    assert t2["stages"][0]["seconds"] == 3.0  # both good lines, around the broken one
    assert len(rows(data)) == 1 and "## Learning curves" in page


def test_cli_names_problems_one_per_line_and_exits_1(runs: Runs, tmp_path: Path):
    run = copy_run(runs.tc / "runs/r0", tmp_path / "r0")
    (run / "run.json").unlink()
    result = CliRunner().invoke(app, ["report", str(run), str(tmp_path / "nowhere"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert f"problem: {run / 'run.json'}: missing: the run's settings are unknown; compared by environment, split, policy and seed only" in lines
    assert f"problem: {tmp_path / 'nowhere'}: no such file or directory" in lines
    assert (tmp_path / "out/report.md").is_file()
