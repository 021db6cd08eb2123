"""Several seeded samples per task, each its own file; unsafe strings never stop a save; one
rollout that cannot be saved never stops the others."""

import asyncio
import json

from sera.eval.harness import evaluate
from sera.eval.seeds import sample_seed
from sera.eval.store import tree_path
from sera.runtime.config import RuntimeConfig
from sera.types import RolloutTree


def _run(spec, tasks, policy, out, **kwargs):
    return asyncio.run(evaluate(
        tasks, policy, spec.root_env, out, env_name=spec.name, split="val", policy_name="scripted",
        config=RuntimeConfig(max_calls_per_agent=1), show_progress=False, **kwargs,
    ))


def test_each_sample_has_its_own_seeded_file_and_the_summary_counts_each(tmp_path, textcraft, val_tasks, scripted):
    policy = scripted()
    summary = _run(textcraft, val_tasks, policy, tmp_path, samples=3, seed=7)
    assert summary.overall.tasks == 6 and summary.samples == 3 and summary.seed == 7
    seeds = {}
    for task in val_tasks:
        for k in range(3):
            tree = RolloutTree.from_json(tree_path(tmp_path, task.id, k).read_bytes())
            assert tree.task_id == task.id and tree.seed == sample_seed(7, task.id, k)
            seeds[(task.id, k)] = tree.seed
    assert len(set(seeds.values())) == 6, "no two rollouts share a seed"
    assert sorted(policy.seeds) == sorted(seeds.values()), "each rollout's calls carry its seed"
    # Growing the run keeps what is done: only the new samples run.
    _run(textcraft, val_tasks, policy, tmp_path, samples=4, seed=7)
    assert policy.calls == 8


def test_seeds_depend_only_on_base_task_and_sample():
    assert sample_seed(0, "t", 0) == sample_seed(0, "t", 0)
    assert len({sample_seed(b, t, k) for b in (0, 1) for t in ("t", "u") for k in (0, 1)}) == 8
    assert 0 <= sample_seed(123, "x" * 200, 99) < 2**31


def test_a_reply_with_a_lone_surrogate_and_nul_is_saved_escaped_and_resumed(tmp_path, textcraft, val_tasks, scripted):
    policy = scripted("thinking \ud800 aloud\x00 with no code")
    first = _run(textcraft, val_tasks, policy, tmp_path)
    assert first.overall.tasks == 2 and first.overall.errors == 0
    assert first.sanitized_trees == 2 and first.counters["sanitized_strings"] >= 2
    text = tree_path(tmp_path, val_tasks[0].id).read_text(encoding="utf-8")
    tree = RolloutTree.from_json(text)
    assert tree.root.steps[0].completion_text == "thinking \\ud800 aloud\\x00 with no code"
    assert tree.counters["sanitized_strings"] >= 1
    assert json.loads((tmp_path / "summary.json").read_text())["sanitized_trees"] == 2
    again = _run(textcraft, val_tasks, policy, tmp_path)
    assert policy.calls == 2, "the rerun resumes the saved trees"
    assert again.counters == first.counters


def test_a_tree_that_cannot_be_saved_is_counted_and_the_others_finish(tmp_path, textcraft, val_tasks, scripted, monkeypatch, capsys):
    import sera.eval.harness as harness

    real_save = harness.save_tree
    lost = val_tasks[0].id

    def save_or_fail(path, tree):
        if tree.task_id == lost:
            raise OSError(28, "No space left on device")
        return real_save(path, tree)

    monkeypatch.setattr(harness, "save_tree", save_or_fail)
    summary = _run(textcraft, val_tasks, scripted(), tmp_path)
    assert summary.overall.tasks == 2 and summary.overall.errors == 1
    assert summary.errors_by_kind == {"save_failed": 1} and summary.infra_failures == 1
    (failed,) = summary.failed
    assert failed.task_id == lost and lost in failed.message and "No space left" in failed.message
    assert tree_path(tmp_path, val_tasks[1].id).exists() and not tree_path(tmp_path, lost).exists()
    assert lost in capsys.readouterr().err, "the warning is a message: stderr"
    monkeypatch.setattr(harness, "save_tree", real_save)
    again = _run(textcraft, val_tasks, scripted(), tmp_path)
    assert again.overall.errors == 0 and tree_path(tmp_path, lost).exists()


def test_a_tree_of_another_task_in_a_file_is_redone(tmp_path, textcraft, val_tasks, scripted, capsys):
    _run(textcraft, val_tasks, scripted(), tmp_path)
    a, b = (tree_path(tmp_path, t.id) for t in val_tasks)
    a.write_bytes(b.read_bytes())  # a misplaced file: the tree says it is the other task's
    policy = scripted()
    _run(textcraft, val_tasks, policy, tmp_path)
    assert policy.calls == 1
    assert f"holds task {val_tasks[1].id!r}, not {val_tasks[0].id!r}; it will be redone" in capsys.readouterr().err
    assert RolloutTree.from_json(a.read_bytes()).task_id == val_tasks[0].id
