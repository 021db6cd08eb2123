"""Judge and endpoint failures are counted apart from model failures in every summary and report:
a best-of-N tree whose external judge failed is a judge error (infrastructure, retried), and
`EvalSummary`, the `--runs` aggregate, a merged summary, the console report and `sera report`
each show the infrastructure and judge counts."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from rich.console import Console

from sera.eval.aggregate import aggregate_runs
from sera.eval.failures import classify
from sera.eval.harness import evaluate
from sera.reports.console import print_runs_summary, print_summary
from sera.eval.summary import summarise
from sera.judge.client import JsonReply
from sera.launchers.best_of_n import BestOf, best_of_launcher
from sera.runtime.config import RuntimeConfig
from sera.types import AgentNode, ForkBranch, ForkGroup, ModelCall, RolloutTree

DOWN = "rubric call failed: endpoint_down: cannot connect to http://judge/v1"


class DeadJudge:
    """A `JudgeClient` stand-in whose every request fails after its retries."""

    def __init__(self, error: str = DOWN) -> None:
        self.error, self.calls = error, 0

    async def complete_json(self, messages, *, role, operation, temperature=None):
        self.calls += 1
        return JsonReply(valid=False, error=self.error)


def _tree(*, kind="best_of", rubric_error=None, score_error=None, external=True, success=True):
    root = AgentNode(id="n0", goal="g", budget=1)
    call = lambda role, error: ModelCall(role=role, prompt_messages=[], external=external, error=error)  # noqa: E731
    group = ForkGroup(id="g0", parent_id="n0", parent_step=0, child_goal="c", kind=kind,
                      rubric_call=call("rubric", rubric_error),
                      branches=[ForkBranch(index=0, node_id="n1", score_call=call("score", score_error))])
    return RolloutTree(task_id="t", env="e", root_id="n0", nodes={"n0": root}, fork_groups=[group], root_success=success)


@pytest.mark.parametrize(("tree", "kind"), [
    (_tree(rubric_error=DOWN), "judge_endpoint"),
    (_tree(score_error="score call failed: timeout: no reply within total_timeout_s=300"), "judge_endpoint"),
    (_tree(rubric_error="invalid JSON reply: Expecting value"), "judge_invalid"),
    (_tree(rubric_error="invalid rubric: 3 criteria, need 4-8"), "judge_invalid"),
])
def test_a_failed_judge_call_in_a_best_of_group_is_a_judge_error(tree, kind):
    found = classify(tree)
    assert found is not None and (found.kind, found.infra) == (kind, True)
    assert found.message.startswith("group g0 ")


@pytest.mark.parametrize("tree", [
    _tree(),  # the judge answered
    _tree(rubric_error="invalid rubric: x", external=False),  # the policy's own rubric: the model's outcome
    _tree(kind="counterfactual", rubric_error=DOWN),  # training data, handled by the credit rules
])
def test_other_groups_are_not_judge_errors(tree):
    assert classify(tree) is None


def test_the_root_failure_is_named_before_the_judge():
    tree = _tree(rubric_error=DOWN)
    tree.nodes["n0"].error = "policy call failed: SamplerError: server_error: HTTP 500"
    assert classify(tree).kind == "server_error"


def test_a_dead_judge_makes_a_best_of_rollout_a_judge_error_that_a_rerun_retries(tmp_path, textcraft, capsys):
    tasks = [t for t in textcraft.load_split("val") if t.id == "textcraft_synth.val.3"]  # the oracle delegates
    policy, judge, settings = textcraft.oracle(tasks), DeadJudge(), BestOf(n=2, selector="judge", judge_model="kimi")

    def run():
        return asyncio.run(evaluate(
            tasks, policy, textcraft.root_env, tmp_path, env_name=textcraft.name, split="val", policy_name="oracle",
            config=RuntimeConfig(sampling=textcraft.sampling), best_of=settings.record(),
            launcher=lambda seed: best_of_launcher(settings, policy, judge=judge, seed=seed),
        ))

    summary = run()
    assert judge.calls >= 1
    # The first candidate was committed and solved the task, but nobody selected it: not a result.
    assert summary.overall.successes == 0 and summary.overall.errors == 1
    assert (summary.judge_errors, summary.infra_failures, summary.errors_by_kind) == (1, 1, {"judge_endpoint": 1})
    capsys.readouterr()
    run()
    assert "retrying 1 rollouts" in capsys.readouterr().err


def _summaries(tasks):
    """Three summaries: one clean, one with a judge error, one with an endpoint failure too."""
    judge = _tree(rubric_error=DOWN)
    down = RolloutTree(task_id=tasks[1].id, env="textcraft-synth", root_id="n0", nodes={"n0": AgentNode(
        id="n0", goal="g", budget=1, error="policy call failed: SamplerError: endpoint_down: cannot connect")})
    ok = lambda task: RolloutTree(task_id=task.id, env="textcraft-synth", root_id="n0",  # noqa: E731
                                  nodes={"n0": AgentNode(id="n0", goal="g", budget=1)}, root_success=True)
    judge.task_id = tasks[0].id
    runs = [{(t.id, 0): ok(t) for t in tasks}, {(tasks[0].id, 0): judge, (tasks[1].id, 0): ok(tasks[1])},
            {(tasks[0].id, 0): judge, (tasks[1].id, 0): down}]
    out = []
    for trees in runs:
        failures = {key: f for key, tree in trees.items() if (f := classify(tree)) is not None}
        out.append(summarise(tasks, trees, env="textcraft-synth", split="val", policy="p", wall_time_s=1.0,
                             failures=failures))
    return out


def test_summaries_aggregate_and_console_report_count_infrastructure_and_judge_errors(val_tasks):
    summaries = _summaries(val_tasks)
    assert [(s.overall.errors, s.infra_failures, s.judge_errors) for s in summaries] == [(0, 0, 0), (1, 1, 1), (2, 2, 1)]
    runs = aggregate_runs(summaries, ["runs/r0", "runs/r1", "runs/r2"], [0, 1, 2])
    assert [(e.infra_failures, e.judge_errors) for e in runs.runs] == [(0, 0), (1, 1), (2, 1)]
    assert runs.infra_failures.values == (0.0, 1.0, 2.0) and runs.judge_errors.values == (0.0, 1.0, 1.0)

    def printed(show, value):
        stream = io.StringIO()
        show(value, Console(file=stream, width=200))
        return stream.getvalue()

    assert "0 errors (0 infrastructure, 0 judge)" in printed(print_summary, summaries[0])
    assert "2 errors (2 infrastructure, 1 judge): endpoint_down: 1, judge_endpoint: 1" in printed(print_summary, summaries[2])
    text = printed(print_runs_summary, runs)
    assert "runs/r2: seed 2" in text and "2 errors (2 infrastructure, 1 judge)" in text
    assert "per run: errors 1.0 ± 1.0, infrastructure 1.0 ± 1.0, judge 0.7 ± 0.6" in text


def test_a_merged_summary_counts_judge_errors(tmp_path, textcraft):
    from sera.eval.merge import merge

    tasks = [t for t in textcraft.load_split("val") if t.id in ("textcraft_synth.val.0", "textcraft_synth.val.3")]
    judge, settings = DeadJudge(), BestOf(n=2, selector="judge", judge_model="kimi")
    policy = textcraft.oracle(tasks)
    from sera.eval.fingerprint import RunFingerprint
    from sera.eval.runs import plan_slots
    from sera.eval.shards import ShardSpec, write_record

    config = RuntimeConfig(sampling=textcraft.sampling)
    fingerprint = RunFingerprint.of(env=textcraft.name, source="val", policy="oracle", config=config, seed=0,
                                    best_of=settings.record())
    for i in range(2):
        (slot,) = plan_slots(tmp_path, tasks, fingerprint, samples=1, shard=ShardSpec(i, 2))
        write_record(slot.dir, slot.shard)
        asyncio.run(evaluate(slot.tasks, policy, textcraft.root_env, slot.dir, env_name=textcraft.name, split="val",
                             policy_name="oracle", config=config, best_of=settings.record(), fingerprint=slot.fingerprint,
                             launcher=lambda seed: best_of_launcher(settings, policy, judge=judge, seed=seed)))
    ((_, merged),) = merge(tmp_path).runs
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    trees = [RolloutTree.from_json(p.read_bytes()) for p in sorted((tmp_path / "rollouts").glob("*/0.json"))]
    assert len(trees) == 2 and all(t.fork_groups for t in trees)  # both delegate: both met the dead judge
    assert [f.kind for f in merged.failed] == ["judge_endpoint", "judge_endpoint"]
    assert merged.judge_errors == on_disk["judge_errors"] == merged.infra_failures == 2
    assert merged.complete and on_disk["finished_rollouts"] == 2
