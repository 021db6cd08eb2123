"""Our TextWorld-Sync JSONL task files: round trip, atomic writes, and strict, well-named errors."""

from __future__ import annotations

import json

import pytest

from sera.envs.textworld.spec import FAMILIES, SyncTaskSpec
from sera.envs.task_file import TaskFileError
from sera.envs.textworld.tasks import detect_format, load_split, load_split_specs, load_task_specs, load_tasks, write_tasks


@pytest.fixture(scope="module")
def dev_specs() -> list[SyncTaskSpec]:
    return load_split_specs("dev")


def _rows(specs: list[SyncTaskSpec]) -> list[dict]:
    return [s.model_dump(mode="json") for s in specs]


def _write_rows(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _error(path) -> str:
    with pytest.raises(TaskFileError) as err:
        load_task_specs(path)
    return str(err.value)


def test_write_then_read_round_trips_a_whole_split(tmp_path, dev_specs):
    path = tmp_path / "dev.jsonl"
    assert write_tasks(dev_specs, path) == 200
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 200
    assert detect_format(path) == "sera"
    assert load_task_specs(path) == dev_specs
    assert load_tasks(path) == load_split("dev")


def test_runtime_tasks_can_be_written_back(tmp_path):
    tasks = load_split("dev")[:3]
    path = tmp_path / "three.jsonl"
    write_tasks(tasks, path)
    assert load_tasks(path) == tasks


def test_write_is_atomic_and_refuses_duplicates(tmp_path, dev_specs):
    path = tmp_path / "tasks.jsonl"
    write_tasks(dev_specs[:2], path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="duplicate task id .*nothing was written"):
        write_tasks([dev_specs[0], dev_specs[1], dev_specs[0]], path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.jsonl"]  # no temporary file left


def test_bad_json_names_file_line_and_task(tmp_path, dev_specs):
    path = tmp_path / "t.jsonl"
    good = json.dumps(_rows(dev_specs[:1])[0])
    broken = json.dumps(_rows(dev_specs[1:2])[0])[:-1]  # lost its closing brace
    path.write_text(good + "\n" + broken + "\n", encoding="utf-8")
    message = _error(path)
    assert message.startswith(f"{path} line 2 (task {dev_specs[1].task_id}): invalid JSON")


def test_missing_field_names_file_line_task_and_field(tmp_path, dev_specs):
    rows = _rows(dev_specs[:3])
    del rows[2]["rooms"]
    path = tmp_path / "t.jsonl"
    _write_rows(path, rows)
    assert _error(path) == f"{path} line 3 (task {dev_specs[2].task_id}): field rooms: Field required"


def test_unknown_family_lists_the_allowed_ones(tmp_path, dev_specs):
    rows = _rows(dev_specs[:1])
    rows[0]["family"] = "fork-joinn"
    path = tmp_path / "t.jsonl"
    _write_rows(path, rows)
    message = _error(path)
    assert f"{path} line 1 (task {dev_specs[0].task_id}): field family: unknown family 'fork-joinn'" in message
    assert f"allowed: {', '.join(FAMILIES)}" in message


def test_unknown_difficulty_lists_the_allowed_ones(tmp_path, dev_specs):
    rows = _rows(dev_specs[:1])
    rows[0]["difficulty"] = "insane"
    path = tmp_path / "t.jsonl"
    _write_rows(path, rows)
    assert "field difficulty: unknown difficulty 'insane'; allowed: easy, medium, hard, extreme" in _error(path)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda r: r.__setitem__("shared_budget", "100"), "field shared_budget: Input should be a valid integer, got '100'"),
        (lambda r: r["dishes"][0]["ingredients"][1].__setitem__("cook", "boiledd"), "field dishes[0].ingredients[1].cook: Input should be"),
        (lambda r: r.__setitem__("colour", "red"), "field colour: Extra inputs are not permitted"),
        (lambda r: r.__setitem__("rooms", ["kitchen", "garden"]), "field (task): Value error, rooms must be a prefix"),
        (lambda r: r.__setitem__("task_id", ""), "field task_id: expected a non-empty string"),
    ],
)
def test_wrong_values_name_the_field(tmp_path, dev_specs, mutate, expected):
    rows = _rows(dev_specs[:2])
    mutate(rows[1])
    path = tmp_path / "t.jsonl"
    _write_rows(path, rows)
    message = _error(path)
    assert message.startswith(f"{path} line 2")
    assert expected in message


def test_duplicate_ids_and_stray_blank_lines_are_errors(tmp_path, dev_specs):
    rows = _rows(dev_specs[:2])
    path = tmp_path / "t.jsonl"
    _write_rows(path, [rows[0], rows[1], rows[0]])
    assert _error(path) == f"{path} line 3: field task_id: duplicate id {dev_specs[0].task_id!r} (first on line 1)"
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n\n\n", encoding="utf-8")
    assert _error(path) == f"{path} line 2: blank line between rows"
    path.write_text(json.dumps(rows[0]) + "\n\n\n", encoding="utf-8")  # trailing blank lines are fine
    assert len(load_task_specs(path)) == 1


def test_unrecognised_files_are_refused(tmp_path):
    path = tmp_path / "other.jsonl"
    path.write_text('{"goal": "Craft 2x m3_i5", "id": "textcraft_synth.val.1"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not a TextWorld-Sync task file"):
        load_tasks(path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="contains no tasks"):
        load_tasks(empty)


def test_find_task_in_a_split_names_close_ids():
    from sera.envs.textworld.tasks import UnknownTaskError, find_task

    dev = load_split("dev")
    task = find_task(dev, "cookingworld_multidish_dev_fork_join_easy_0007")
    assert task.id == "cookingworld_multidish_dev_fork_join_easy_0007"
    with pytest.raises(UnknownTaskError, match="did you mean 'cookingworld_multidish_dev_fork_join_easy_0007'"):
        find_task(dev, "cookingworld_multidish_dev_fork_join_easy_007")
