"""`--out` checks: a file, an unwritable folder, the old layout, another run's fingerprint, a
run already in progress; `--new-run`; `sera data --out` naming a folder; corrupt task files."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sera.cli import app
from sera.envs.textcraft.tasks import published_task_file
from sera.eval.lock import run_lock

runner = CliRunner()


def _eval(out: Path, *extra: str):
    return runner.invoke(app, ["eval", "--limit", "1", "--out", str(out), "--no-progress", *extra])


def _line(result) -> str:
    return " ".join(result.output.split())


def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path):
    out = tmp_path / "results.json"
    out.write_text("{}")
    result = _eval(out)
    assert result.exit_code == 2 and f"--out {out} is a file, not a folder" in _line(result)


def test_an_out_that_cannot_be_created_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    result = _eval(tmp_path / "file" / "run")
    assert result.exit_code == 2 and "is not a writable folder" in _line(result)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_read_only_out_is_refused(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    result = _eval(out)
    assert result.exit_code == 2 and "is not a writable folder" in _line(result)


def test_an_out_of_the_old_layout_is_refused(tmp_path):
    out = tmp_path / "old"
    (out / "rollouts").mkdir(parents=True)
    (out / "rollouts" / "textcraft_synth.val.0.json").write_text("{}")
    result = _eval(out)
    assert result.exit_code == 2
    assert "holds results in the old layout" in _line(result) and "evaluate into a new --out" in _line(result)


def test_a_rerun_with_other_settings_names_the_differences_and_new_run_writes_elsewhere(tmp_path):
    out = tmp_path / "run"
    assert _eval(out).exit_code == 0
    recorded = json.loads((out / "run.json").read_text())
    assert {"env", "source", "tasks_file_sha256", "policy", "model", "rules", "seed", "sampling", "runtime"} <= recorded.keys()
    refused = _eval(out, "--temperature", "0.5", "--max-depth", "2")
    assert refused.exit_code == 2
    text = _line(refused)
    assert "sampling.temperature: 0.0 -> 0.5" in text and "runtime.max_depth: 3 -> 2" in text and "--new-run" in text
    moved = _eval(out, "--temperature", "0.5", "--max-depth", "2", "--new-run")
    assert moved.exit_code == 0, moved.output
    second = tmp_path / "run.2"
    assert json.loads((second / "run.json").read_text())["sampling"]["temperature"] == 0.5
    again = _eval(out, "--temperature", "0.5", "--max-depth", "2", "--new-run")
    assert again.exit_code == 0 and not (tmp_path / "run.3").exists(), "the same --new-run resumes the same folder"
    assert _eval(out, "--limit", "2").exit_code == 0, "selecting more tasks is a resume, not another run"


def test_a_changed_task_file_is_another_run(tmp_path):
    rows = published_task_file("val").read_text().splitlines()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(rows[:2]) + "\n")
    out = tmp_path / "run"
    assert _eval(out, "--tasks-file", str(tasks)).exit_code == 0
    tasks.write_text("\n".join(rows[:3]) + "\n")
    result = _eval(out, "--tasks-file", str(tasks))
    assert result.exit_code == 2 and "tasks_file_sha256:" in _line(result)


def test_a_second_run_into_the_same_out_refuses(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with run_lock(out):
        result = _eval(out)
    assert result.exit_code == 2
    assert f"{out} is in use by another evaluation (pid {os.getpid()})" in _line(result)
    assert _eval(out).exit_code == 0, "the lock goes with its holder"


@pytest.mark.parametrize("command", [["textcraft", "--split", "val"], ["textworld", "--split", "test"]])
def test_data_out_that_is_a_folder_is_a_one_line_error(tmp_path, command):
    result = runner.invoke(app, ["data", *command, "--out", str(tmp_path)])
    assert result.exit_code == 2 and f"--out {tmp_path} is a folder" in _line(result)


def test_a_deeply_nested_task_row_names_its_line(tmp_path):
    good = published_task_file("val").read_text().splitlines()[0]
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(good + "\n" + "[" * 100_000 + "\n")
    result = _eval(tmp_path / "o", "--tasks-file", str(bad))
    assert result.exit_code == 2 and "tasks.jsonl line 2: invalid JSON: nested too deeply" in _line(result)
    assert "RecursionError" not in result.output


@pytest.mark.parametrize(("task_id", "message"), [
    ("", "a task id must be a non-empty string"),
    ("a\x00b", "contains the control character"),
    ("x" * 201, "task id is 201 characters long (at most 200)"),
])
def test_bad_task_ids_are_refused_naming_the_line(tmp_path, task_id, message):
    from sera.envs.task_file import check_task_id, TaskFileError

    with pytest.raises(TaskFileError, match="t.jsonl line 3: field id"):
        check_task_id(task_id, "t.jsonl", 3)
    row = json.loads(published_task_file("val").read_text().splitlines()[0])
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(json.dumps({**row, "id": task_id}) + "\n")
    result = _eval(tmp_path / "o", "--tasks-file", str(bad))
    assert result.exit_code == 2 and "tasks.jsonl line 1" in _line(result)
