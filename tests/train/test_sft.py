"""`sera sft`: expert demonstrations -> datums -> SFT epochs, held-out NLL, checkpoints, `--init-from`."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from sera.cli import app
from sera.envs.registry import get_env
from sera.testing.tiny import tiny_model_and_tokenizer
from sera.checkpoints.store import load_latest, save_checkpoint
from sera.train.config import ConfigError, dump_config, load_config
from sera.train.loop import run_train
from sera.train.setup import load_model, make_learner, training_tasks
from sera.train.run_dir import TrainError
from sera.train.sft import INIT_FILE, InitFromError, SftError, demonstrations, load_init, long_reply_warning, run_sft

LETTERS = "configs/letters/rao.yaml"
SFT_KEYS = ["sft.train_tasks=8", "sft.val_tasks=3", "sft.epochs=2", "sft.batch_datums=4", "optimizer.lr=1e-3"]


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("sft") / "run"
    cfg = load_config(LETTERS, overrides=SFT_KEYS)
    return out, run_sft(cfg, out, log=_quiet)


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_heldout_nll_falls_and_run_dir_has_train_layout(sft_run) -> None:
    out, result = sft_run
    lines = _lines(out)
    evals = [line for line in lines if line["kind"] == "eval"]
    trains = [line for line in lines if line["kind"] == "train"]
    assert [e["epoch"] for e in evals] == [0, 1, 2]
    assert evals[0]["step"] == 0 and evals[0]["loss"] is None
    assert evals[2]["heldout_nll"] < evals[1]["heldout_nll"] < evals[0]["heldout_nll"]
    assert result.nll_after == evals[2]["heldout_nll"] and result.nll_before == evals[0]["heldout_nll"]
    assert len(trains) == result.steps == 4  # 8 datums in batches of 4, 2 epochs
    assert [t["step"] for t in trains] == [1, 2, 3, 4]
    assert {t["lr"] for t in trains} == {1e-3}  # optimizer.lr, as sft.lr is not set
    for line in trains:
        assert {"epoch", "step", "loss", "heldout_nll", "trained_tokens", "tokens"} <= set(line)
        assert line["trained_tokens"] > 0 and line["loss"] > 0
    # sera train's layout: config.yaml that loads back, checkpoints/ with learner.pt holding weights
    assert load_config(out / "config.yaml") == load_config(LETTERS, overrides=SFT_KEYS)
    ckpt = load_latest(out / "checkpoints")
    assert ckpt is not None and ckpt.step == 4
    state = torch.load(ckpt.file("learner.pt"), weights_only=True)
    assert state["steps"] == 4 and state["weights"]
    assert sorted(p.name for p in (out / "demos" / "train").iterdir())[:1]
    from sera.policy.checkpoint_model import resolve

    source = resolve(str(out))  # what sera eval --policy hf --model OUT loads
    assert source is not None and source.base == "tiny" and source.path == ckpt.path


def test_sft_lr_replaces_the_optimizer_lr(tmp_path: Path) -> None:
    cfg = load_config(LETTERS, overrides=[*SFT_KEYS, "sft.epochs=1", "sft.train_tasks=4", "sft.lr=3e-4"])
    run_sft(cfg, tmp_path / "run", log=_quiet)
    assert {line["lr"] for line in _lines(tmp_path / "run") if line["kind"] == "train"} == {3e-4}


def test_masks_train_only_expert_completions() -> None:
    cfg = load_config("configs/textcraft-synth/sera.yaml", preset="tiny")  # the preset's sft.max_calls_per_agent: 6
    spec = get_env(cfg.environment.name)
    _, tokenizer = load_model(cfg)
    tasks = [t for t in training_tasks(cfg, spec) if t.id in ("textcraft_synth.train.6", "textcraft_synth.train.8")]
    demos = demonstrations(cfg, spec, tasks, tokenizer)
    assert demos.counts["successful_trees"] == 2
    stages = demos.by_stage()
    assert stages["rubric_generation"] == stages["rubric_scoring"] == 3  # one of each per delegated child
    trees = {t.task_id: t for t in demos.trees}
    depths = set()
    for datum in demos.datums:
        tree = trees[datum.trajectory_id.split("/")[0]]
        node = tree.nodes[datum.node_id]
        trained = [tok for tok, m in zip(datum.tokens, datum.mask) if m]
        assert not datum.mask[0]
        if datum.stage == "execution":
            depths.add(datum.depth)
            expected = [tok for i in datum.steps for tok in node.steps[i].completion_token_ids]
            assert trained == expected  # exactly the expert's completions, nothing of the prompts
            text = tokenizer.decode(trained)
            assert all(node.steps[i].completion_text in text for i in datum.steps)
        else:
            call = node.rubric_call if datum.stage == "rubric_generation" else node.score_call
            assert trained == call.completion_token_ids
            assert list(datum.tokens[: len(call.prompt_token_ids)]) == call.prompt_token_ids
    assert depths == {0, 1}
    root_text = "".join(s.completion_text for s in trees["textcraft_synth.train.8"].nodes["n0"].steps)
    assert "launch_subagent" in root_text  # delegating replies are demonstrated too


def test_no_successful_demonstration_is_one_line_error(tmp_path: Path) -> None:
    cfg = load_config("configs/textcraft-synth/sera.yaml", preset="tiny",
                      overrides=["sft.max_calls_per_agent=1", "sft.train_tasks=2", "sft.val_tasks=1"])
    with pytest.raises(SftError, match="no successful demonstration") as err:
        run_sft(cfg, tmp_path / "run", log=_quiet)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()
    result = CliRunner().invoke(app, ["sft", "--config", "configs/textcraft-synth/sera.yaml", "--preset", "tiny",
                                      "--out", str(tmp_path / "cli"), "sft.max_calls_per_agent=1", "sft.train_tasks=2"])
    assert result.exit_code == 2 and "no successful demonstration" in result.output
    assert not (tmp_path / "cli").exists()


def test_sft_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="unknown key 'sft.epoch'"):
        load_config(LETTERS, overrides=["sft.epoch=2"])
    with pytest.raises(ConfigError, match="sft.val_split='test'"):
        load_config(LETTERS, overrides=["sft.val_split=test"])
    with pytest.raises(ConfigError, match="sft.batch_datums"):
        load_config(LETTERS, overrides=["sft.batch_datums=0"])


def test_init_from_loads_sft_weights_with_fresh_optimizer(sft_run, tmp_path: Path) -> None:
    out, _ = sft_run
    cfg = load_config(LETTERS, overrides=["max_steps=1", "batch_tasks=2", "K=2"])
    saved = torch.load(load_latest(out / "checkpoints").file("learner.pt"), weights_only=True)
    model, tokenizer, record = load_init(out, cfg)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved["weights"][name]), name
    learner = make_learner(cfg, model, tokenizer)
    assert learner.steps == 0 and not learner.optimizer.state_dict()["state"]
    assert record["identity"].startswith("step_000004 learner.pt sha256:")

    run = tmp_path / "rl"
    result = run_train(cfg, run, init_from=out, log=_quiet)
    assert result.version == 1
    assert json.loads((run / INIT_FILE).read_text())["path"] == str(out.resolve())
    state = torch.load(load_latest(run / "checkpoints").file("learner.pt"), weights_only=True)
    assert state["steps"] == 1  # counted from 0, not from the SFT run's 4 steps
    assert all(float(s["step"]) == 1 for s in state["optimizer"]["state"].values())


def test_a_resumed_lora_run_keeps_the_init_from_base(sft_run, tmp_path: Path) -> None:
    # LoRA checkpoints hold only the adapter: a resume must rebuild the base from --init-from's
    # weights, not from the bare model, or it trains the adapter on another base from then on.
    out, _ = sft_run
    keys = ["batch_tasks=2", "K=2", "model.finetune=lora", "model.lora_rank=8", "checkpoint.every=1"]
    straight = tmp_path / "straight"
    run_train(load_config(LETTERS, overrides=["max_steps=2", *keys]), straight, init_from=out, log=_quiet)
    resumed = tmp_path / "resumed"
    run_train(load_config(LETTERS, overrides=["max_steps=1", *keys]), resumed, init_from=out, log=_quiet)
    run_train(load_config(LETTERS, overrides=["max_steps=2", *keys]), resumed, resume=True, log=_quiet)
    a, b = _lines(straight), _lines(resumed)
    assert [(x["step"], x["trained"]) for x in a] == [(x["step"], x["trained"]) for x in b]
    trained = [(x["loss"], y["loss"]) for x, y in zip(a, b) if x["trained"]]
    assert len(trained) == 2 and all(y == pytest.approx(x, abs=1e-5) for x, y in trained)


def test_a_resume_reads_the_init_checkpoint_it_started_from_not_the_init_runs_newest(sft_run, tmp_path: Path) -> None:
    # The SFT run may go on after RL started from it: a resumed LoRA run still trains its adapter
    # on the weights it started from; a start checkpoint that is gone or changed is one line.
    init = tmp_path / "sft"
    shutil.copytree(sft_run[0], init)
    keys = ["batch_tasks=2", "K=2", "model.finetune=lora", "model.lora_rank=8", "checkpoint.every=1"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_train(load_config(LETTERS, overrides=["max_steps=2", *keys]), straight, init_from=init, log=_quiet)
    run_train(load_config(LETTERS, overrides=["max_steps=1", *keys]), resumed, init_from=init, log=_quiet)
    started_from = load_latest(init / "checkpoints")
    state = torch.load(started_from.file("learner.pt"), weights_only=True)
    state["weights"] = {name: tensor + 0.5 for name, tensor in state["weights"].items()}
    save_checkpoint(init / "checkpoints", {"learner.pt": lambda f: torch.save(state, f)}, step=99, version=0, round=0)
    run_train(load_config(LETTERS, overrides=["max_steps=2", *keys]), resumed, resume=True, log=_quiet)
    a, b = _lines(straight), _lines(resumed)
    trained = [(x["loss"], y["loss"]) for x, y in zip(a, b) if x["trained"]]
    assert len(trained) == 2 and all(y == pytest.approx(x, abs=1e-5) for x, y in trained)

    record = json.loads((resumed / INIT_FILE).read_text())
    assert record["checkpoint"] == str(started_from.path)
    (resumed / INIT_FILE).write_text(json.dumps({**record, "identity": "step_000004 learner.pt sha256:0"}))
    with pytest.raises(TrainError, match=r"^resuming .*: it started from step_000004 learner.pt sha256:0 in .*step_000004 "
                                         r"\(its init_from.json\), which is now step_000004 learner.pt sha256:[0-9a-f]+; "
                                         r"the run's weights fit the former only$"):
        run_train(load_config(LETTERS, overrides=["max_steps=3", *keys]), resumed, resume=True, log=_quiet)
    (resumed / INIT_FILE).write_text(json.dumps({**record, "checkpoint": str(tmp_path / "gone")}))
    with pytest.raises(TrainError, match=r"^resuming .*: the checkpoint it started from \(.*gone, its init_from.json\) "
                                         r"cannot be loaded: no such directory$"):
        run_train(load_config(LETTERS, overrides=["max_steps=3", *keys]), resumed, resume=True, log=_quiet)


def test_a_lora_run_from_init_loads_as_its_adapter_on_the_init_weights(sft_run, tmp_path: Path) -> None:
    # What sera eval / the main job's evaluation load for a LoRA run started with --init-from:
    # the adapter merged into the SFT weights it was trained on, not into the bare base model.
    from sera.checkpoints.lora import LoraSettings
    from sera.policy.checkpoint_model import CheckpointModelError, apply_learner_weights, load_trained, resolve

    out, _ = sft_run
    cfg = load_config(LETTERS, overrides=["max_steps=1", "batch_tasks=2", "K=2", "model.finetune=lora",
                                          "model.lora_rank=8", "optimizer.lr=1e-2"])
    run = tmp_path / "rl"
    run_train(cfg, run, init_from=out, log=_quiet)
    loaded, _ = load_trained(resolve(str(run)))
    state = torch.load(load_latest(run / "checkpoints").file("learner.pt"), weights_only=True)
    init, _, _ = load_init(out, cfg)
    lora = LoraSettings(rank=8, alpha=cfg.model.lora_alpha)
    expected = apply_learner_weights(init, state, lora=lora, where="test", merge=True)
    bare = apply_learner_weights(load_model(cfg)[0], state, lora=lora, where="test", merge=True)
    for (name, tensor), want in zip(loaded.state_dict().items(), expected.state_dict().values()):
        assert torch.equal(tensor, want), name
    assert any(not torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), bare.state_dict().values()))
    # The init checkpoint replaced (another sha256) or gone: one line, nothing loaded.
    record = json.loads((run / INIT_FILE).read_text())
    (run / INIT_FILE).write_text(json.dumps({**record, "identity": "step_000004 learner.pt sha256:0"}))
    with pytest.raises(CheckpointModelError, match=r"a LoRA adapter trained on .*sha256:0 .* which is now step_000004") as err:
        load_trained(resolve(str(run)))
    assert "\n" not in str(err.value)
    (run / INIT_FILE).write_text(json.dumps({**record, "checkpoint": str(tmp_path / "gone")}))
    with pytest.raises(CheckpointModelError, match=r"which is gone; the adapter fits those weights only"):
        load_trained(resolve(str(run)))


def test_init_from_bad_folders(sft_run, tmp_path: Path) -> None:
    out, _ = sft_run
    cfg = load_config(LETTERS, overrides=["max_steps=1"])
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "checkpoints").mkdir()
    with pytest.raises(InitFromError, match="holds no checkpoint"):
        run_train(cfg, tmp_path / "a", init_from=empty, log=_quiet)
    assert not (tmp_path / "a").exists()

    other = tmp_path / "other"  # a checkpoint whose run trained another model
    shutil.copytree(out, other)
    data = yaml.safe_load((other / "config.yaml").read_text())
    data["model"]["name"] = "smollm2"
    (other / "config.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(InitFromError, match=r"learner\.pt holds weights of model 'smollm2'.*model\.name='tiny'") as err:
        load_init(other, cfg)
    assert "\n" not in str(err.value)

    wrong = tmp_path / "wrong"  # the same model name, weights of another shape
    wrong.mkdir()
    (wrong / "config.yaml").write_text(dump_config(cfg))
    small, _ = tiny_model_and_tokenizer(hidden_size=32)
    weights = {"lora": False, "weights": small.state_dict(), "steps": 1}
    save_checkpoint(wrong / "checkpoints", {"learner.pt": lambda f: torch.save(weights, f)}, step=1, version=1, round=1)
    with pytest.raises(InitFromError, match=r"learner\.pt.*do not fit") as err:
        load_init(wrong, cfg)
    assert "\n" not in str(err.value)

    result = CliRunner().invoke(app, ["train", "--config", LETTERS, "--out", str(tmp_path / "b"),
                                      "--init-from", str(other)])
    assert result.exit_code == 2 and "smollm2" in result.output
    assert not (tmp_path / "b").exists()


def test_demonstrated_replies_longer_than_the_sampling_budget_are_counted_and_warned() -> None:
    # The expert's code cells run to ~200-380 SmolLM2 tokens: the tiny preset's 16-token budget would
    # cut off a policy imitating them mid-cell.
    cfg = load_config("configs/textcraft-synth/sera.yaml", preset="tiny")
    spec = get_env(cfg.environment.name)
    _, tokenizer = load_model(cfg)
    tasks = [t for t in training_tasks(cfg, spec) if t.id == "textcraft_synth.train.6"]
    counts = demonstrations(cfg, spec, tasks, tokenizer).counts
    assert 0 < counts["replies_over_max_tokens"] <= counts["replies"]
    assert long_reply_warning(counts, 16) == (
        f"warning: {counts['replies_over_max_tokens']} of {counts['replies']} demonstrated agent replies are longer than "
        "rollout.max_tokens=16: a policy that imitates them is cut off mid-reply in RL and evaluation; raise "
        "rollout.max_tokens")
    assert long_reply_warning(Counter(replies=3), 16) is None


def test_sft_can_demonstrate_a_tier_below_the_one_rl_trains_on() -> None:
    """The main job's curriculum: SFT on starter tasks, RL on easy ones, from one config."""
    from sera.train.sft import sft_tasks

    keys = ["environment.name=textcraft-synth", "environment.split=train", "environment.difficulty=easy",
            "sft.train_tasks=6", "sft.val_tasks=2", "sft.val_split=starter-val"]
    spec = get_env("textcraft-synth")
    cfg = load_config(LETTERS, overrides=keys + ["sft.split=starter-train", "sft.difficulty=starter"])
    train, val = sft_tasks(cfg, spec)
    assert len(train) == 6 and {t.difficulty for t in train} == {"starter"}
    assert {t.id.split(".")[1] for t in train} == {"starter-train"} and {t.difficulty for t in val} == {"starter"}
    assert {t.difficulty for t in training_tasks(cfg, spec)} == {"easy"}  # RL's tasks are untouched
    with pytest.raises(ConfigError, match="sft.split='nope'"):
        load_config(LETTERS, overrides=keys + ["sft.split=nope"])
    with pytest.raises(ConfigError, match="sft.difficulty='trivial'"):
        load_config(LETTERS, overrides=keys + ["sft.difficulty=trivial"])


def test_sft_takes_its_own_learning_rate_and_adam_epsilon(tmp_path: Path) -> None:
    from sera.train.setup import learner_config

    cfg = load_config(LETTERS, overrides=["optimizer.lr=2e-5", "optimizer.eps=1e-4", "sft.lr=1e-4", "sft.eps=1e-8"])
    _, tokenizer = tiny_model_and_tokenizer(seed=1)
    rl, sft = learner_config(cfg, tokenizer), learner_config(cfg, tokenizer, lr=cfg.sft.lr, eps=cfg.sft.eps)
    assert (rl.lr, rl.eps, sft.lr, sft.eps) == (2e-5, 1e-4, 1e-4, 1e-8)
    plain = load_config(LETTERS, overrides=["optimizer.eps=1e-4"])
    assert learner_config(plain, tokenizer, lr=plain.sft.lr, eps=plain.sft.eps).eps == 1e-4  # null: optimizer.eps
