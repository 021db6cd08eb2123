"""The evaluation harness keeps going past a broken rollout and cleans up after a rerun."""

import asyncio

from sera.envs.registry import get_env
from sera.eval.harness import evaluate, tree_path
from sera.eval.store import error_path
from sera.envs.textcraft.tasks import load_split


def test_a_failed_rollout_is_recorded_counted_and_redone_on_rerun(tmp_path):
    spec = get_env("textcraft-synth")
    tasks = load_split("val")[:2]

    def broken_for_first(task):
        if task.id == tasks[0].id:
            raise RuntimeError("environment could not be built")
        return spec.root_env(task)

    def run(make_env):
        return asyncio.run(evaluate(tasks, spec.oracle(tasks), make_env, tmp_path, env_name=spec.name,
                                    split="val", policy_name="oracle", show_progress=False))

    first = run(broken_for_first)
    error_file = error_path(tmp_path, tasks[0].id, 0)
    assert first.overall.successes == 1 and first.overall.errors == 1 and first.overall.tasks == 2
    assert first.errors_by_kind == {"crashed": 1} and first.failed[0].task_id == tasks[0].id
    assert "environment could not be built" in error_file.read_text()
    assert not tree_path(tmp_path, tasks[0].id).exists()

    second = run(spec.root_env)
    assert second.overall.successes == 2 and second.overall.errors == 0
    assert not error_file.exists(), "a stale failure record must go once the task succeeds"
    assert not list((tmp_path / "rollouts").rglob("*.partial"))
