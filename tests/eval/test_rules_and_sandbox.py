"""`--rules` for TextWorld-Sync, and `--unsafe-sandbox` / a sandbox that refuses to run."""

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

import sera.eval.run
from sera.cli import app
from sera.envs.registry import get_env
from sera.sandbox import WeakIsolationError, configure, settings
from sera.types import RolloutTree

runner = CliRunner()


def _line(result) -> str:
    return " ".join(result.output.split())


def test_eval_plays_textworld_under_the_rules_asked_for_and_records_them(tmp_path):
    out = tmp_path / "tw"
    args = ["eval", "--env", "textworld-sync", "--split", "test", "--difficulty", "easy", "--limit", "1",
            "--rules", "reference", "--out", str(out), "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "rules profile: reference" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rules"] == "reference" and json.loads((out / "run.json").read_text())["rules"] == "reference"
    (tree_file,) = (out / "rollouts").glob("*/0.json")
    tree = RolloutTree.from_json(tree_file.read_bytes())
    assert tree.root.verifier_info["rules"]["profile"] == "reference"
    other = runner.invoke(app, [*args[:-4], "sync", "--out", str(out), "--no-progress"])
    assert other.exit_code == 2 and "rules: 'reference' -> 'sync'" in _line(other)


@pytest.mark.parametrize(("args", "message"), [
    (["--rules", "sync"], "textcraft-synth has no rules profiles; --rules applies to textworld-sync only"),
    (["--env", "textworld-sync", "--split", "test", "--rules", "house"], "unknown rules profile 'house' for textworld-sync; known: sync, reference"),
])
def test_bad_rules_are_one_line_errors(tmp_path, args, message):
    result = runner.invoke(app, ["eval", "--limit", "1", "--out", str(tmp_path / "o"), "--no-progress", *args])
    assert result.exit_code == 2 and message in _line(result)


def test_textcraft_loaders_refuse_a_rules_profile():
    with pytest.raises(ValueError, match="textcraft-synth has no rules profiles"):
        get_env("textcraft-synth").load_split("val", rules="reference")


@pytest.fixture
def restore_sandbox():
    before = settings().allow_weak_isolation
    yield
    configure(allow_weak_isolation=before)


def test_unsafe_sandbox_opts_in_to_weak_isolation(tmp_path, restore_sandbox):
    configure(allow_weak_isolation=False)
    result = runner.invoke(app, ["eval", "--limit", "1", "--unsafe-sandbox", "--out", str(tmp_path / "o"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert settings().allow_weak_isolation is True


def test_a_sandbox_that_refuses_is_reported_in_one_line_and_fails_the_run(tmp_path, monkeypatch):
    spec = get_env("textcraft-synth")

    def refusing_env(task):
        def build(handle):
            raise WeakIsolationError(["user namespaces"], ["unshare: operation not permitted"])
        return build

    monkeypatch.setattr(sera.eval.run, "get_env", lambda name: replace(spec, root_env=refusing_env))
    out = tmp_path / "o"
    result = runner.invoke(app, ["eval", "--limit", "2", "--out", str(out), "--no-progress"])
    assert result.exit_code == 1, result.output
    text = _line(result)
    assert "sandbox_isolation: sandbox isolation unavailable: no user namespaces" in text
    assert "--unsafe-sandbox" in text and "failed for infrastructure reasons" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors_by_kind"] == {"sandbox_isolation": 2}
    assert "\n" not in summary["failed"][0]["message"] and "Traceback" not in summary["failed"][0]["message"]


def test_play_refuses_rules_for_textcraft_in_one_line():
    result = runner.invoke(app, ["play", "--task-id", "textcraft_synth.val.0", "--rules", "sync"])
    assert result.exit_code == 2 and "textcraft-synth has no rules profiles" in _line(result)
