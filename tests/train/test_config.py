"""Training configs: every shipped YAML under every preset, the paper's values, errors that name keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from sera.train.config import (
    PRESETS,
    ConfigError,
    TrainConfig,
    check_host,
    config_diff,
    describe,
    dump_config,
    load_config,
    parse_yaml,
    validate_config,
)
from sera.train.method import PRESETS as METHOD_PRESETS

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FILES = sorted(CONFIGS.glob("*-*/*.yaml"))
PAPER_SIX = ["rao", "rao+d", "rao+rt", "sera-no-d-rt", "sera-no-d", "sera"]


def test_one_file_per_environment_and_variant() -> None:
    tc = {p.stem for p in (CONFIGS / "textcraft-synth").glob("*.yaml")}
    tw = {p.stem for p in (CONFIGS / "textworld-sync").glob("*.yaml")}
    assert tc == set(METHOD_PRESETS)
    assert tw == set(METHOD_PRESETS) - {"sera-global-rubric"}
    assert set(PAPER_SIX) <= tw


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_config_loads_and_round_trips(path: Path, preset: str) -> None:
    cfg = load_config(path, preset=preset)
    assert cfg.preset == preset
    assert cfg.environment.name == path.parent.name and cfg.method.name == path.stem
    assert cfg.resolved_method().name == path.stem
    assert validate_config(parse_yaml(dump_config(cfg))) == cfg  # the dumped config loads back the same


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_paper_values(path: Path) -> None:
    cfg = load_config(path)  # the files name `preset: paper`
    tw = cfg.environment.name == "textworld-sync"
    assert cfg.preset == "paper"
    assert (cfg.model.name, cfg.model.dtype, cfg.model.finetune, cfg.model.gradient_checkpointing) == (
        "Qwen/Qwen3-4B-Instruct-2507", "bf16", "full", True)
    o = cfg.optimizer
    assert (o.lr, o.betas, o.eps, o.weight_decay, o.grad_clip, o.schedule) == (3e-6, (0.9, 0.95), 1e-8, 0.017, 1.0, "constant")
    assert (cfg.loss.name, cfg.loss.clip_low, cfg.loss.clip_high, cfg.loss.kl_coef, cfg.loss.normalize_rewards) == (
        "cispo", 0.0, 5.0, 0.0, False)
    r = cfg.rollout
    assert (r.batch_tasks, r.trees_per_task) == (8, 8)
    assert (r.agent_temperature, r.rubric_temperature, r.scorer_temperature) == (1.0, 1.0, 0.0)
    assert (r.max_calls_per_agent, r.max_depth, r.branches, r.fork_copies, r.margin) == (20, 3, 8, 16, 0.2)
    assert (r.rubric_max_tokens, r.scorer_max_tokens) == (1024, 1024)
    assert r.repetition_stop == 0  # the authors' code has no loop stop
    assert (r.max_tokens, r.max_prompt_tokens, r.context) == ((3072, 10240, 13312) if tw else (512, 9600, 10240))
    assert r.scorer_max_tokens_rt == (512 if tw else 1024)
    assert cfg.steps.max_steps == (400 if tw else 250)
    assert cfg.steps.min_trainable_datums == 8
    assert cfg.steps.zero_variance == ("keep" if tw else "drop_refill")
    assert cfg.checkpoint.every == 50
    sera = cfg.method.name.startswith("sera")
    assert cfg.seed == {(False, True): 353, (False, False): 343, (True, True): 362, (True, False): 367}[(tw, sera)]
    if tw:
        assert (cfg.environment.split, cfg.environment.difficulty) == ("train", None)  # all 1,500
        assert (cfg.eval.every, cfg.eval.split, cfg.eval.limit, cfg.eval.temperature) == (50, "dev", 200, 0.0)
    else:
        assert (cfg.environment.split, cfg.environment.difficulty) == ("train", "medium")  # the 852
    method = cfg.resolved_method()
    assert (method.loss, method.branches, method.max_fork_envs, method.margin) == ("cispo", 8, 16, 0.2)


def test_cpu_and_tiny_presets_are_small() -> None:
    cpu = load_config(CONFIGS / "textcraft-synth/sera.yaml", preset="cpu")
    assert (cpu.model.name, cpu.model.dtype, cpu.model.device) == ("smollm2", "fp32", "cpu")
    assert (cpu.rollout.batch_tasks, cpu.rollout.trees_per_task, cpu.environment.difficulty) == (2, 2, "easy")
    tiny = load_config(CONFIGS / "textworld-sync/sera.yaml", preset="tiny")
    assert (tiny.model.name, tiny.model.device, tiny.steps.max_steps) == ("tiny", "cpu", 3)
    assert tiny.seed == 362  # the preset changes scale, not the run's identity


def test_overrides_are_typed_and_aliases_work() -> None:
    cfg = load_config(CONFIGS / "textcraft-synth/sera.yaml", overrides=[
        "max_steps=6", "optimizer.lr=1e-5", "seed=7", "model.gradient_checkpointing=false",
        "optimizer.betas=[0.8, 0.9]", "method.overrides.rao_lambda=0.5", "environment.difficulty=null"])
    assert cfg.steps.max_steps == 6 and cfg.optimizer.lr == 1e-5 and cfg.seed == 7
    assert cfg.model.gradient_checkpointing is False and cfg.optimizer.betas == (0.8, 0.9)
    assert cfg.resolved_method().rao_lambda == 0.5 and cfg.environment.difficulty is None
    assert load_config(None, overrides=["lr=2e-6", "K=4"]).rollout.trees_per_task == 4


def test_yaml_exponents_are_floats() -> None:
    assert parse_yaml("lr: 3e-6") == {"lr": 3e-6}
    assert parse_yaml("x: 1e3\ny: 12\nz: '1e3'") == {"x": 1000.0, "y": 12, "z": "1e3"}


@pytest.mark.parametrize(("override", "expected"), [
    ("optimzer.lr=1", "unknown key 'optimzer' (did you mean 'optimizer'?)"),
    ("optimizer.lrr=1", "unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)"),
    ("rollout.trees_per_tsk=4", "did you mean 'rollout.trees_per_task'?"),
    ("judge.base_ur=http://x", "did you mean 'judge.base_url'?"),
    ("method.overrides.rao_lamda=1", "method.overrides.rao_lamda (did you mean 'rao_lambda'?)"),
])
def test_typo_names_the_closest_key(override: str, expected: str) -> None:
    with pytest.raises(ConfigError, match="unknown") as err:
        load_config(CONFIGS / "textworld-sync/sera.yaml", overrides=[override])
    assert expected in str(err.value)


@pytest.mark.parametrize(("override", "key", "value"), [
    ("optimizer.lr=fast", "optimizer.lr", "'fast'"),
    ("max_steps=many", "steps.max_steps", "'many'"),
    ("model.dtype=fp16", "model.dtype", "'fp16'"),
    ("rollout.trees_per_task=1", "rollout.trees_per_task", "1"),
    ("optimizer.betas=[0.9, 1.5]", "optimizer", "1.5"),
])
def test_wrong_type_names_key_and_value(override: str, key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(CONFIGS / "textcraft-synth/sera.yaml", overrides=[override])
    assert key in str(err.value) and value in str(err.value)


@pytest.mark.parametrize("variant", ["rao", "rao+d", "rao+rt", "sera-no-d", "sera", "sera-external-rubric"])
def test_textworld_method_needing_a_judge_is_refused_without_one(variant: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(CONFIGS / f"textworld-sync/{variant}.yaml", overrides=["judge=null"])
    assert f"method.name='{variant}' on environment.name='textworld-sync' needs an external judge" in str(err.value)


def test_methods_that_need_no_judge_load_without_one() -> None:
    assert load_config(CONFIGS / "textworld-sync/sera-no-d-rt.yaml").judge is None
    assert load_config(CONFIGS / "textcraft-synth/rao+rt.yaml").judge is None  # verifier labels


@pytest.mark.parametrize(("path", "overrides", "message"), [
    ("textworld-sync/sera-no-d-rt.yaml", ["method.name=sera-global-rubric"], "global rubric exists for TextCraft-Synth only"),
    ("textcraft-synth/sera.yaml", ["rollout.max_depth=0"], "need delegation, but rollout.max_depth is 0"),
    ("textcraft-synth/sera.yaml", ["rollout.fork_copies=8"], "rollout.fork_copies >= 1 + rollout.branches"),
    ("textcraft-synth/sera.yaml", ["method.overrides.schedule=execution:4,teaching:2"], "unknown stage 'teaching'"),
    ("textcraft-synth/sera.yaml", ["method.overrides.loss=pg"], "method.overrides.loss: set loss.name instead"),
    ("textcraft-synth/sera.yaml", ["method.name=sera2"], "unknown method 'sera2'"),
    ("textcraft-synth/sera.yaml", ["environment.rules=sync"], "textcraft-synth has no rules profiles"),
    ("textworld-sync/sera.yaml", ["environment.rules=fast"], "environment.rules='fast'"),
    ("textcraft-synth/sera.yaml", ["environment.split=dev"], "environment.split='dev'"),
    ("textcraft-synth/sera.yaml", ["environment.difficulty=medum"], "environment.difficulty='medum'"),
    ("textcraft-synth/sera.yaml", ["eval.every=5"], "eval.split='dev'"),
    ("textcraft-synth/sera.yaml", ["rollout.max_tokens=1024"], "exceed rollout.context (10240)"),
    ("textcraft-synth/sera.yaml", ["rollout.repetition_stop=8"], "rollout.repetition_stop=8: use 0 (off) or at least 32"),
    ("textcraft-synth/sera.yaml", ["loss.clip_low=6"], "clip_low <= clip_high"),
    ("textcraft-synth/sera.yaml", ["loss.kl_coef=0.1"], "loss.kl_coef"),
    ("textcraft-synth/sera.yaml", ["environment.tasks_file=/nonexistent/tasks.jsonl"], "no such file"),
    ("textcraft-synth/rao.yaml", ["sampler.backend=vllm", "model.finetune=full", "sampler.vllm.base_url=http://h:1/v1"],
     "sampler.vllm.full_sync='restart' restarts the server sera starts"),
    ("textcraft-synth/rao.yaml", ["sampler.backend=vllm", "model.finetune=lora", "model.lora_rank=600"],
     "model.lora_rank=600: vLLM serves LoRA ranks up to 512"),
    ("textcraft-synth/rao.yaml", ["sampler.vllm.kv_cache_gib=2.5"], "sampler.vllm.kv_cache_gib"),
    ("textcraft-synth/sera.yaml", ["model.fsdp_processes=2", "model.finetune=lora"],
     "model.fsdp_processes=2: the FSDP2 learner trains full weights"),
    ("textcraft-synth/sera.yaml", ["model.fsdp_processes=0"], "model.fsdp_processes"),
    ("textcraft-synth/sera.yaml", ["model.fsdp_processes=2", "model.finetune=full", "model.fsdp_placement=ray"],
     "model.fsdp_placement=ray places the ranks of an FSDP2 learner on a Ray cluster: it needs model.fsdp_processes > 1 "
     "(got 2) and ray.address (got None)"),
    ("textcraft-synth/sera.yaml", ["model.fsdp_placement=ray", "ray.address=local"], "(got 1) and ray.address"),
    ("textcraft-synth/sera.yaml", ["model.fsdp_placement=nodes"], "model.fsdp_placement"),
])
def test_impossible_combinations(path: str, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(CONFIGS / path, overrides=overrides)
    assert message in str(err.value)


def test_rules_profile_for_textworld() -> None:
    assert load_config(CONFIGS / "textworld-sync/sera.yaml", overrides=["environment.rules=reference"]).environment.rules == "reference"


def test_bad_presets_and_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="preset='papr': not found .*did you mean 'paper'"):
        load_config(CONFIGS / "textcraft-synth/sera.yaml", preset="papr")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- 1\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not key=value"):
        load_config(None, overrides=["seed"])
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")


def test_own_preset_file_and_explicit_file_keys_win(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("all:\n  rollout:\n    batch_tasks: 3\ntextcraft-synth:\n  steps:\n    max_steps: 9\n")
    cfg = load_config(CONFIGS / "textcraft-synth/sera.yaml", preset=str(mine))
    assert (cfg.rollout.batch_tasks, cfg.steps.max_steps, cfg.preset) == (3, 9, None)
    own = tmp_path / "run.yaml"
    own.write_text("preset: cpu\nrollout:\n  batch_tasks: 5\n")
    assert load_config(own).rollout.batch_tasks == 5  # the file's explicit key is above the preset


def test_dumped_config_reloads_identically(tmp_path: Path) -> None:
    cfg = load_config(CONFIGS / "textworld-sync/sera.yaml", preset="cpu", overrides=["max_steps=6", "seed=9"])
    saved = tmp_path / "config.yaml"
    saved.write_text(dump_config(cfg))
    assert load_config(saved) == cfg and config_diff(cfg, load_config(saved)) == []


def test_diff_names_keys() -> None:
    a = load_config(CONFIGS / "textcraft-synth/sera.yaml")
    b = load_config(CONFIGS / "textcraft-synth/sera.yaml", overrides=["optimizer.lr=1e-5", "seed=1", "method.overrides.rao_lambda=0.1"])
    diff = config_diff(a, b)
    assert [line.split(":")[0] for line in diff] == ["method.overrides.rao_lambda", "optimizer.lr", "seed"]
    assert "optimizer.lr: 3e-06 -> 1e-05" in diff
    assert "method.overrides.rao_lambda: (absent) -> 0.1" in diff


def test_describe_lists_the_first_cycle() -> None:
    text = describe(load_config(CONFIGS / "textcraft-synth/sera.yaml"))
    assert "seed: 353" in text
    assert "versions   0-15  execution" in text and "versions  16-17  delegation" in text
    assert "versions  18-19  rubric_generation" in text
    assert "8 tasks x K=8 = 64 root trees; 250 updates" in text
    assert "version    0     execution" in describe(load_config(CONFIGS / "textcraft-synth/rao.yaml"))


def test_check_host(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="model.device='cuda': no CUDA device"):
        load_config(CONFIGS / "textcraft-synth/sera.yaml", host=True)
    check_host(load_config(CONFIGS / "textcraft-synth/sera.yaml", preset="cpu"))  # no error


def test_every_field_has_a_docstring() -> None:
    def walk(model: type) -> None:
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no docstring"
            for arg in (info.annotation, *getattr(info.annotation, "__args__", ())):
                if isinstance(arg, type) and hasattr(arg, "model_fields"):
                    walk(arg)

    walk(TrainConfig)


def test_repetition_stop_reaches_the_agents_sampling_in_training_and_in_the_fixed_evaluation() -> None:
    from sera.envs.registry import get_env
    from sera.pipeline.evalset import eval_runtime
    from sera.train.setup import runtime_config

    cfg = load_config(CONFIGS / "textcraft-synth/sera.yaml", overrides=["rollout.repetition_stop=64"])
    spec = get_env(cfg.environment.name)
    assert runtime_config(cfg, spec).sampling.repetition_stop == 64
    assert eval_runtime(cfg, spec).sampling.repetition_stop == 64
    assert runtime_config(load_config(CONFIGS / "textcraft-synth/sera.yaml"), spec).sampling.repetition_stop == 0


@pytest.mark.parametrize("path", sorted((CONFIGS / "main").glob("*.yaml")), ids=lambda p: p.stem)
def test_main_job_configs_load_and_round_trip(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.environment.name == "textcraft-synth" and cfg.sft.expert == "short"
    assert validate_config(parse_yaml(dump_config(cfg))) == cfg


def test_the_easy_main_job_is_the_starter_job_one_tier_up() -> None:
    """The easy config changes the band, the sizes an easy task needs and the RL's AdamW epsilon
    (the starter job's eps 1e-4 was measured there only; both RL at lr 2e-5); nothing else."""
    starter = load_config(CONFIGS / "main" / "textcraft-cpu.yaml").model_dump()
    easy = load_config(CONFIGS / "main" / "textcraft-cpu-easy.yaml").model_dump()
    changed = {(section, key) for section in starter if isinstance(starter[section], dict)
               for key in starter[section] if starter[section][key] != easy[section][key]}
    assert changed == {
        ("environment", "split"), ("environment", "difficulty"), ("optimizer", "eps"), ("sft", "eps"),
        ("rollout", "batch_tasks"), ("rollout", "trees_per_task"), ("rollout", "max_tokens"),
        ("sft", "val_split"), ("pipeline", "budget_minutes"), ("pipeline", "eval_split"),
        ("pipeline", "eval_difficulty"),
    }


def test_auto_dtype_is_bf16_only_where_the_cpu_computes_it_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    """`model.dtype: auto` becomes a concrete dtype when the config is read: bf16 on a CPU with
    AVX-512 BF16 or AMX, fp32 on one that would emulate it; `sampler.weights: bf16_copy` needs bf16."""
    from sera.train import hardware

    keys = ["model.device=cpu", "model.dtype=auto", "sampler.weights=auto"]
    monkeypatch.setattr(hardware, "cpu_supports_bf16", lambda: True)
    assert load_config(None, overrides=keys).model.dtype == "bf16"
    monkeypatch.setattr(hardware, "cpu_supports_bf16", lambda: False)
    cfg = load_config(None, overrides=keys)
    assert cfg.model.dtype == "fp32"
    from sera.train.sampler_setup import samples_from_bf16_copy

    assert not samples_from_bf16_copy(cfg)
    with pytest.raises(ConfigError, match=r"sampler.weights='bf16_copy' with model.dtype='fp32'"):
        load_config(None, overrides=["model.device=cpu", "model.dtype=auto", "sampler.weights=bf16_copy"])


def test_several_vllm_servers_are_for_ray_workers_and_each_needs_a_worker() -> None:
    vllm = ["sampler.backend=vllm", "model.finetune=lora"]
    two = ["sampler.vllm.base_url=[http://10.0.0.1:8000/v1, http://10.0.0.2:8000/v1]"]
    cfg = load_config(None, overrides=[*vllm, *two, "ray.address=local", "ray.workers=2"])
    assert cfg.sampler.vllm.urls == ["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"] and cfg.sampler.vllm.count == 2
    assert load_config(None, overrides=[*vllm, "sampler.vllm.base_url=http://h:1/v1"]).sampler.vllm.urls == ["http://h:1/v1"]
    with pytest.raises(ConfigError, match=r"2 vLLM servers need Ray rollout workers \(ray.address\)"):
        load_config(None, overrides=[*vllm, *two])
    with pytest.raises(ConfigError, match=r"2 vLLM servers need Ray rollout workers"):
        load_config(None, overrides=[*vllm, "sampler.vllm.servers=2"])
    with pytest.raises(ConfigError, match=r"ray.workers=1 for 3 vLLM servers: a server without a worker would sit idle"):
        load_config(None, overrides=[*vllm, "sampler.vllm.servers=3", "ray.address=local", "ray.workers=1"])
    with pytest.raises(ConfigError, match=r"sampler.vllm.servers=2 with sampler.vllm.base_url: .* not both"):
        load_config(None, overrides=[*vllm, *two, "sampler.vllm.servers=2", "ray.address=local"])
    with pytest.raises(ConfigError, match=r"sampler.vllm.base_url.*an empty list"):
        load_config(None, overrides=[*vllm, "sampler.vllm.base_url=[]"])
