"""`sera pipeline` end to end on the tiny model in the letters world: every phase folder,
`pipeline.json`, the report's sections; resume (a finished job does nothing again; a removed
evaluation alone reruns); a failing phase recorded, the exit non-zero, nothing completed
deleted; an infrastructure failure reported as such; bad input as one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sera.cli import app
from sera.pipeline import evaluation

CONFIG = "configs/letters/rao.yaml"
KEYS = ["pipeline.eval_tasks=6", "sft.train_tasks=8", "sft.val_tasks=3", "sft.epochs=2", "sft.batch_datums=4",
        "sft.lr=1e-3", "steps.max_steps=2", "rollout.batch_tasks=4", "rollout.trees_per_task=4"]
PHASES = ["eval_base", "sft", "eval_sft", "rl", "eval_rl"]


def pipeline(out: Path, *keys: str) -> object:
    return CliRunner().invoke(app, ["pipeline", "--config", CONFIG, "--out", str(out), *KEYS, *keys])


def record(out: Path) -> dict[str, dict]:
    return {p["name"]: p for p in json.loads((out / "pipeline.json").read_text())["phases"]}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("pipeline") / "job"
    return out, pipeline(out)


def test_every_phase_runs_and_the_report_has_its_sections(job) -> None:
    out, result = job
    assert result.exit_code == 0, result.output
    for name in PHASES:
        assert (out / name).is_dir()
        assert record(out)[name]["status"] == "done"
        assert record(out)[name]["wall_s"] > 0 and record(out)[name]["started_at"] <= record(out)[name]["ended_at"]
    for name in ("eval_base", "eval_sft", "eval_rl"):
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["overall"]["tasks"] == 6 and summary["split"] == "val"
        assert len(list((out / name / "rollouts").glob("*/0.json"))) == 6
    assert json.loads((out / "eval_rl" / "run.json").read_text())["model_weights"].startswith("step_")
    assert json.loads((out / "rl" / "init_from.json").read_text())["path"] == str((out / "sft").resolve())
    # stdout: one line per phase (how it ended), then where the outputs are; stderr: the rest, indented.
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[1:6]] == PHASES and all(" done in " in line for line in lines[1:6])
    assert lines[6:] == [f"report: {out / 'report.md'}", f"outputs under {out}/; report: {out / 'report.md'}"]
    assert [line.strip().split(":")[0] for line in result.stderr.splitlines() if line.endswith(": running")] == PHASES
    report = (out / "report.md").read_text()
    for section in ("## Summary", "## Run", "## Phases", "## Success on the fixed held-out set",
                    "## Behaviour in the evaluations", "## SFT", "## RL steps", "## Supervision spent", "## Learning curve"):
        assert section in report
    assert "sera pipeline --config configs/letters/rao.yaml" in report and "config hash" in report
    assert "native bf16" in report and "Wilson 95% CI" in report
    assert "Held-out NLL on the expert's demonstrations fell" in report
    assert report.count(" | sampled in process |") == 3  # each evaluation's row in the phases table says what sampled it
    assert "| 0 | execution | trained |" in report  # the per-step RL table
    data = json.loads((out / "report.json").read_text())
    assert set(data["evaluations"]) == {"eval_base", "eval_sft", "eval_rl"}
    base = data["evaluations"]["eval_base"]
    assert base["success"]["n"] == 6 and base["replies"]["n"] == 6 and base["rubrics"] is None
    assert len(data["rl"]["rows"]) == 2 and data["rl"]["trees"] == 32
    assert [e["epoch"] for e in data["sft"]["epochs"]] == [0, 1, 2]
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_finished_job_does_nothing_again_and_a_removed_phase_alone_reruns(job, tmp_path: Path) -> None:
    out = tmp_path / "job"
    shutil.copytree(job[0], out)
    before = record(out)
    again = pipeline(out)
    assert again.exit_code == 0, again.output
    assert "running" not in again.output and again.output.count(": kept") == 5
    assert record(out) == before
    shutil.rmtree(out / "eval_rl")
    third = pipeline(out, "pipeline.budget_minutes=20")  # the budget may change between runs
    assert third.exit_code == 0, third.output
    after = record(out)
    assert [line.strip().split(":")[0] for line in third.output.splitlines() if line.endswith(": running")] == ["eval_rl"]
    assert {n: after[n] for n in PHASES[:-1]} == {n: before[n] for n in PHASES[:-1]}
    assert after["eval_rl"]["started_at"] >= before["eval_rl"]["started_at"] and after["eval_rl"]["status"] == "done"
    assert len(json.loads((out / "pipeline.json").read_text())["invocations"]) == 3
    # Another config is another job; stale outputs are refused before any work.
    changed = pipeline(out, "seed=5")
    assert changed.exit_code == 2 and "another config: seed: 11 -> 5" in changed.output
    shutil.rmtree(out / "sft")
    stale = pipeline(out)
    assert stale.exit_code == 2 and "were made from its previous result" in stale.output
    assert record(out) == after


def test_rl_killed_midway_resumes_from_its_checkpoint(job, tmp_path: Path) -> None:
    out = tmp_path / "job"
    shutil.copytree(job[0], out)
    data = json.loads((out / "pipeline.json").read_text())
    for phase in data["phases"]:
        if phase["name"] == "rl":
            phase["status"] = "running"  # as a kill -9 during RL leaves it
    (out / "pipeline.json").write_text(json.dumps(data))
    shutil.rmtree(out / "eval_rl")
    result = pipeline(out, "steps.max_steps=3")  # an unfinished RL may be given more updates
    assert result.exit_code == 0, result.output
    rl = record(out)["rl"]
    assert rl["status"] == "done" and rl["detail"] == {"steps": 3, "updates": 3, "stopped_by": None, "resumed": True}
    assert "resumed" in result.output
    steps = [json.loads(line)["step"] for line in (out / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]  # the two committed steps kept, one more run, none repeated
    assert record(out)["eval_rl"]["status"] == "done"


def test_rl_without_a_learning_signal_is_an_outcome_and_the_last_evaluation_still_runs(tmp_path: Path) -> None:
    out = tmp_path / "job"
    # No step can have 1,000 trainable datums: the loop stops after two skipped steps.
    result = pipeline(out, "pipeline.sft=false", "steps.min_trainable_datums=1000", "steps.max_consecutive_skips=2")
    assert result.exit_code == 0, result.output
    phases = record(out)
    rl = phases["rl"]
    assert rl["status"] == "done" and rl["detail"]["stopped_by"] == "no_signal"
    assert rl["detail"]["steps"] == 2 and rl["detail"]["updates"] == 0 and "2 consecutive steps skipped" in rl["detail"]["note"]
    # The evaluation after RL measured RL's checkpoint (the starting weights: nothing was trained).
    assert phases["eval_rl"]["status"] == "done"
    assert json.loads((out / "eval_rl" / "run.json").read_text())["model_weights"].startswith("step_000002")
    report = (out / "report.md").read_text()
    assert "- RL made 0 optimizer update(s) in 2 step(s) (stopped early: too many steps in a row had nothing to train on" in report
    assert "the evaluation after RL measured the starting weights again" in report


def test_a_failing_phase_is_recorded_and_the_job_exits_nonzero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sera.train import loop

    def fails(*args, **kwargs):
        raise loop.TrainError("the sampler does not serve policy version 1: adapter missing")

    monkeypatch.setattr(loop, "run_train", fails)
    out = tmp_path / "job"
    result = pipeline(out, "pipeline.sft=false")
    assert result.exit_code == 1, result.output
    phases = record(out)
    assert phases["eval_base"]["status"] == "done" and (out / "eval_base" / "summary.json").is_file()
    assert phases["sft"]["status"] == phases["eval_sft"]["status"] == "skipped"
    assert phases["rl"]["status"] == "failed" and "adapter missing" in phases["rl"]["error"]
    assert "\n" not in phases["rl"]["error"] and not phases["rl"]["infra"]
    assert phases["eval_rl"]["status"] == "pending" and not (out / "eval_rl").exists()
    assert "rl: FAILED after" in result.output
    report = (out / "report.md").read_text()
    assert "| rl | failed |" in report and "adapter missing" in report
    assert "- RL failed (TrainError: the sampler does not serve policy version 1: adapter missing)" in report


def test_a_signal_during_rl_is_an_interruption_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sera.train import loop

    # What run_train returns after SIGTERM: it checkpointed and stopped.
    monkeypatch.setattr(loop, "run_train", lambda *a, **k: loop.RunResult(steps=1, version=1, stopped_by="SIGTERM"))
    out = tmp_path / "job"
    result = pipeline(out, "pipeline.sft=false")
    assert result.exit_code == 143, result.output
    rl = record(out)["rl"]
    assert rl["status"] == "interrupted" and rl["error"] == "stopped by SIGTERM" and rl["detail"]["updates"] == 1
    assert record(out)["eval_rl"]["status"] == "pending"
    assert "rl: interrupted after" in result.stdout
    assert "- RL did not finish; rerun the job to resume it." in (out / "report.md").read_text()


class Broken:
    """A policy whose every call fails: the infrastructure's fault, not the model's."""

    async def __call__(self, messages, sampling):
        raise ConnectionError("sampler went away")

    async def close(self) -> None:
        pass


def test_an_infrastructure_failure_is_not_a_model_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluation, "open_policy", lambda cfg, out, weights, log: (Broken(), "hf:tiny", None, "inprocess"))
    out = tmp_path / "job"
    result = pipeline(out, "pipeline.sft=false", "pipeline.rl=false")
    assert result.exit_code == 1, result.output
    base = record(out)["eval_base"]
    assert base["status"] == "failed" and base["infra"]
    assert base["error"].startswith("6 of 6 rollouts failed for infrastructure reasons (policy_error: 6)")
    assert "infrastructure failure after" in result.output
    report = (out / "report.md").read_text()
    assert "| eval_base (before SFT) | 0/0 | — | — | — | 6 | 0 |" in report
    assert "not solved" not in report  # no success sentence from an evaluation that did not complete


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = CliRunner().invoke(app, ["pipeline", "--config", CONFIG, "--out", str(tmp_path / "a"), "pipeline.eval_task=3"])
    assert bad.exit_code == 2 and "unknown key 'pipeline.eval_task' (did you mean 'pipeline.eval_tasks'?)" in bad.output
    split = CliRunner().invoke(app, ["pipeline", "--config", CONFIG, "--out", str(tmp_path / "b"), "pipeline.eval_split=test"])
    assert split.exit_code == 2 and "pipeline.eval_split='test'" in split.output
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    busy = CliRunner().invoke(app, ["pipeline", "--config", CONFIG, "--out", str(tmp_path / "c")])
    assert busy.exit_code == 2 and "not empty and holds no pipeline job" in busy.output
    for r in (bad, split, busy):
        assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_sera_evaluations_write_frozen_rubrics_for_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted expert with the scripted rubric writer and scorer stands in for a model: it
    delegates, so the evaluation's launcher writes and scores a rubric per child."""
    from sera.envs.registry import get_env
    from sera.pipeline.evalstats import eval_stats
    from sera.rubric.scripted import RubricOracle
    from sera.train.config import load_config

    keys = ["pipeline.eval_tasks=3", "pipeline.eval_max_calls=6"]
    spec = get_env("textcraft-synth")
    monkeypatch.setattr(evaluation, "open_policy", lambda cfg, out, weights, log: (
        RubricOracle(spec.oracle(evaluation.eval_tasks(cfg, spec))), "hf:oracle", None, "inprocess"))
    cfg = load_config("configs/textcraft-synth/sera.yaml", preset="tiny", overrides=keys)
    summary, detail = evaluation.run_evaluation(cfg, tmp_path / "sera")
    stats = eval_stats(tmp_path / "sera")
    assert detail["successes"] == stats.success.k == 3 and stats.delegation.k == 2
    assert stats.rubrics is not None and stats.rubrics.n == 3 and stats.rubrics.k == 3
    assert stats.replies.k == stats.replies.n and stats.agents_per_tree == 2.0
    plain = load_config("configs/textcraft-synth/sera.yaml", preset="tiny", overrides=[*keys, "pipeline.eval_rubrics=false"])
    evaluation.run_evaluation(plain, tmp_path / "plain")
    assert eval_stats(tmp_path / "plain").rubrics is None
    rao = load_config("configs/textcraft-synth/rao.yaml", preset="tiny", overrides=keys)
    evaluation.run_evaluation(rao, tmp_path / "rao")
    assert eval_stats(tmp_path / "rao").rubrics is None  # RAO writes no rubrics


def test_a_signal_during_sft_is_an_interruption_and_the_rerun_resumes_it(job, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    from sera.train import sft

    @contextmanager
    def signalled():  # SIGTERM already received: the run checkpoints before its first batch
        yield [15]

    monkeypatch.setattr(sft, "stop_on_signals", signalled)
    out = tmp_path / "job"
    result = pipeline(out)
    assert result.exit_code == 143, result.output
    phases = record(out)
    assert phases["sft"]["status"] == "interrupted" and phases["sft"]["error"] == "stopped by SIGTERM"
    assert phases["eval_sft"]["status"] == "pending" and (out / "sft" / "checkpoints" / "latest").is_file()
    monkeypatch.undo()
    again = pipeline(out)
    assert again.exit_code == 0, again.output
    phases = record(out)
    assert phases["sft"]["status"] == "done" and phases["sft"]["detail"]["resumed"] is True
    assert "sft: resuming the unfinished run" in again.output
    done, _ = job
    lines = [(out / "sft" / "metrics.jsonl"), (done / "sft" / "metrics.jsonl")]
    losses = [[(r["kind"], r["step"], r["loss"]) for r in map(json.loads, p.read_text().splitlines())] for p in lines]
    assert losses[0] == losses[1], "the resumed SFT trained what the uninterrupted job's did"


def test_sampled_evaluations_pair_by_task_and_sample_with_the_same_seeds(tmp_path: Path) -> None:
    """`pipeline.eval_samples` rollouts per task at `pipeline.eval_temperature`: sample k of a task
    has the same seed in every evaluation, so the same weights give the same outcomes (the paired
    test then sees only what the weights changed); greedy samples are refused as identical."""
    from sera.eval.seeds import sample_seed
    from sera.pipeline.evalstats import eval_stats
    from sera.train.config import ConfigError, load_config

    keys = ["pipeline.eval_tasks=3", "pipeline.eval_samples=2", "pipeline.eval_temperature=1.0"]
    cfg = load_config(CONFIG, overrides=keys)
    first_summary, _ = evaluation.run_evaluation(cfg, tmp_path / "a")
    evaluation.run_evaluation(cfg, tmp_path / "b")
    first, second = eval_stats(tmp_path / "a"), eval_stats(tmp_path / "b")
    assert first.success.n == 6 and len(first.outcomes) == 6
    assert {key.split("#")[1] for key in first.outcomes} == {"0", "1"}
    assert first.outcomes == second.outcomes
    tree = json.loads(next((tmp_path / "a" / "rollouts").glob("*/1.json")).read_text())
    assert tree["seed"] == sample_seed(cfg.seed, tree["task_id"], 1)
    assert json.loads((tmp_path / "a" / "run.json").read_text())["sampling"]["temperature"] == 1.0
    with pytest.raises(ConfigError, match=r"pipeline.eval_samples=2 with pipeline.eval_temperature=0: greedy samples"):
        load_config(CONFIG, overrides=["pipeline.eval_samples=2"])


def test_fewer_samples_before_sft_pair_with_the_same_samples_after(tmp_path: Path) -> None:
    """`pipeline.eval_base_samples=1`: the base model's evaluation rolls each task out once, the
    one after SFT twice; the paired test uses the (task, sample 0) pairs and the report says so;
    more base samples than `eval_samples` are refused."""
    from sera.pipeline.evalstats import eval_stats
    from sera.stats import PairedChange
    from sera.train.config import ConfigError, load_config

    sampled = ["pipeline.eval_samples=2", "pipeline.eval_temperature=1.0", "pipeline.rl=false"]
    out = tmp_path / "job"
    result = pipeline(out, *sampled, "pipeline.eval_base_samples=1")
    assert result.exit_code == 0, result.output
    base, sft = eval_stats(out / "eval_base"), eval_stats(out / "eval_sft")
    assert (base.success.n, sft.success.n) == (6, 12)
    assert {key.split("#")[1] for key in base.outcomes} == {"0"}
    assert PairedChange.of(base.outcomes, sft.outcomes).paired == 6
    assert "before SFT one rollout per task, paired with the same samples after SFT" in (out / "report.md").read_text()
    with pytest.raises(ConfigError, match=r"pipeline.eval_base_samples=3 is more than pipeline.eval_samples=2"):
        load_config(CONFIG, overrides=[*sampled, "pipeline.eval_base_samples=3"])


def test_rl_without_time_left_is_skipped_with_the_budget_that_would_fit_it(tmp_path: Path) -> None:
    """A budget the evaluations alone use up: RL is skipped, and the report says what budget would
    give RL time on this machine, from the wall times measured in this run."""
    out = tmp_path / "job"
    result = pipeline(out, "pipeline.sft=false", "pipeline.budget_minutes=0.01")
    assert result.exit_code == 0, result.output
    phases = record(out)
    assert phases["rl"]["status"] == "skipped" and phases["eval_rl"]["status"] == "skipped"
    reason = phases["rl"]["detail"]["reason"]
    assert reason.startswith("no time left: ") and "\n" not in reason
    minutes = int(reason.split("make run BUDGET_MIN=")[1].split(")")[0])
    assert minutes >= 15 + phases["eval_base"]["wall_s"] / 60  # what was used, the final evaluation, and RL's 15 min
    assert f"a budget of {minutes} min" in reason and "gives RL about 15 min" in reason
    assert f"RL did not run ({reason})" in (out / "report.md").read_text()
