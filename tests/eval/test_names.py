"""File names derived from task ids stay inside --out, are short, and never collide."""

import asyncio

import pytest

from sera.eval.harness import evaluate
from sera.eval.names import task_file_name
from sera.eval.store import tree_path
from sera.runtime.config import RuntimeConfig
from sera.types import RolloutTree

HOSTILE = ["../../x", "..", ".", "a/b", "/etc/passwd", "a\x00b", "é" * 200, "x" * 300, "a\\b", " ", ".hidden"]


def test_plain_ids_are_their_own_names():
    assert task_file_name("textcraft_synth.val.0") == "textcraft_synth.val.0"
    assert task_file_name("tw-sync.test.1_a") == "tw-sync.test.1_a"


@pytest.mark.parametrize("task_id", HOSTILE)
def test_hostile_ids_get_safe_bounded_names(task_id):
    name = task_file_name(task_id)
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert name not in (".", "..") and not name.startswith(".")
    assert len(name.encode()) <= 80 and "+" in name


def test_ids_that_sanitise_alike_get_different_names():
    ids = ["a/b", "a?b", "a_b", "a b", "a//b", "A/b"]
    names = [task_file_name(i) for i in ids]
    assert len(set(names)) == len(ids), names


def test_an_evaluation_of_hostile_ids_writes_only_inside_out(tmp_path, textcraft, val_tasks, scripted):
    out = tmp_path / "deep" / "out"
    base = val_tasks[0]
    tasks = [base.model_copy(update={"id": task_id}) for task_id in ["../../x", "a/b", "a\x00b", "y" * 300]]
    policy = scripted()
    summary = asyncio.run(evaluate(
        tasks, policy, textcraft.root_env, out, env_name=textcraft.name, split="val", policy_name="scripted",
        config=RuntimeConfig(max_calls_per_agent=1), show_progress=False,
    ))
    assert summary.overall.tasks == 4 and summary.overall.errors == 0
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(out in p.parents for p in written), written
    for task in tasks:  # saved JSON-safe: the NUL of an id is escaped in the tree
        assert RolloutTree.from_json(tree_path(out, task.id).read_bytes()).task_id == task.id.replace("\x00", "\\x00")
    again = asyncio.run(evaluate(
        tasks, policy, textcraft.root_env, out, env_name=textcraft.name, split="val", policy_name="scripted",
        config=RuntimeConfig(max_calls_per_agent=1), show_progress=False,
    ))
    assert policy.calls == 4 and again.overall.tasks == 4, "the rerun resumes every tree, hostile ids included"
