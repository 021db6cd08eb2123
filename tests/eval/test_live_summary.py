"""A run's summary while it goes and across invocations: rewritten partial after finished trees,
final at the end, its wall time summed over the invocations; progress reported, not printed by
library calls; resume messages on stderr."""

from __future__ import annotations

import asyncio
import io
import json
import time

from sera.eval.harness import evaluate, load_finished
from sera.eval.progress import EvalProgress, RunProgress, status_line
from sera.eval.store import tree_path
from sera.eval.summary import EvalSummary
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import Completion


class SummaryReader:
    """Replies like `ScriptedPolicy` (one call per rollout) and reads OUT/summary.json at each call."""

    def __init__(self, out, delay_s: float = 0.0) -> None:
        self.out, self.delay_s = out, delay_s
        self.seen: list[dict | None] = []

    async def __call__(self, messages, sampling):
        path = self.out / "summary.json"
        self.seen.append(json.loads(path.read_text()) if path.exists() else None)
        await asyncio.sleep(self.delay_s)
        return Completion(text="no code here")


def _evaluate(tasks, policy, textcraft, out, **kwargs):
    return asyncio.run(evaluate(
        tasks, policy, textcraft.root_env, out, env_name=textcraft.name, split="val", policy_name="scripted",
        config=RuntimeConfig(max_calls_per_agent=1), concurrency=1, **kwargs,
    ))


def test_the_summary_is_rewritten_partial_after_every_tree_and_final_at_the_end(tmp_path, textcraft):
    from sera.envs.textcraft.tasks import load_split

    tasks, out = load_split("val")[:3], tmp_path / "run"
    policy = SummaryReader(out)
    final = _evaluate(tasks, policy, textcraft, out, summary_every_s=0)
    # One rollout at a time: rollout i starts when i are finished, and the summary says so.
    assert [(s["complete"], s["finished_rollouts"], s["planned_rollouts"]) for s in policy.seen] == [
        (False, 0, 3), (False, 1, 3), (False, 2, 3)]
    assert [s["overall"]["tasks"] for s in policy.seen] == [0, 1, 2]  # counts cover finished rollouts only
    assert all(s["failed"] == [] for s in policy.seen)  # a rollout still to run is not an error
    assert final.complete and final.finished_rollouts == final.planned_rollouts == 3
    written = EvalSummary.model_validate_json((out / "summary.json").read_bytes())
    assert written == final and not list(out.glob("*.partial"))


def test_rewrites_are_throttled_but_the_first_and_last_are_always_written(tmp_path, textcraft, val_tasks):
    out = tmp_path / "run"
    policy = SummaryReader(out)
    final = _evaluate(val_tasks, policy, textcraft, out, summary_every_s=3600)
    assert [s["finished_rollouts"] for s in policy.seen] == [0, 0]  # only the starting summary
    assert final.complete and json.loads((out / "summary.json").read_text())["complete"] is True


def test_wall_time_sums_the_invocations_of_a_resumed_run(tmp_path, textcraft):
    from sera.envs.textcraft.tasks import load_split

    tasks, out = load_split("val")[:2], tmp_path / "run"
    first = _evaluate(tasks[:1], SummaryReader(out, delay_s=0.4), textcraft, out)  # a slow first invocation
    assert first.wall_time_s >= 0.4
    started = time.perf_counter()
    second = _evaluate(tasks, SummaryReader(out), textcraft, out)  # grows the run: a resume
    elapsed = time.perf_counter() - started
    assert first.wall_time_s < second.wall_time_s <= first.wall_time_s + elapsed
    assert second.overall.tasks == 2 and second.complete


def test_progress_goes_to_the_callback_and_library_calls_print_nothing(tmp_path, textcraft, val_tasks, scripted, capsys):
    seen: list[RunProgress] = []
    _evaluate(val_tasks, scripted(), textcraft, tmp_path / "run", progress=seen.append)
    assert [(p.done, p.total, p.finished) for p in seen] == [(0, 2, False), (1, 2, False), (2, 2, False), (2, 2, True)]
    assert seen[-1].rate is not None and seen[-1].rate > 0 and seen[-1].eta_s == 0.0
    _evaluate(val_tasks, scripted(), textcraft, tmp_path / "other")
    assert capsys.readouterr() == ("", "")


def test_plain_progress_lines_are_periodic_with_count_rate_and_eta():
    now = [0.0]
    stream = io.StringIO()
    display = EvalProgress(stream, every_s=10.0, clock=lambda: now[0])
    assert not display.interactive

    def report(done, t, finished=False):
        now[0] = t
        display(RunProgress(label="tc/val (run)", total=100, done=done, successes=done, errors=0, resumed=10,
                            elapsed_s=t, finished=finished))

    report(10, 0.0)
    report(20, 5.0)   # within 10 s of the last line: not shown
    report(30, 10.0)
    report(100, 12.0, finished=True)  # the end is always shown
    assert stream.getvalue().splitlines() == display.lines == [
        "tc/val (run): 10/100 | ok 10 | errors 0 | ? rollouts/s | ETA ?",
        "tc/val (run): 30/100 | ok 30 | errors 0 | 2.00 rollouts/s | ETA 0:35",
        "tc/val (run): 100/100 | ok 100 | errors 0 | 7.50 rollouts/s | ETA 0:00",
    ]
    assert status_line(RunProgress("x", 10, 5, 4, 1, 0, 3600.0)) == "x: 5/10 | ok 4 | errors 1 | 0.00 rollouts/s | ETA 1:00:00"


def test_the_retry_message_goes_to_stderr(tmp_path, val_tasks, capsys):
    from sera.types import AgentNode, RolloutTree

    from sera.eval.seeds import sample_seed

    task = val_tasks[0]
    root = AgentNode(id="n0", goal="g", budget=1, error="policy call failed: SamplerError: endpoint_down: cannot connect")
    tree = RolloutTree(task_id=task.id, env="textcraft-synth", root_id="n0", nodes={"n0": root},
                       seed=sample_seed(0, task.id, 0))
    path = tree_path(tmp_path, task.id, 0)
    path.parent.mkdir(parents=True)
    path.write_text(tree.to_json())
    done, _ = load_finished(tmp_path, [task])
    assert done == {}
    out, err = capsys.readouterr()
    assert out == "" and "retrying 1 rollouts that failed for infrastructure reasons" in err
