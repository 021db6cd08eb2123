"""Building a run's parts from its `TrainConfig`: the model, the learner, the judge, the agents'
budgets and sampling, the training and evaluation tasks, and the rollout collector."""

from __future__ import annotations

import os
from dataclasses import replace
from functools import partial
from typing import Any

import torch

from sera.envs.registry import EnvSpec
from sera.envs.selection import TaskSelection, select_tasks
from sera.launchers.rubric_calls import SCORE_SAMPLING, WRITE_SAMPLING
from sera.policy.model_registry import is_registered, load_registered
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import Policy
from sera.train.collect import Collector
from sera.train.config import TrainConfig
from sera.train.learner import LearnerConfig, LoraSettings, TorchLearner, load_causal_lm
from sera.train.sharded_learner import ShardedLearner
from sera.types import Task


def load_model(cfg: TrainConfig) -> tuple[torch.nn.Module, Any]:
    """A registered name (`sera.policy.model_registry`: the test kit's random `tiny`, seeded by
    the config seed), `smollm2` or a local path."""
    if is_registered(cfg.model.name):
        return load_registered(cfg.model.name, seed=cfg.seed)
    return load_causal_lm(cfg.model.name)


def learner_config(cfg: TrainConfig, tokenizer: Any, *, lr: float | None = None,
                   eps: float | None = None) -> LearnerConfig:
    """The learner's settings from the config (loss options per loss, LoRA, dtype, device); `lr`
    and `eps` replace `optimizer.lr` and `optimizer.eps` (SFT's own)."""
    loss = cfg.loss
    options = {"cispo": {"clip_low": loss.clip_low, "clip_high": loss.clip_high},
               "ppo_clip": {"eps_low": loss.ppo_eps_low, "eps_high": loss.ppo_eps_high}}.get(loss.name, {})
    if loss.negative_scale != 1.0:  # only when set: the paper's runs keep the losses' own defaults
        options = {**options, "negative_scale": loss.negative_scale}
    lora = LoraSettings(rank=cfg.model.lora_rank, alpha=cfg.model.lora_alpha) if cfg.model.finetune == "lora" else None
    o = cfg.optimizer
    return LearnerConfig(
        loss=loss.name, loss_options=options, lr=o.lr if lr is None else lr, betas=o.betas, eps=o.eps if eps is None else eps, weight_decay=o.weight_decay,
        max_grad_norm=o.grad_clip, dtype="bfloat16" if cfg.model.dtype == "bf16" else "float32",
        device=cfg.model.device, gradient_checkpointing=cfg.model.gradient_checkpointing, lora=lora,
        max_tokens_per_microbatch=cfg.model.microbatch_tokens,
        pad_id=tokenizer.pad_token_id or 0,
    )


def make_learner(cfg: TrainConfig, model: torch.nn.Module, tokenizer: Any, *, lr: float | None = None,
                 eps: float | None = None) -> TorchLearner:
    """The learner the config describes (`learner_config`) in this process."""
    return TorchLearner(model, learner_config(cfg, tokenizer, lr=lr, eps=eps), tokenizer=tokenizer)


def make_train_learner(cfg: TrainConfig, model: torch.nn.Module, tokenizer: Any) -> TorchLearner | ShardedLearner:
    """`sera train`'s learner: `make_learner`, or with `model.fsdp_processes: N > 1` an FSDP2
    learner over N processes whose followers load the same architecture (`load_model`) and start
    from `model`'s weights; it keeps an unsharded replica only for an in-process sampler (a vLLM
    server reads the saved full weights instead). With `model.fsdp_placement: ray` the followers
    are actors of the cluster of `ray.address`, which this joins first."""
    if cfg.model.fsdp_processes == 1:
        return make_learner(cfg, model, tokenizer)
    owns_ray = False
    if cfg.model.fsdp_placement == "ray":
        from sera.ray_cluster import connect

        assert cfg.ray.address is not None  # the config requires it
        # One CPU per follower rank beside the rollout workers (a local Ray gets them all).
        owns_ray = connect(cfg.ray.address, timeout_s=cfg.ray.connect_timeout_s,
                           local_cpus=cfg.ray.workers * cfg.ray.worker_cpus + cfg.model.fsdp_processes - 1)
    return ShardedLearner(model, tokenizer, learner_config(cfg, tokenizer), cfg.model.fsdp_processes,
                          partial(load_model, cfg), replica=cfg.sampler.backend == "inprocess",
                          placement=cfg.model.fsdp_placement, owns_ray=owns_ray,
                          placement_timeout_s=cfg.ray.placement_timeout_s)


def make_judge(cfg: TrainConfig) -> Any:
    """The external judge client, or None when the config has no judge."""
    if cfg.judge is None:
        return None
    from sera.judge.client import JudgeClient

    return JudgeClient(cfg.judge.base_url, cfg.judge.model, api_key=os.environ.get(cfg.judge.api_key_env, "EMPTY"),
                       max_concurrency=cfg.judge.max_concurrency)


def runtime_config(cfg: TrainConfig, spec: EnvSpec, *, temperature: float | None = None) -> RuntimeConfig:
    """Budgets and agent sampling of training rollouts (stop strings from the environment);
    `temperature` overrides the agents' (periodic evaluation)."""
    r = cfg.rollout
    sampling = replace(spec.sampling, temperature=r.agent_temperature if temperature is None else temperature,
                       max_tokens=r.max_tokens, max_prompt_tokens=r.max_prompt_tokens, logprobs=temperature is None,
                       repetition_stop=r.repetition_stop)
    return RuntimeConfig(max_calls_per_agent=r.max_calls_per_agent, max_depth=r.max_depth, sampling=sampling)


def make_collector(cfg: TrainConfig, spec: EnvSpec, policy: Policy, judge: Any) -> Collector:
    """The collector of training rollouts, with the config's rubric and scorer sampling."""
    r = cfg.rollout
    return Collector(
        policy, cfg.resolved_method(), spec, runtime_config(cfg, spec), judge,
        write_sampling=replace(WRITE_SAMPLING, temperature=r.rubric_temperature, max_tokens=r.rubric_max_tokens),
        score_sampling=replace(SCORE_SAMPLING, temperature=r.scorer_temperature, max_tokens=r.scorer_max_tokens),
        score_max_tokens_rt=r.scorer_max_tokens_rt,
    )


def training_tasks(cfg: TrainConfig, spec: EnvSpec) -> list[Task]:
    """The selected training tasks, in the split's order (the cursor permutes them)."""
    e = cfg.environment
    return select_tasks(spec, TaskSelection(split=e.split, tasks_file=e.tasks_file, difficulty=e.difficulty, rules=e.rules))


def eval_tasks(cfg: TrainConfig, spec: EnvSpec) -> list[Task]:
    """The held-out tasks of periodic evaluation (the first `eval.limit` of `eval.split`)."""
    e = cfg.environment
    return select_tasks(spec, TaskSelection(split=cfg.eval.split, limit=cfg.eval.limit, rules=e.rules))
