"""`run_eval`, `play_task` and `write_split` from Python: what `sera eval`, `sera play` and
`sera data` do, without the command line (README, "Use from Python")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sera.envs.textcraft.tasks import load_split, write_split, write_tasks
from sera.eval.play import play_task
from sera.eval.run import EvalJob, EvalSetupError, merge_shards, run_eval


def _notes() -> tuple[list[str], object]:
    notes: list[str] = []
    return notes, notes.append


def test_run_eval_writes_trees_and_summary_and_returns_them(tmp_path):
    out = tmp_path / "run"
    result = run_eval(EvalJob(out=out, limit=2), log=_notes()[1])
    assert result.run_dir == out and result.aggregate is None
    (summary,) = result.summaries
    assert summary.overall.tasks == 2 and summary.overall.successes == 2
    assert json.loads((out / "summary.json").read_text())["overall"]["tasks"] == 2
    assert len(list((out / "rollouts").glob("*/*.json"))) == 2
    assert result.over_infra_limit(0.1) is None


def test_run_eval_on_your_own_task_file(tmp_path):
    tasks = tmp_path / "mine.jsonl"
    write_tasks(load_split("val")[3:4], tasks)
    result = run_eval(EvalJob(out=str(tmp_path / "run"), tasks_file=str(tasks)), log=_notes()[1])  # str paths work too
    assert [t.id for t in result.slots[0].tasks] == ["textcraft_synth.val.3"]


@pytest.mark.parametrize(("job", "message"), [
    (dict(env="bogus"), "unknown environment 'bogus'"),
    (dict(split="bogus"), "unknown split 'bogus' for textcraft-synth"),
    (dict(task_ids=("nope",)), "no task with id 'nope'"),
    (dict(runs=0), "--runs 0: give at least one run"),
    (dict(shard="3/2"), "3/2"),
    (dict(best_of=0), "--best-of must be at least 1"),
    (dict(best_of=2, selector="bogus"), "unknown --selector 'bogus'"),
    (dict(best_of=2), "the oracle is a script with no model"),
    (dict(policy="openai", connect_timeout=-1.0), "--connect-timeout"),
    (dict(protocol="bogus"), "bogus"),
    (dict(policy="bogus"), "bogus"),
])
def test_bad_input_is_one_line_naming_the_problem_and_writes_nothing(tmp_path, job, message):
    out = tmp_path / "run"
    with pytest.raises(EvalSetupError) as caught:
        run_eval(EvalJob(out=out, **job), log=_notes()[1])
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (out / "summary.json").exists()


def test_an_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(EvalSetupError, match="is a file, not a folder"):
        run_eval(EvalJob(out=tmp_path / "f"))
    with pytest.raises(EvalSetupError, match="is a file, not a folder"):
        merge_shards(tmp_path / "f")


def test_shards_merge_into_one_summary(tmp_path):
    out = tmp_path / "run"
    for i in range(2):
        run_eval(EvalJob(out=out, limit=2, shard=f"{i}/2"), log=_notes()[1])
    merged = merge_shards(out)
    ((run_dir, summary),) = merged.runs
    assert run_dir == out and summary.overall.tasks == 2
    assert json.loads((out / "summary.json").read_text())["overall"]["tasks"] == 2


def test_new_run_writes_beside_and_says_where(tmp_path):
    out = tmp_path / "run"
    run_eval(EvalJob(out=out, limit=1), log=_notes()[1])
    notes, log = _notes()
    result = run_eval(EvalJob(out=out, limit=1, seed=5, new_run=True), log=log)
    assert result.run_dir == Path(f"{out}.2") and notes == [f"{out} holds another run; writing to {out}.2"]


def test_play_task_runs_any_policy_and_saves_the_tree(tmp_path, textcraft):
    (task,) = load_split("val")[:1]
    result = play_task(task, "textcraft-synth", textcraft.oracle([task]), out=tmp_path / "tree.json")
    assert result.tree.root_success and result.problem is None
    assert json.loads((tmp_path / "tree.json").read_text())["task_id"] == task.id


def test_write_split_refuses_an_unknown_split_and_a_folder(tmp_path):
    with pytest.raises(ValueError, match="unknown split 'test'; known: train, val"):
        write_split("test", tmp_path / "x.jsonl")
    with pytest.raises(IsADirectoryError, match="is a folder; give the JSONL file to write"):
        write_split("val", tmp_path)
    assert write_split("val", tmp_path / "sub" / "val.jsonl") == 632
    assert len((tmp_path / "sub" / "val.jsonl").read_text().splitlines()) == 632
