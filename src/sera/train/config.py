"""The training run's configuration: a typed, validated `TrainConfig` and how it is loaded.

Layers, lowest first: the field defaults (the paper's environment-independent values and
TextCraft's caps) < the scale preset (`configs/presets/<name>.yaml`: its `all:` part, then the
part for the run's environment) < the config file < `key=value` overrides. The variant files
(`configs/<env>/<variant>.yaml`) carry only what names the run (environment, method, seed,
judge), so the preset decides the scale; a file's own explicit keys win over the preset so that
the dumped, resolved config (`dump_config`) loads back to the same `TrainConfig`.

Every mistake is a `ConfigError` naming the key and the value: an unknown key (with the closest
valid name), a wrong type, or an impossible combination (`TrainConfig._check_combinations`).
What depends on the machine (CUDA present, bf16 on the GPU) is `check_host`, kept apart so that
any config can be loaded and described anywhere.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sera.envs.registry import env_names, get_env
from sera.policy.repetition import MAX_PERIOD
from sera.train.method import Method, get_method
from sera.train.schedule import StageSchedule

PresetName = Literal["paper", "cpu", "tiny"]
PRESETS: tuple[str, ...] = ("paper", "cpu", "tiny")
REPO_PRESET_DIR = Path(__file__).resolve().parents[3] / "configs" / "presets"
"""The presets shipped with the repository (`configs/presets/`)."""
DIFFICULTIES = ("starter", "easy", "medium", "hard", "extreme")
"""Difficulty bands a config may name; `starter` is TextCraft-Synth's CPU curriculum tier
(`starter-train` / `starter-val`, `sera.envs.textcraft.starter`)."""
MIN_REPETITION_STOP = 2 * MAX_PERIOD
"""The shortest `rollout.repetition_stop` span: the longest unit must repeat at least twice."""


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key and the value."""


class _Section(BaseModel):
    """A config section: unknown keys refused, frozen, field docstrings as descriptions."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ModelConfig(_Section):
    """The trained model and how it is fine-tuned."""

    name: str = "Qwen/Qwen3-4B-Instruct-2507"
    """Model name or local path (`smollm2`: the embedded SmolLM2-135M; `tiny`: the random test model)."""
    dtype: Literal["auto", "fp32", "bf16"] = "bf16"
    """Compute dtype of the learner: `bf16` is autocast over fp32 master weights; `auto` becomes
    bf16 where `device` computes it natively (a GPU with bf16, a CPU with AVX-512 BF16 or AMX),
    else fp32, when the config is read (the run's config.yaml records the choice)."""
    device: Literal["cpu", "cuda"] = "cuda"
    """Where the learner runs."""
    finetune: Literal["full", "lora"] = "full"
    """Full fine-tuning (the paper's) or a LoRA adapter."""
    lora_rank: int = Field(32, ge=1)
    """LoRA rank (used only with `finetune: lora`)."""
    lora_alpha: float = Field(32.0, gt=0)
    """LoRA alpha (used only with `finetune: lora`)."""
    gradient_checkpointing: bool = True
    """Recompute activations in the backward pass (saves memory on long datums)."""
    microbatch_tokens: int = Field(60000, ge=1)
    """Token budget of one learner micro-batch (rows x longest row, padding included; the
    paper's 60,000). Activation memory grows with it: SmolLM2-135M in fp32 without gradient
    checkpointing needs about 2.6 MB per token, so a CPU run keeps it near one datum."""
    fsdp_processes: int = Field(1, ge=1)
    """Learner processes of `sera train`: 1 is the single-process `TorchLearner`; N > 1 shards
    full fine-tuning over N ranks on this machine with FSDP2 (`sera.train.sharded_learner`, one
    GPU each on CUDA; gloo on CPU), sampling in process or from a vLLM server that takes the
    gathered full weights (`sampler.vllm.full_sync`). `sera sft` always trains in one process."""
    fsdp_placement: Literal["local", "ray"] = "local"
    """Where ranks 1..N-1 of an FSDP2 learner run: `local`, processes on this machine; `ray`, actors
    of the Ray cluster of `ray.address` (one GPU each on CUDA, one CPU otherwise), on any node
    (`sera.train.ray_learner_ranks`). Rank 0 is the `sera train` process either way."""

    @model_validator(mode="before")
    @classmethod
    def _resolve_auto_dtype(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("dtype") == "auto":
            from sera.train.hardware import native_dtype

            data = {**data, "dtype": native_dtype(str(data.get("device", "cuda")))}
        return data


class OptimizerConfig(_Section):
    """AdamW and its schedule."""

    name: Literal["adamw"] = "adamw"
    """The optimizer (AdamW only)."""
    lr: float = Field(3e-6, gt=0)
    """Learning rate."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas (each in [0, 1))."""
    eps: float = Field(1e-8, gt=0)
    """AdamW epsilon."""
    weight_decay: float = Field(0.017, ge=0)
    """Decoupled weight decay."""
    grad_clip: float = Field(1.0, gt=0)
    """Global gradient-norm clip."""
    schedule: Literal["constant"] = "constant"
    """Learning-rate schedule (the paper's is constant)."""

    @model_validator(mode="after")
    def _betas(self) -> OptimizerConfig:
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must each be in [0, 1), got {list(self.betas)}")
        return self


class LossConfig(_Section):
    """The policy loss (no KL, no reward normalisation: the paper's)."""

    name: Literal["cispo", "ppo_clip", "pg"] = "cispo"
    """Policy loss (`sera.train.losses`); it also sets the method's `loss`."""
    clip_low: float = Field(0.0, ge=0)
    """CISPO: lower bound of the clipped importance ratio."""
    clip_high: float = Field(5.0, ge=0)
    """CISPO: upper bound of the clipped importance ratio (the paper: 5)."""
    ppo_eps_low: float = Field(0.2, ge=0, lt=1)
    """PPO-clip: the ratio is clipped below at 1 - eps_low."""
    ppo_eps_high: float = Field(0.26, ge=0)
    """PPO-clip: the ratio is clipped above at 1 + eps_high."""
    negative_scale: float = Field(1.0, ge=0, le=1)
    """Weight of negative advantages in the policy loss: 1 is the paper's. Below 1 damps the
    push-down of worse-than-baseline trajectories; 0 trains only on better-than-baseline ones (a
    deviation; docs/training.md says what it did on the CPU main job: it did not help there)."""
    kl_coef: Literal[0.0] = 0.0
    """KL penalty weight; only 0 (the paper uses none and the losses have no KL term)."""
    normalize_rewards: Literal[False] = False
    """Reward normalisation; only false (the paper uses none: advantages are LOO differences)."""

    @model_validator(mode="after")
    def _clip(self) -> LossConfig:
        if self.clip_low > self.clip_high:
            raise ValueError(f"need clip_low <= clip_high, got {self.clip_low} > {self.clip_high}")
        return self


# Method settings that have their own config key; giving them as overrides would be ambiguous.
_METHOD_KEYS_ELSEWHERE = {"loss": "loss.name", "branches": "rollout.branches",
                          "max_fork_envs": "rollout.fork_copies", "margin": "rollout.margin", "name": "method.name"}


class MethodConfig(_Section):
    """The training method: a `sera.train.method` preset and overrides."""

    name: str = "sera"
    """A preset of `sera.train.method` (`rao`, `rao+d`, `rao+rt`, `sera-no-d-rt`, `sera-no-d`, `sera`, ablations)."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Method settings changed by name (`rao_lambda`, `failure_policy`, `score_mode`, `schedule`, ...)."""


class EnvironmentConfig(_Section):
    """The environment and its training tasks."""

    name: str = "textcraft-synth"
    """Registry name of the environment (`textcraft-synth`, `textworld-sync`), or the import path
    `module:attribute` of another world's `EnvSpec`."""

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        try:
            get_env(name)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        return name
    split: str = "train"
    """The published split of training tasks (ignored with `tasks_file`)."""
    tasks_file: Path | None = None
    """A task file in the environment's format, instead of the split."""
    difficulty: str | None = None
    """Only tasks of this difficulty band (easy, medium, hard, extreme); null: all."""
    rules: str | None = None
    """TextWorld-Sync rules profile (`sync`, `reference`); null: the tasks' own. TextCraft has none."""


class RolloutConfig(_Section):
    """Sampling, budgets and rubric-training sizes of each round."""

    batch_tasks: int = Field(8, ge=1)
    """Tasks per optimizer step."""
    trees_per_task: int = Field(8, ge=2)
    """K: root trees per task (the LOO group; at least 2)."""
    concurrency: int = Field(64, ge=1)
    """Root trees sampled at once."""
    max_tokens: int = Field(512, ge=1)
    """Completion tokens per agent call."""
    repetition_stop: int = Field(0, ge=0)
    """End an agent call once its last this-many tokens repeat one unit of at most 16 tokens (a
    degenerate loop: the base model's "1. 1. 1. ..."), finish reason `repetition`; 0: off, as in
    the authors' code; else at least 32. Saves the rest of `max_tokens` on replies already
    unparseable."""
    max_prompt_tokens: int = Field(9600, ge=1)
    """Prompt cap per agent call (longer prompts go through the context policy)."""
    context: int = Field(10240, ge=1)
    """Model context length: prompt cap + completion cap must fit."""
    max_calls_per_agent: int = Field(20, ge=1)
    """Policy calls each agent may make."""
    max_depth: int = Field(3, ge=0)
    """Deepest agent depth (root = 0)."""
    agent_temperature: float = Field(1.0, ge=0)
    """Sampling temperature of agent steps."""
    rubric_temperature: float = Field(1.0, ge=0)
    """Sampling temperature of the rubric writer."""
    scorer_temperature: float = Field(0.0, ge=0)
    """Sampling temperature of the rubric scorer (0: greedy)."""
    branches: int = Field(8, ge=2)
    """B: counterfactual children per group in rubric training."""
    fork_copies: int = Field(16, ge=1)
    """World copies per root rollout in rubric training (the root's world counts 1)."""
    margin: float = Field(0.2, ge=0)
    """Ranking margin of the rubric reward."""
    rubric_max_tokens: int = Field(1024, ge=1)
    """Completion cap of a rubric-writing call."""
    scorer_max_tokens: int = Field(1024, ge=1)
    """Completion cap of a rubric-scoring call in execution."""
    scorer_max_tokens_rt: int | None = Field(None, ge=1)
    """Completion cap of a scoring call in rubric training; null: the environment's (1,024 TextCraft, 512 TextWorld)."""


class StepsConfig(_Section):
    """How long to train and when a round is skipped."""

    max_steps: int = Field(250, ge=1)
    """Optimizer updates (policy versions) to train; skipped rounds do not count."""
    min_trainable_datums: int = Field(8, ge=1)
    """A round with fewer datums of non-zero advantage is skipped."""
    max_consecutive_skips: int = Field(10, ge=1)
    """Abort after this many skipped rounds in a row."""
    zero_variance: Literal["drop_refill", "keep"] | None = None
    """Tasks whose trees all got the same reward: drop them and refill with new tasks, or keep
    them; null: the environment's (drop+refill TextCraft, keep TextWorld)."""
    max_refill_waves: int = Field(2, ge=0)
    """Refill waves per round when dropped tasks leave too few trainable datums."""
    max_offpolicy_versions: int = Field(0, ge=0)
    """0 (the paper's setting for SERA): every round is sampled by the policy version it trains.
    N >= 1: the next round of the same stage is sampled while the learner updates on this one
    (one round ahead: it trains one version behind); a round older than N versions at its update
    is dropped and sampled again (`sera.train.lookahead`). Needs a sampler with its own weights
    (`sampler.weights: copy` or `bf16_copy`, the vLLM backend, or Ray workers)."""


class CheckpointConfig(_Section):
    """Checkpoint cadence and retention."""

    every: int = Field(50, ge=1)
    """Write a checkpoint every N optimizer updates (and at the end)."""
    keep_last: int = Field(2, ge=1)
    """Complete checkpoints kept (the one `latest` names is never removed)."""


class EvalConfig(_Section):
    """Periodic evaluation during training."""

    every: int = Field(0, ge=0)
    """Evaluate every N optimizer updates; 0: no evaluation during training."""
    split: str = "dev"
    """The split evaluated."""
    limit: int | None = Field(None, ge=1)
    """At most this many tasks of the split (the first ones); null: all."""
    temperature: float = Field(0.0, ge=0)
    """Sampling temperature of evaluation (0: greedy)."""


class JudgeConfig(_Section):
    """The external judge / rubric model (OpenAI-compatible)."""

    base_url: str
    """OpenAI-compatible endpoint of the external judge / rubric model."""
    model: str = "kimi-k2.6"
    """Served model name."""
    api_key_env: str = "KIMI_API_KEY"
    """Environment variable holding the API key (the key itself never goes into a config)."""
    max_concurrency: int = Field(16, ge=1)
    """Judge requests in flight."""


class LoggingConfig(_Section):
    """Metric sinks besides `metrics.jsonl`."""

    tensorboard: bool = True
    """Write TensorBoard event files under the run directory."""
    wandb_project: str | None = None
    """Weights & Biases project; null: no W&B."""


class SftConfig(_Section):
    """`sera sft`: supervised warm start on the scripted expert's demonstrations (unused by `sera train`)."""

    epochs: int = Field(2, ge=1)
    """Passes over the demonstration datums."""
    train_tasks: int = Field(16, ge=1)
    """Training tasks demonstrated (a seeded sample of the selected training tasks)."""
    val_tasks: int = Field(4, ge=1)
    """Held-out tasks (the first ones of `sft.val_split`, same difficulty) whose demonstrations give the held-out NLL."""
    val_split: str | None = None
    """The held-out split; null: `val`, else `dev`, whichever the environment has."""
    split: str | None = None
    """The split demonstrated; null: `environment.split`. A curriculum demonstrates a tier below
    the one RL trains on (the main job: `starter-train` here, `train` for RL)."""
    difficulty: str | None = None
    """The band demonstrated and held out; null: `environment.difficulty`."""
    batch_datums: int = Field(8, ge=1)
    """Datums per optimizer step (seeded shuffle each epoch)."""
    max_calls_per_agent: int | None = Field(None, ge=1)
    """The expert's call budget per agent; null: `rollout.max_calls_per_agent`."""
    rubric_demos: bool = True
    """Also train the scripted rubric writer's and scorer's calls for each delegated child."""
    lr: float | None = Field(None, gt=0)
    """SFT learning rate; null: `optimizer.lr` (SFT usually wants a larger one than RL)."""
    eps: float | None = Field(None, gt=0)
    """SFT's AdamW epsilon; null: `optimizer.eps` (RL may want a larger one than SFT: docs/pipeline.md)."""
    expert: str = "default"
    """Which scripted expert demonstrates: `default` (the environment's oracle) or another of its
    `EnvSpec.experts` (TextCraft-Synth: `short`, three short regular replies a small model can
    imitate, `sera.envs.textcraft.short_expert`)."""
    checkpoint_every: int = Field(0, ge=0)
    """Also checkpoint every N optimizer steps inside an epoch (0: at the end of each epoch only);
    a killed run resumes from the newest (`sera sft --resume`)."""


class VllmConfig(_Section):
    """The vLLM server that samples for `sampler.backend: vllm`."""

    python: str | None = None
    """The python of the vLLM virtualenv (`make vllm-setup`); null: `$SERA_VLLM_PYTHON`, else
    `.venv-vllm/bin/python` of the repository."""
    base_url: str | list[str] | None = None
    """A running server to use (its `/v1` root), or a list of several (Ray rollout workers only:
    worker i sends its requests to server i mod their number); null: sera starts
    `sampler.vllm.servers` on 127.0.0.1 and stops them. Every server must serve the learner's
    base model (the canary checks each)."""
    servers: int = Field(1, ge=1)
    """Servers sera starts when `base_url` is null, each on its own port (logs `OUT/vllm-server.log`,
    `OUT/vllm-server-1.log`, ...); more than one only with Ray rollout workers, which spread over them."""
    dtype: Literal["auto", "fp32", "bf16"] = "auto"
    """Server weights and compute; `auto`: bf16 on a GPU or a CPU with native bf16, else fp32."""
    kv_cache_gib: int = Field(4, ge=1)
    """KV-cache space of a CPU server (`VLLM_CPU_KVCACHE_SPACE`), whole GiB (vLLM reads an integer)."""
    start_timeout_s: float = Field(600.0, gt=0)
    """Seconds to wait for a started server to answer `/health`."""
    restarts: int = Field(1, ge=0)
    """Restarts of a started server that died during the run before the run stops."""
    request_timeout_s: float = Field(600.0, gt=0)
    """Longest wait for one completion (replies are not streamed: a whole generation, queued
    behind the round's other requests on a busy server); a call that runs out is retried twice."""
    extra_args: list[str] = Field(default_factory=list)
    """More command-line arguments for a started server."""
    full_sync: Literal["restart", "reload"] = "restart"
    """With `model.finetune: full`: how the server takes each update's weights (saved as
    `OUT/weights/v{version}`): `restart` restarts a started server on them (exact; a server start
    per update); `reload` asks the server to read them in place (vLLM's `reload_weights`, a
    dev-mode route; inexact on vllm-cpu 0.32, which the canary catches: docs/training.md)."""
    sleep_during_update: bool = False
    """Colocation on one GPU: put the server to sleep before each update (vLLM's sleep mode, level
    1: weights to host memory, KV cache dropped) so that the learner has the GPU's memory, and wake
    it for the sync. A started server gets `--enable-sleep-mode`; a given one must have it. GPU
    servers only (vLLM has no sleep mode on CPU); no sampling during the update."""

    @field_validator("base_url")
    @classmethod
    def _some_url(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and not value:
            raise ValueError("an empty list: give one URL, several, or null (sera starts the servers)")
        return value

    @property
    def urls(self) -> list[str]:
        """The given servers' URLs (none when sera starts its own)."""
        return [] if self.base_url is None else [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)

    @property
    def count(self) -> int:
        """How many servers the run samples from."""
        return len(self.urls) or self.servers


class SamplerConfig(_Section):
    """Where training rollouts are sampled."""

    backend: Literal["inprocess", "vllm"] = "inprocess"
    """`inprocess`: a transformers sampler sharing the learner's module; `vllm`: a vLLM server
    with the policy as a LoRA adapter hot-loaded after every update, or with `model.finetune:
    full` the full weights (`sampler.vllm.full_sync`)."""
    prefix_cache_gib: float = Field(4.0, ge=0)
    """In-process: memory for reusing prompt KV caches across an agent's turns and shared
    prefixes (0: off)."""
    weights: Literal["shared", "copy", "bf16_copy", "auto"] = "shared"
    """In-process: `shared` samples from the learner's own module (its fp32 master weights, nothing
    copied); `copy` from a copy of it in the same dtype, refreshed at every sync (what lets
    `steps.max_offpolicy_versions` sample while the learner steps); `bf16_copy` from a bf16 copy
    (one more copy of the weights in memory; 1.5x the sampler's tokens/s on a CPU with AMX,
    docs/training.md), which needs `model.dtype: bf16`; `auto`: `bf16_copy` when `model.dtype` is
    bf16, else `copy` with `steps.max_offpolicy_versions` > 0, else `shared`."""
    vllm: VllmConfig = VllmConfig()
    """The server (backend `vllm` only)."""


class RayConfig(_Section):
    """Rollout workers as Ray actors (`sera train --ray ADDRESS`, `sera.train.ray_rollouts`)."""

    address: str | None = None
    """null: sample in this process; `local`: start Ray on this machine (or join the Ray this
    process already runs); otherwise a running cluster (`auto`, `HOST:PORT`, `ray://HOST:PORT`)."""
    workers: int = Field(2, ge=1)
    """Rollout worker actors; each samples its share of a round's trees, with its own copy of the
    policy refreshed (and checked by the canary) at every weight sync (`sampler.backend:
    inprocess`), or by sending requests to the run's vLLM server (`sampler.backend: vllm`; a server
    sera starts listens on 127.0.0.1, so workers on other nodes need `sampler.vllm.base_url`)."""
    worker_cpus: float = Field(1.0, gt=0)
    """CPUs Ray reserves for each worker (also its torch threads, at least 1)."""
    worker_gpus: float = Field(0.0, ge=0)
    """GPUs Ray reserves for each worker; above 0 the worker samples on its GPU, else on its CPUs."""
    connect_timeout_s: float = Field(30.0, gt=0)
    """Longest wait to reach the cluster's address."""
    max_replans: int = Field(2, ge=0)
    """Times one tree is sampled again after its worker died before the round fails as infrastructure."""
    placement_timeout_s: float = Field(120.0, gt=0)
    """Longest wait for the cluster to reserve all follower ranks of an FSDP2 learner at once
    (`model.fsdp_placement: ray`; an autoscaling cluster may need longer); past it, one line says
    what the cluster lacks."""


class PipelineConfig(_Section):
    """`sera pipeline` (the main job): evaluate, SFT, evaluate, RL, evaluate, report."""

    budget_minutes: float = Field(30.0, gt=0)
    """Wall time of the whole job; RL gets what the other phases leave."""
    eval_split: str | None = None
    """Held-out split of the three evaluations; null: `val`, else `dev`."""
    eval_difficulty: str | None = "easy"
    """Difficulty band of the evaluated tasks; null: all."""
    eval_tasks: int = Field(8, ge=1)
    """Evaluated tasks (the first of the split and band): the same fixed set every time."""
    eval_max_calls: int | None = Field(None, ge=1)
    """Policy calls per agent in the evaluations; null: `rollout.max_calls_per_agent`."""
    eval_temperature: float = Field(0.0, ge=0.0)
    """Sampling temperature of the evaluations; 0: greedy. 1 evaluates the distribution RL trains
    (its trees are sampled at the rollouts' temperature), where greedy success can sit at a
    ceiling that sampled success is far below."""
    eval_samples: int = Field(1, ge=1)
    """Rollouts per task in each evaluation, sample k with the same seed every time, so the three
    evaluations pair by (task, sample); more than 1 needs `eval_temperature` > 0."""
    eval_base_samples: int | None = Field(None, ge=1)
    """Rollouts per task in the evaluation before SFT; null: `eval_samples`. Where the base model
    solves nothing (the main job's tasks), 1 leaves RL the time of the others; the paired test
    against the evaluation after SFT uses the (task, sample) pairs both have."""
    eval_concurrency: int | None = Field(None, ge=1)
    """Rollouts the evaluations run at once (one batched forward serves them); null:
    `rollout.concurrency`. On a CPU, decode throughput grows with the batch well past RL's 8."""
    eval_backend: Literal["inprocess", "vllm", "auto"] = "inprocess"
    """What samples the evaluations: `inprocess` (a transformers sampler in this process), `vllm`
    (a vLLM server started for each evaluation on its weights: `sampler.vllm.python`, `dtype`,
    `kv_cache_gib`; 1.6-2.2x the in-process speed measured on a 2-core CPU), or `auto`: vLLM when its
    python exists (`make vllm-setup`) and the server starts, else in process."""
    sft: bool = True
    """Run the SFT warm start (else RL starts from the base model)."""
    rl: bool = True
    """Run RL."""
    eval_rubrics: bool = True
    """For methods whose children are credited by a frozen rubric (SERA): during the evaluations,
    have the policy write (greedy) and score a rubric for every child it launches, hidden from the
    agents, so the report can give the share of valid rubrics; false: plain children."""
    final_eval_margin: float = Field(1.5, ge=1.0)
    """RL stops early enough to leave this many times the measured `eval_sft` wall time (the
    final evaluation's estimate) plus a fixed reserve for the report."""

    @model_validator(mode="after")
    def _samples_need_sampling(self) -> PipelineConfig:
        if self.eval_base_samples is not None and self.eval_base_samples > self.eval_samples:
            raise ValueError(f"pipeline.eval_base_samples={self.eval_base_samples} is more than pipeline.eval_samples="
                             f"{self.eval_samples}: the extra samples would pair with nothing")
        if self.eval_samples > 1 and self.eval_temperature == 0:
            raise ValueError(f"pipeline.eval_samples={self.eval_samples} with pipeline.eval_temperature=0: greedy "
                             f"samples of a task are identical; set eval_temperature > 0 or eval_samples: 1")
        return self


class TrainConfig(_Section):
    """Everything `sera train` needs, validated as a whole."""

    preset: PresetName | None = None
    """The scale preset applied beneath the file (recorded; `load_config` applies it)."""
    model: ModelConfig = ModelConfig()
    """The trained model."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """The optimizer."""
    loss: LossConfig = LossConfig()
    """The policy loss."""
    method: MethodConfig = MethodConfig()
    """Credit rules and stage schedule."""
    environment: EnvironmentConfig = EnvironmentConfig()
    """Environment and training tasks."""
    rollout: RolloutConfig = RolloutConfig()
    """Sampling, budgets and rubric-training sizes."""
    steps: StepsConfig = StepsConfig()
    """How long to train and when to skip."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpoint cadence and retention."""
    eval: EvalConfig = EvalConfig()
    """Periodic evaluation."""
    judge: JudgeConfig | None = None
    """The external judge; null where the method needs none."""
    logging: LoggingConfig = LoggingConfig()
    """Metric sinks."""
    sft: SftConfig = SftConfig()
    """`sera sft` only: demonstrations, epochs, held-out tasks."""
    sampler: SamplerConfig = SamplerConfig()
    """Where rollouts are sampled (in process, or a vLLM server with LoRA hot-loading)."""
    pipeline: PipelineConfig = PipelineConfig()
    """`sera pipeline` only: the main job's evaluations and time budget."""
    ray: RayConfig = RayConfig()
    """Rollout workers on Ray (off unless `ray.address` is set)."""
    seed: int = 0
    """Run seed (tree seeds and task order derive from it)."""

    def resolved_method(self) -> Method:
        """The method: the preset, its overrides, and the keys set elsewhere (loss, B, copies, margin)."""
        return get_method(self.method.name, **{**self.method.overrides, "loss": self.loss.name,
                                               "branches": self.rollout.branches,
                                               "max_fork_envs": self.rollout.fork_copies,
                                               "margin": self.rollout.margin})

    @model_validator(mode="after")
    def _check_combinations(self) -> TrainConfig:
        _check_method(self)
        _check_environment(self)
        n = self.model.fsdp_processes
        if self.model.fsdp_placement == "ray" and (n == 1 or self.ray.address is None):
            raise ValueError(f"model.fsdp_placement=ray places the ranks of an FSDP2 learner on a Ray cluster: it needs "
                             f"model.fsdp_processes > 1 (got {n}) and ray.address (got {self.ray.address!r})")
        if n > 1 and self.model.finetune == "lora":
            raise ValueError(f"model.fsdp_processes={n}: the FSDP2 learner trains full weights; "
                             "set model.finetune=full or model.fsdp_processes=1")
        if self.sampler.vllm.sleep_during_update and self.steps.max_offpolicy_versions:
            raise ValueError("sampler.vllm.sleep_during_update puts the server to sleep during the update, when "
                             f"steps.max_offpolicy_versions={self.steps.max_offpolicy_versions} would sample the next "
                             "round from it; choose one")
        v = self.sampler.vllm
        if v.base_url is not None and v.servers > 1:
            raise ValueError(f"sampler.vllm.servers={v.servers} with sampler.vllm.base_url: set the servers of your own "
                             "(a list in base_url) or the number sera starts (servers), not both")
        if self.sampler.backend == "vllm" and v.count > 1:
            if self.ray.address is None:
                raise ValueError(f"sampler.vllm: {v.count} vLLM servers need Ray rollout workers (ray.address) to spread "
                                 "the trees over them; without Ray the driver samples from one server")
            if self.ray.workers < v.count:
                raise ValueError(f"ray.workers={self.ray.workers} for {v.count} vLLM servers: a server without a worker "
                                 "would sit idle; give at least as many workers as servers")
        if self.ray.address is not None and self.eval.every:
            raise ValueError(f"ray.address={self.ray.address!r} with eval.every={self.eval.every}: periodic evaluation "
                             "does not run on Ray workers yet; set eval.every=0 and use sera eval on the checkpoints")
        if self.sampler.backend == "vllm" and self.model.finetune == "full" and self.sampler.vllm.base_url is not None \
                and self.sampler.vllm.full_sync == "restart":
            raise ValueError("sampler.vllm.full_sync='restart' restarts the server sera starts; with sampler.vllm.base_url "
                             "(a server of your own) use full_sync=reload or model.finetune=lora")
        if self.sampler.backend == "vllm" and self.model.lora_rank > 512:
            raise ValueError(f"model.lora_rank={self.model.lora_rank}: vLLM serves LoRA ranks up to 512")
        if self.sampler.weights == "bf16_copy" and self.model.dtype != "bf16":
            raise ValueError(f"sampler.weights='bf16_copy' with model.dtype='{self.model.dtype}': a bf16 sampler "
                             "beside an fp32 learner fails the fp32 canary; set model.dtype=bf16, or sampler.weights=auto")
        r = self.rollout
        if r.max_prompt_tokens + r.max_tokens > r.context:
            raise ValueError(f"rollout.max_prompt_tokens ({r.max_prompt_tokens}) + rollout.max_tokens "
                             f"({r.max_tokens}) exceed rollout.context ({r.context})")
        if 0 < r.repetition_stop < MIN_REPETITION_STOP:
            raise ValueError(f"rollout.repetition_stop={r.repetition_stop}: use 0 (off) or at least "
                             f"{MIN_REPETITION_STOP}, so a unit of up to {MAX_PERIOD} tokens repeats twice before it counts")
        return self


def _check_method(cfg: TrainConfig) -> None:
    where = f"method.name={cfg.method.name!r}"
    for key, home in _METHOD_KEYS_ELSEWHERE.items():
        if key in cfg.method.overrides:
            raise ValueError(f"method.overrides.{key}: set {home} instead")
    try:
        method = cfg.resolved_method()
    except ValueError as exc:
        raise ValueError(f"{where}: {_with_suggestion(str(exc), cfg.method)}") from None
    env = get_env(cfg.environment.name)
    stages = {stage for stage, _ in method.stage_schedule.entries}
    if stages - {"execution"} and cfg.rollout.max_depth < 1:
        raise ValueError(f"{where}: schedule '{method.schedule}' trains {sorted(stages - {'execution'})}, "
                         f"which need delegation, but rollout.max_depth is {cfg.rollout.max_depth}")
    if "rubric_generation" in stages and 1 + cfg.rollout.branches > cfg.rollout.fork_copies:
        raise ValueError(f"{where}: rubric training needs rollout.fork_copies >= 1 + rollout.branches "
                         f"(the root's world + one group), got fork_copies={cfg.rollout.fork_copies}, "
                         f"branches={cfg.rollout.branches}")
    if method.rubric_writer == "global" and env.global_rubric is None:
        raise ValueError(f"{where}: the global rubric exists for TextCraft-Synth only; "
                         f"environment.name={env.name!r} has none")
    # The same rule as `Collector.__post_init__`, checked before any model is loaded.
    needs = [why for why, needed in (
        ("judged child labels", env.training.label_source == "judge"
         and ("rubric_generation" in stages or method.execution_credit == "rao")),
        ("external rubrics", method.rubric_writer == "external"),
        ("an external scorer", method.rubric_scorer == "external"),
    ) if needed]
    if needs and cfg.judge is None:
        raise ValueError(f"{where} on environment.name={env.name!r} needs an external judge for "
                         f"{', '.join(needs)}; set judge.base_url and judge.model")


def _check_environment(cfg: TrainConfig) -> None:
    e = cfg.environment
    env = get_env(e.name)
    if e.tasks_file is None and e.split not in env.splits:
        raise ValueError(f"environment.split={e.split!r}: {e.name} has splits {list(env.splits)}")
    if e.tasks_file is not None and not e.tasks_file.is_file():
        raise ValueError(f"environment.tasks_file={str(e.tasks_file)!r}: no such file")
    if e.difficulty is not None and e.difficulty not in DIFFICULTIES:
        raise ValueError(f"environment.difficulty={e.difficulty!r}: use one of {list(DIFFICULTIES)} or null")
    if e.rules is not None and e.rules not in env.rules:
        known = f"profiles {list(env.rules)}" if env.rules else "no rules profiles"
        raise ValueError(f"environment.rules={e.rules!r}: {e.name} has {known}")
    if cfg.eval.every and cfg.eval.split not in env.splits:
        raise ValueError(f"eval.split={cfg.eval.split!r}: {e.name} has splits {list(env.splits)}")
    if cfg.sft.val_split is not None and cfg.sft.val_split not in env.splits:
        raise ValueError(f"sft.val_split={cfg.sft.val_split!r}: {e.name} has splits {list(env.splits)}")
    if cfg.sft.split is not None and cfg.sft.split not in env.splits:
        raise ValueError(f"sft.split={cfg.sft.split!r}: {e.name} has splits {list(env.splits)}")
    if cfg.sft.difficulty is not None and cfg.sft.difficulty not in DIFFICULTIES:
        raise ValueError(f"sft.difficulty={cfg.sft.difficulty!r}: use one of {list(DIFFICULTIES)} or null")
    if cfg.sft.expert != "default" and cfg.sft.expert not in env.experts:
        raise ValueError(f"sft.expert={cfg.sft.expert!r}: {e.name} has experts {['default', *env.experts]}")
    p = cfg.pipeline
    if p.eval_split is not None and p.eval_split not in env.splits:
        raise ValueError(f"pipeline.eval_split={p.eval_split!r}: {e.name} has splits {list(env.splits)}")
    if p.eval_difficulty is not None and p.eval_difficulty not in DIFFICULTIES:
        raise ValueError(f"pipeline.eval_difficulty={p.eval_difficulty!r}: use one of {list(DIFFICULTIES)} or null")


def _with_suggestion(message: str, method: MethodConfig) -> str:
    known = _method_setting_names()
    for key in method.overrides:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            return f"unknown setting method.overrides.{key}" + (f" (did you mean {close[0]!r}?)" if close else "") + f"; {message}"
    return message


def _method_setting_names() -> list[str]:
    return [n for n in Method.__dataclass_fields__ if n not in _METHOD_KEYS_ELSEWHERE]


# ---------------------------------------------------------------- loading


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `3e-6` as a string; this loader reads it as a float, as YAML 1.2 does."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)$|^[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?$"
               r"|^[-+]?[0-9][0-9_]*\.[0-9_]*$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"),
    list("-+0123456789."),
)


def parse_yaml(text: str, source: str = "<string>") -> Any:
    """YAML text to Python values (exponent floats read as floats)."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None


ALIASES: dict[str, str] = {
    "max_steps": "steps.max_steps", "lr": "optimizer.lr", "env": "environment.name",
    "batch_tasks": "rollout.batch_tasks", "K": "rollout.trees_per_task", "judge_url": "judge.base_url",
}
"""Short override keys for often-changed settings (`seed`, `preset` and sections need none)."""


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    data = parse_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base`, mappings merged key by key (except `method.overrides`' values, replaced whole)."""
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """`"optimizer.lr=1e-5"` to `(["optimizer", "lr"], 1e-05)`; the value is read as YAML."""
    key, eq, raw = item.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ConfigError(f"override {item!r} is not key=value (e.g. optimizer.lr=1e-5)")
    key = ALIASES.get(key, key)
    return key.split("."), parse_yaml(raw, f"override {key}") if raw.strip() else None


def _set(data: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    if len(path) == 1:
        return {**data, path[0]: value}
    inner = data.get(path[0])
    if inner is None:
        inner = {}
    if not isinstance(inner, dict):
        raise ConfigError(f"override {'.'.join(path)}: {path[0]} is not a section")
    return {**data, path[0]: _set(inner, path[1:], value)}


def find_preset(name: str, near: Path | None = None) -> Path:
    """A preset file: `name` as a path, `<config dir>/../presets/<name>.yaml`, or the repository's."""
    if name.endswith((".yaml", ".yml")):
        return Path(name)
    candidates = ([near.parent.parent / "presets" / f"{name}.yaml"] if near else []) + [REPO_PRESET_DIR / f"{name}.yaml"]
    for path in candidates:
        if path.is_file():
            return path
    close = difflib.get_close_matches(name, PRESETS, n=1)
    raise ConfigError(f"preset={name!r}: not found (known: {', '.join(PRESETS)})" + (f"; did you mean {close[0]!r}?" if close else ""))


def preset_layer(name: str, env: str, near: Path | None = None) -> dict[str, Any]:
    """The preset's `all:` part with its `<env>:` part over it."""
    path = find_preset(name, near)
    data = _read_mapping(path)
    unknown = sorted(set(data) - {"all", *env_names()})
    if unknown:
        raise ConfigError(f"preset {path}: unknown part(s) {unknown}; use 'all' or an environment name")
    return _merge(data.get("all") or {}, data.get(env) or {})


def load_config(
    path: str | Path | None,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    host: bool = False,
) -> TrainConfig:
    """Read a config file, lay it over its preset (the argument's, else the file's `preset:`), apply
    `key=value` overrides, and validate; `host=True` also runs `check_host`. `path=None` starts
    from the defaults."""
    path = Path(path) if path is not None else None
    data = _read_mapping(path) if path is not None else {}
    for item in overrides:
        keys, value = parse_override(item)
        data = _set(data, keys, value)
    if preset is not None:
        data["preset"] = preset
    name = data.get("preset")
    if name is not None:
        if not isinstance(name, str):
            raise ConfigError(f"preset: must be a name ({', '.join(PRESETS)}), got {name!r}")
        section = data.get("environment")
        env = section.get("name", EnvironmentConfig().name) if isinstance(section, dict) else EnvironmentConfig().name
        data = _merge(preset_layer(name, str(env), path), data)
        if name.endswith((".yaml", ".yml")):
            data["preset"] = None  # a preset file of one's own: its values are in the resolved config
    cfg = validate_config(data, source=str(path) if path else "config")
    if host:
        check_host(cfg)
    return cfg


def check_host(cfg: TrainConfig) -> None:
    """Refuse what this machine cannot run: `model.device: cuda` without a CUDA device, bf16 on a
    GPU without bf16. bf16 on a CPU is left to the learner: torch runs it everywhere (natively with
    AVX-512 BF16 or AMX, emulated and slower elsewhere), so it is slow at worst, never wrong."""
    import torch

    if cfg.model.device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("model.device='cuda': no CUDA device on this machine (use model.device=cpu or --preset cpu)")
        if cfg.model.dtype == "bf16" and not torch.cuda.is_bf16_supported():
            raise ConfigError("model.dtype='bf16': this GPU has no bf16 support (use model.dtype=fp32)")
        if cfg.model.fsdp_processes > torch.cuda.device_count():
            raise ConfigError(f"model.fsdp_processes={cfg.model.fsdp_processes}: this machine has "
                              f"{torch.cuda.device_count()} CUDA device(s), one per process is needed")


def validate_config(data: dict[str, Any], source: str = "config") -> TrainConfig:
    """A `TrainConfig` from plain data; `ConfigError` naming every bad key and value."""
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: " + "; ".join(_explain(err) for err in exc.errors())) from None


def _explain(err: Any) -> str:
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc) or "<top>"
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(loc[-1], _field_names(loc[:-1]), n=1)
        return f"unknown key {key!r}" + (f" (did you mean {'.'.join([*loc[:-1], close[0]])!r}?)" if close else "")
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "value_error" and (not loc or isinstance(err["input"], dict)):
        return msg if not loc else f"{key}: {msg}"  # a combination check: its message names the keys
    return f"{key}: {msg} (got {err['input']!r})"


def _field_names(loc: list[str]) -> list[str]:
    model: Any = TrainConfig
    for part in loc:
        info = getattr(model, "model_fields", {}).get(part)
        if info is None:
            return []
        model = info.annotation
        if getattr(model, "__args__", None):  # `JudgeConfig | None`
            model = next((a for a in model.__args__ if isinstance(a, type) and issubclass(a, BaseModel)), model)
    return list(getattr(model, "model_fields", {}))


# ---------------------------------------------------------------- output


def dump_config(cfg: TrainConfig) -> str:
    """The resolved config as YAML; `load_config` of it gives `cfg` back."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values; an empty mapping has no keys (so `{}` and absent compare equal)."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def config_hash(cfg: TrainConfig) -> str:
    """sha256 of the resolved config's canonical JSON (sorted keys): equal configs, equal hashes."""
    text = json.dumps(cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def config_diff(a: TrainConfig, b: TrainConfig) -> list[str]:
    """The keys whose values differ, as `key: a -> b` lines (empty when the configs are equal)."""
    fa, fb = _flatten(a.model_dump(mode="json")), _flatten(b.model_dump(mode="json"))
    missing = object()
    return [f"{key}: {fa.get(key, missing)!r} -> {fb.get(key, missing)!r}".replace(repr(missing), "(absent)")
            for key in sorted(set(fa) | set(fb)) if fa.get(key, missing) != fb.get(key, missing)]


def first_cycle(schedule: StageSchedule) -> list[tuple[int, int, str]]:
    """`(first version, last version, stage)` of each entry of the schedule's first cycle."""
    out, start = [], 0
    for stage, length in schedule.entries:
        out.append((start, start + length - 1, stage))
        start += length
    return out


def describe(cfg: TrainConfig) -> str:
    """What `sera train --dry-run` prints: the resolved config and the first cycle of stages."""
    method = cfg.resolved_method()
    r = cfg.rollout
    lines = [dump_config(cfg).rstrip(), "", f"method {method.name}: schedule {method.schedule} "
             f"(repeats every {method.stage_schedule.total} updates)"]
    lines += [f"  versions {lo:>3}-{hi:<3} {stage}" if hi > lo else f"  version  {lo:>3}     {stage}"
              for lo, hi, stage in first_cycle(method.stage_schedule)]
    lines.append(f"per step: {r.batch_tasks} tasks x K={r.trees_per_task} = {r.batch_tasks * r.trees_per_task} "
                 f"root trees; {cfg.steps.max_steps} updates")
    return "\n".join(lines)
