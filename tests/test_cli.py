"""The `sera` command line: evaluation output, data files, playing by hand, and bad input."""

import json

import pytest
from typer.testing import CliRunner

from sera.cli import app
from sera.envs.textcraft.tasks import published_task_file
from sera.types import RolloutTree

runner = CliRunner()


def test_eval_writes_trees_summary_and_a_table(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--split", "val", "--limit", "3", "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "overall" in result.output and "100.00%" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"] == {"tasks": 3, "successes": 3, "errors": 0, "success_rate": 1.0}
    assert sum(g["tasks"] for g in summary["by_difficulty"].values()) == 3
    assert summary["trees"]["mean_nodes"] >= 1 and summary["wall_time_s"] > 0
    trees = sorted((out / "rollouts").glob("*/*.json"))
    assert [p.relative_to(out / "rollouts").as_posix() for p in trees] == [
        "textcraft_synth.val.0/0.json", "textcraft_synth.val.1/0.json", "textcraft_synth.val.2/0.json"]
    assert RolloutTree.from_json(trees[0].read_text()).root_success is True


def test_eval_redoes_a_corrupt_tree_file(tmp_path):
    out = tmp_path / "run"
    runner.invoke(app, ["eval", "--limit", "1", "--out", str(out), "--no-progress"])
    tree_file = out / "rollouts" / "textcraft_synth.val.0" / "0.json"
    tree_file.write_text("{ truncated")
    result = runner.invoke(app, ["eval", "--limit", "1", "--out", str(out), "--no-progress"])
    assert result.exit_code == 0 and "unreadable and will be redone" in result.output
    assert RolloutTree.from_json(tree_file.read_text()).root_success is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "minecraft"], "unknown environment 'minecraft'; known: textcraft-synth"),
        (["--split", "test"], "unknown split 'test' for textcraft-synth; known: train, val"),
        (["--task-id", "textcraft_synth.val.99999"], "no task with id 'textcraft_synth.val.99999' among 632 tasks"),
        (["--limit", "-1"], "limit must be a positive number of tasks, got -1"),
        (["--limit", "0"], "limit must be a positive number of tasks, got 0"),
        (["--difficulty", "trivial"], "unknown difficulty 'trivial'"),
        (["--policy", "gpt"], "unknown policy 'gpt'"),
    ],
)
def test_eval_rejects_bad_arguments_with_a_clear_message(tmp_path, args, message):
    result = runner.invoke(app, ["eval", "--out", str(tmp_path / "o"), "--no-progress", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_eval_names_the_line_and_field_of_a_corrupt_task_file(tmp_path):
    good = published_task_file("val").read_text().splitlines()[:2]
    row = json.loads(good[1])
    row["misc"]["target_items"] = {"m0_i1": -2}
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(good[0] + "\n" + json.dumps(row) + "\n")
    result = runner.invoke(app, ["eval", "--tasks-file", str(bad), "--out", str(tmp_path / "o"), "--no-progress"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "tasks.jsonl line 2: field misc.target_items" in text


def test_data_command_writes_the_published_file(tmp_path):
    out = tmp_path / "val.jsonl"
    result = runner.invoke(app, ["data", "textcraft", "--split", "val", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == published_task_file("val").read_bytes()


def test_play_runs_a_task_from_typed_cells(tmp_path, monkeypatch):
    row = json.loads(published_task_file("val").read_text().splitlines()[0])
    (item, count), = row["misc"]["target_items"].items()
    gold = row["misc"]["gold_trajectory"]
    cells = [f"print(craft({s['ingredients']!r}, ({s['target'][0]!r}, {s['result_count']})))" for s in gold]
    cells.append(f"finish('made {count}x {item}')")
    typed = iter(line for cell in cells for line in (cell, ""))
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed))
    out = tmp_path / "played.json"
    result = runner.invoke(app, ["play", "--task-id", row["id"], "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "success: True" in result.output
    tree = RolloutTree.from_json(out.read_text())
    assert len(tree.root.steps) == len(cells) and tree.root.finish_message == f"made {count}x {item}"


def _typed_line(lines):
    # input() raises EOFError at the end of input; a StopIteration would be lost in the thread.
    try:
        return next(lines)
    except StopIteration:
        raise EOFError from None


def test_play_runs_a_textworld_task_from_typed_replies(tmp_path, monkeypatch):
    """Bare commands are taken as `<action>` blocks; a reply typed with its tags is kept as typed.
    The world ends the root's episode when the last dish is eaten."""
    from sera.envs.textworld.plan import plan_task
    from sera.envs.textworld.tasks import load_split_specs

    spec = next(s for s in load_split_specs("test") if plan_task(s).action_count <= 17)
    plan = plan_task(spec)
    commands = plan.root_actions + [a for dish in plan.dishes for part in dish.parts for a in part]
    replies = [f"<action>{commands[0]}</action>", *commands[1:]]
    typed = iter(line for reply in replies for line in (reply, ""))
    monkeypatch.setattr("builtins.input", lambda prompt="": _typed_line(typed))
    out = tmp_path / "played.json"
    result = runner.invoke(app, ["play", "--env", "textworld-sync", "--split", "test", "--task-id", spec.task_id, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "success: True" in result.output
    tree = RolloutTree.from_json(out.read_text())
    root = tree.root
    assert [s.action.kind for s in root.steps].count("invalid") == 0
    assert [s.completion_text for s in root.steps] == [f"<action>{c}</action>" for c in commands]
    assert tree.root_success is True


def test_eval_textworld_prints_difficulty_and_family_tables(tmp_path):
    out = tmp_path / "tw"
    args = ["eval", "--env", "textworld-sync", "--split", "test", "--difficulty", "hard", "--limit", "2",
            "--out", str(out), "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "by family" in result.output and "fork_join" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["successes"] == 2
    assert summary["by_family"] == {"fork_join": {"tasks": 2, "successes": 2, "errors": 0, "success_rate": 1.0}}


def test_eval_with_an_in_process_model_records_token_ids_and_logprobs(tmp_path):
    from sera.testing.tiny import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    model_dir = tmp_path / "tiny"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "run"
    args = ["eval", "--env", "textworld-sync", "--split", "test", "--limit", "1", "--policy", "hf",
            "--model", str(model_dir), "--max-calls", "2", "--max-tokens", "8", "--temperature", "1.0",
            "--out", str(out), "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == f"hf:{model_dir}" and summary["overall"]["tasks"] == 1
    (tree_file,) = (out / "rollouts").glob("*/*.json")
    tree = RolloutTree.from_json(tree_file.read_text())
    steps = tree.root.steps
    assert len(steps) == 2  # a random model never finishes: it uses its whole budget
    for step in steps:
        assert step.completion_token_ids and len(step.completion_token_ids) == len(step.completion_logprobs)
        assert all(lp <= 0 for lp in step.completion_logprobs) and step.prompt_token_ids


def test_eval_openai_policy_needs_a_server_address(tmp_path):
    result = runner.invoke(app, ["eval", "--policy", "openai", "--model", "m", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "needs --base-url" in result.output
