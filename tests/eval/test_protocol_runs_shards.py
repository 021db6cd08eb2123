"""`--protocol paper`, `--runs N` and its mean ± std, the headline weighting, `--shard i/n` and
`--merge`, a killed shard resuming, and the bad input of each."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sera.cli import app
from sera.envs.registry import get_env
from sera.eval.aggregate import aggregate_runs, headline
from sera.eval.protocol import ProtocolError, resolve_settings
from sera.eval.summary import EvalSummary
from sera.stats import HEADLINE_WEIGHTS

runner = CliRunner()
TIMING = {"wall_time_s", "mean_rollout_s"}
EASY = ("--difficulty", "easy")
"""Easy tasks: the oracle's cheapest (val.0, val.5, val.9, val.10 are the first four)."""


def _eval(out: Path, *extra: str):
    return runner.invoke(app, ["eval", "--out", str(out), "--no-progress", *extra])


def _line(result) -> str:
    return " ".join(result.output.split())


def _summary(out: Path) -> dict:
    return {k: v for k, v in json.loads((out / "summary.json").read_text()).items() if k not in TIMING}


# -- the paper protocol ------------------------------------------------------------------------------


@pytest.mark.parametrize(("env", "context", "prompt", "completion"), [
    ("textcraft-synth", 10240, 9728, 512), ("textworld-sync", 13312, 10240, 3072),
])
def test_the_paper_protocol_per_environment(env, context, prompt, completion):
    s = resolve_settings("paper", env, get_env(env).sampling)
    c = s.config
    assert (s.protocol, s.context_tokens, s.samples) == ("paper", context, 1)
    assert (c.sampling.temperature, c.sampling.max_prompt_tokens, c.sampling.max_tokens) == (0.0, prompt, completion)
    assert (c.max_calls_per_agent, c.max_depth, c.policy_timeout_s) == (20, 3, 1800.0)
    assert c.sampling.stop == get_env(env).sampling.stop
    # Explicit flags win; the prompt cap shrinks so that prompt + completion fit the context.
    o = resolve_settings("paper", env, get_env(env).sampling, temperature=0.7, max_tokens=4096, max_calls=5, max_depth=1, samples=2)
    assert (o.config.sampling.temperature, o.config.sampling.max_tokens, o.config.max_calls_per_agent, o.config.max_depth, o.samples) == (0.7, 4096, 5, 1, 2)
    assert o.config.sampling.max_prompt_tokens == min(prompt, context - 4096)
    with pytest.raises(ProtocolError, match=f"leaves no room for a prompt .* context of {context} tokens"):
        resolve_settings("paper", env, get_env(env).sampling, max_tokens=context)
    with pytest.raises(ProtocolError, match="unknown protocol 'papr'; known: paper"):
        resolve_settings("papr", env, get_env(env).sampling)


def test_the_protocol_is_recorded_in_the_fingerprint(tmp_path):
    out = tmp_path / "p"
    result = _eval(out, "--protocol", "paper", "--limit", "1", "--max-calls", "19")
    assert result.exit_code == 0, result.output
    fp = json.loads((out / "run.json").read_text())
    assert (fp["protocol"], fp["context_tokens"], fp["runtime"]["max_calls_per_agent"]) == ("paper", 10240, 19)
    assert (fp["sampling"]["temperature"], fp["sampling"]["max_prompt_tokens"], fp["sampling"]["max_tokens"]) == (0.0, 9728, 512)
    refused = _eval(out, "--limit", "1", "--max-calls", "19")
    assert refused.exit_code == 2 and "protocol: 'paper' -> None" in _line(refused)
    bad = _eval(tmp_path / "q", "--protocol", "nope", "--limit", "1")
    assert bad.exit_code == 2 and "unknown protocol 'nope'; known: paper" in _line(bad)


# -- repeated runs -------------------------------------------------------------------------------------


def _run_summary(env: str, bands: dict[str, tuple[int, int]], families: dict[str, tuple[int, int]] | None = None) -> EvalSummary:
    def group(ok: int, n: int) -> dict:
        return {"tasks": n, "successes": ok, "errors": 0, "success_rate": ok / n}

    ok, n = sum(b[0] for b in bands.values()), sum(b[1] for b in bands.values())
    return EvalSummary.model_validate({
        "env": env, "split": "x", "policy": "p", "overall": group(ok, n),
        "by_difficulty": {b: group(*v) for b, v in bands.items()},
        "by_family": {f: group(*v) for f, v in (families or {}).items()},
        "trees": {"mean_nodes": 1, "max_nodes": 1, "depth_distribution": {}, "agents_by_depth": {}, "mean_policy_calls": 1},
        "wall_time_s": 1.0, "mean_rollout_s": 1.0,
    })


def test_two_runs_aggregate_as_computed_by_hand():
    a = _run_summary("textcraft-synth", {"easy": (2, 4), "medium": (1, 2)})
    b = _run_summary("textcraft-synth", {"easy": (4, 4), "medium": (0, 2)})
    runs = aggregate_runs([a, b], ["runs/r0", "runs/r1"], [0, 1])
    # Headline: (147 rate_easy + 213 rate_medium) / 360 -> a: 0.5, b: 147/360.
    assert runs.headline.values == pytest.approx([0.5, 147 / 360])
    assert runs.headline.mean == pytest.approx((0.5 + 147 / 360) / 2)
    assert runs.headline.std == pytest.approx(abs(0.5 - 147 / 360) / math.sqrt(2))  # sample std of two values
    assert runs.overall.values == pytest.approx([3 / 6, 4 / 6]) and runs.overall.std == pytest.approx((1 / 6) / math.sqrt(2))
    assert (runs.by_difficulty["easy"].mean, runs.by_difficulty["easy"].std) == pytest.approx((0.75, 0.5 / math.sqrt(2)))
    assert (runs.by_difficulty["medium"].mean, runs.by_difficulty["medium"].std) == pytest.approx((0.25, 0.5 / math.sqrt(2)))
    assert [r.seed for r in runs.runs] == [0, 1] and runs.headline_rule.startswith("task-weighted by difficulty (easy 147, medium 213)")
    one = aggregate_runs([a], ["runs/r0"], [0])
    assert one.headline.std is None and one.headline.mean == 0.5  # one run has no spread to show


def test_textworld_headline_is_the_four_band_macro_average_and_families_aggregate():
    bands = {"easy": (3, 4), "medium": (1, 2), "hard": (0, 2), "extreme": (1, 1)}
    a = _run_summary("textworld-sync", bands, {"fork_join": (2, 4), "conflict": (3, 5)})
    b = _run_summary("textworld-sync", bands, {"fork_join": (4, 4), "conflict": (1, 5)})
    assert headline(a) == pytest.approx((0.75 + 0.5 + 0 + 1) / 4)  # not the pooled 5/9
    runs = aggregate_runs([a, b], ["r0", "r1"], [3, 4])
    assert runs.headline.std == 0 and runs.headline_rule.startswith("four-band macro average")
    assert runs.by_family["fork_join"].values == pytest.approx([0.5, 1.0]) and runs.by_family["conflict"].mean == pytest.approx(0.4)


def test_the_headline_weights_are_the_published_task_counts():
    from collections import Counter

    for env, split in (("textcraft-synth", "val"), ("textworld-sync", "test")):
        counts = Counter(t.difficulty for t in get_env(env).load_split(split))
        _, weights = HEADLINE_WEIGHTS[env]
        assert {b: counts[b] / min(counts.values()) for b in counts} == {b: w / min(weights.values()) for b, w in weights.items()}
    # On the full TextCraft set the task-weighted headline is the pooled rate exactly.
    full = _run_summary("textcraft-synth", {"easy": (100, 147), "medium": (150, 213), "hard": (60, 136), "extreme": (20, 136)})
    assert headline(full) == pytest.approx(330 / 632)


def test_runs_write_one_run_directory_per_seed_and_the_mean(tmp_path):
    out = tmp_path / "r"
    result = _eval(out, "--runs", "2", *EASY, "--limit", "2", "--seed", "5")
    assert result.exit_code == 0, result.output
    assert "2 runs" in _line(result) and "headline" in _line(result)
    assert [json.loads((out / "runs" / f"r{i}" / "run.json").read_text())["seed"] for i in (0, 1)] == [5, 6]
    agg = json.loads((out / "summary.json").read_text())
    assert agg["kind"] == "runs" and [r["seed"] for r in agg["runs"]] == [5, 6]
    per_run = [json.loads((out / "runs" / f"r{i}" / "summary.json").read_text())["overall"]["success_rate"] for i in (0, 1)]
    assert agg["overall"]["values"] == per_run
    tree = out / "runs" / "r0" / "rollouts" / "textcraft_synth.val.0" / "0.json"
    before = tree.stat().st_mtime_ns
    grown = _eval(out, "--runs", "3", *EASY, "--limit", "2", "--seed", "5")
    assert grown.exit_code == 0 and tree.stat().st_mtime_ns == before, "runs already done are resumed, not redone"
    assert len(json.loads((out / "summary.json").read_text())["runs"]) == 3
    mixed = _eval(out, "--limit", "2")
    assert mixed.exit_code == 2 and "holds a --runs evaluation" in _line(mixed)
    zero = _eval(tmp_path / "z", "--runs", "0")
    assert zero.exit_code == 2 and "--runs 0: give at least one run" in _line(zero)


# -- shards --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("3/2", "--shard 3/2: shard index 3 is out of range for 2 shards (0..1)"),
    ("2/2", "shard index 2 is out of range for 2 shards"),
    ("x", "--shard 'x' is not i/n"),
    ("0/0", "the number of shards must be at least 1"),
])
def test_bad_shards_are_one_line_errors(tmp_path, text, message):
    result = _eval(tmp_path / "o", "--shard", text, "--limit", "1")
    assert result.exit_code == 2 and message in _line(result)


def test_shards_merged_equal_an_unsharded_run(tmp_path):
    out, whole = tmp_path / "s", tmp_path / "whole"
    for shard in ("1/2", "0/2"):
        assert _eval(out, "--shard", shard, *EASY, "--limit", "4").exit_code == 0
    shard0 = json.loads((out / "shards" / "0-of-2" / "shard.json").read_text())
    assert shard0["selection"][0::2] == ["textcraft_synth.val.0", "textcraft_synth.val.9"]
    merged = runner.invoke(app, ["eval", "--merge", "--out", str(out), "--no-progress"])
    assert merged.exit_code == 0, merged.output
    assert _eval(whole, *EASY, "--limit", "4").exit_code == 0
    assert _summary(out) == _summary(whole)
    assert json.loads((out / "run.json").read_text()) == json.loads((whole / "run.json").read_text())
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == [f"textcraft_synth.val.{i}" for i in (0, 10, 5, 9)]
    again = runner.invoke(app, ["eval", "--merge", "--out", str(out)])
    assert again.exit_code == 0 and _summary(out) == _summary(whole), "merging again changes nothing"


def test_merge_refuses_what_would_lose_double_count_or_mix(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert _eval(a, "--shard", "0/2", *EASY, "--limit", "3").exit_code == 0

    missing = runner.invoke(app, ["eval", "--merge", "--out", str(a)])
    assert missing.exit_code == 2
    assert "1 of 3 task(s) are in no shard: textcraft_synth.val.5; missing shard(s) 1/2" in _line(missing)

    assert _eval(b, "--shard", "1/2", *EASY, "--limit", "3", "--max-depth", "2").exit_code == 0
    mixed = runner.invoke(app, ["eval", "--merge", "--out", str(a), "--merge-from", str(b)])
    assert mixed.exit_code == 2 and "was run with other settings" in _line(mixed) and "runtime.max_depth: 3 -> 2" in _line(mixed)
    same_out = _eval(a, "--shard", "1/2", *EASY, "--limit", "3", "--max-depth", "2")
    assert same_out.exit_code == 2 and "is a shard of this --out run with other settings" in _line(same_out)

    c = tmp_path / "c"
    assert _eval(c, "--shard", "0/2", *EASY, "--limit", "3").exit_code == 0
    twice = runner.invoke(app, ["eval", "--merge", "--out", str(a), "--merge-from", str(c)])
    assert twice.exit_code == 2 and "2 task(s) would count twice: textcraft_synth.val.0, textcraft_synth.val.9" in _line(twice)

    assert _eval(a, "--shard", "1/2", *EASY, "--limit", "3").exit_code == 0
    (a / "shards" / "1-of-2" / "rollouts" / "textcraft_synth.val.5" / "0.json").unlink()
    unfinished = runner.invoke(app, ["eval", "--merge", "--out", str(a)])
    assert unfinished.exit_code == 2
    assert "shard 1/2" in _line(unfinished) and "is unfinished: 1 of 1 rollout(s) have no result (textcraft_synth.val.5 #0)" in _line(unfinished)
    assert not (a / "summary.json").exists(), "nothing is written by a refused merge"
    none = runner.invoke(app, ["eval", "--merge", "--out", str(tmp_path / "empty")])
    assert none.exit_code == 2 and "no shards to merge" in _line(none)


def test_shards_of_several_machines_merge_from_their_folders(tmp_path):
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    assert _eval(a, "--shard", "0/2", *EASY, "--limit", "3", "--env", "textworld-sync", "--split", "test").exit_code == 0
    assert _eval(b, "--shard", "1/2", *EASY, "--limit", "3", "--env", "textworld-sync", "--split", "test").exit_code == 0
    merged = runner.invoke(app, ["eval", "--merge", "--out", str(a), "--merge-from", str(b)])
    assert merged.exit_code == 0, merged.output
    summary = json.loads((a / "summary.json").read_text())
    assert summary["overall"]["tasks"] == 3 and summary["by_family"] and len(list((a / "rollouts").iterdir())) == 3
    assert [s["shard"] for s in json.loads((a / "merge.json").read_text())["shards"]] == ["0/2", "1/2"]


_HANGING = textwrap.dedent("""
    import asyncio, sys
    from sera.envs.textcraft.oracle import TextCraftOracle

    original = TextCraftOracle.__call__

    async def hanging(self, messages, sampling):
        if any("items: 2x a1_i2" in m.content for m in messages):  # textcraft_synth.val.9's goal
            await asyncio.sleep(3600)
        return await original(self, messages, sampling)

    TextCraftOracle.__call__ = hanging
    from sera.cli import app
    app(sys.argv[1:])
""")


def test_a_killed_shard_resumes_when_rerun(tmp_path):
    script, out = tmp_path / "hang.py", tmp_path / "s"
    script.write_text(_HANGING)
    args = ["eval", "--out", str(out), "--no-progress", "--shard", "0/2", *EASY, "--limit", "4"]
    shard = out / "shards" / "0-of-2" / "rollouts"
    done = shard / "textcraft_synth.val.0" / "0.json"
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert done.exists(), proc.stderr.read().decode() if proc.poll() is not None else "no tree within 60 s"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (shard / "textcraft_synth.val.9" / "0.json").exists()
    refused = runner.invoke(app, ["eval", "--merge", "--out", str(out)])
    assert refused.exit_code == 2 and "in no shard" in _line(refused)  # shard 1/2 was never run
    first = done.stat().st_mtime_ns
    assert runner.invoke(app, args).exit_code == 0
    assert done.stat().st_mtime_ns == first, "the finished rollout is kept"
    assert (shard / "textcraft_synth.val.9" / "0.json").exists()
    assert _eval(out, "--shard", "1/2", *EASY, "--limit", "4").exit_code == 0
    merged = runner.invoke(app, ["eval", "--merge", "--out", str(out)])
    assert merged.exit_code == 0 and json.loads((out / "summary.json").read_text())["overall"]["tasks"] == 4


def test_runs_of_shards_merge_run_by_run(tmp_path):
    out = tmp_path / "rs"
    for shard in ("0/2", "1/2"):
        assert _eval(out, "--runs", "2", "--shard", shard, *EASY, "--limit", "3").exit_code == 0
    assert (out / "runs" / "r1" / "shards" / "1-of-2" / "shard.json").is_file()
    merged = runner.invoke(app, ["eval", "--merge", "--out", str(out)])
    assert merged.exit_code == 0, merged.output
    agg = json.loads((out / "summary.json").read_text())
    assert agg["kind"] == "runs" and [r["seed"] for r in agg["runs"]] == [0, 1] and agg["overall"]["tasks"] == 3
    assert json.loads((out / "runs" / "r1" / "summary.json").read_text())["overall"]["tasks"] == 3
