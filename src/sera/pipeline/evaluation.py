"""One evaluation of the main job: a model (the config's, or the weights of a `sera sft` /
`sera train` run directory) on the fixed held-out set, through the evaluation harness.

The folder is an ordinary `sera eval` run directory (`run.json`, `rollouts/<task>/<k>.json`,
`summary.json`), so `sera view` and `sera report` read it, and a rerun resumes it (finished
trees kept; trees the infrastructure broke run again). For a method whose children are credited
by a frozen rubric (SERA) and `pipeline.eval_rubrics`, every launched child also gets a rubric
written (greedy) and scored by the policy, through the execution stage's own launcher; agents
never see it, so success means the same as without it, and the report can give rubric validity.

The rollouts are sampled in this process or by a vLLM server started on the evaluated weights
(`pipeline.eval_backend`, `sera.pipeline.eval_serving`); the fingerprint names which.

Rollouts lost to the infrastructure are not model results: the phase fails (`PhaseFailed`,
`infra=True`) after the summary is saved, and rerunning the job retries exactly those.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from sera.envs.registry import get_env
from sera.eval.fingerprint import RunFingerprint
from sera.eval.harness import evaluate
from sera.eval.store import check_out_dir
from sera.eval.summary import EvalSummary
from sera.pipeline.eval_serving import (
    ServedEvaluation, VLLMServerError, chosen_backend, recorded_backend, start_served_evaluation,
)
from sera.pipeline.evalset import eval_runtime, eval_selection, eval_tasks
from sera.pipeline.record import PhaseFailed
from sera.train.config import TrainConfig
from sera.train.setup import load_model, make_collector, make_judge

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def rubric_launcher(cfg: TrainConfig, spec: Any, policy: Any) -> Any:
    """A factory of fresh execution-stage launchers (frozen rubric per child, greedy writing) when
    the method credits children by rubric and `pipeline.eval_rubrics`; None: plain children."""
    method = cfg.resolved_method()
    if not cfg.pipeline.eval_rubrics or method.execution_credit != "rubric":
        return None
    collector = make_collector(cfg, spec, policy, make_judge(cfg))
    collector = replace(collector, write_sampling=replace(collector.write_sampling, temperature=0.0))
    return lambda _seed: collector.launcher("execution")


def eval_concurrency(cfg: TrainConfig) -> int:
    """Rollouts an evaluation runs at once: `pipeline.eval_concurrency`, else `rollout.concurrency`."""
    return cfg.pipeline.eval_concurrency or max(1, cfg.rollout.concurrency)


def load_weights(cfg: TrainConfig, weights: Path | None) -> tuple[torch.nn.Module, Any, str, str | None]:
    """`(model, tokenizer, model description, weights identity)`: the config's base model, or the
    newest checkpoint of the run directory `weights` applied to it (described as
    `<base>+<folder name>`), in `model.dtype` on `model.device`."""
    from sera.policy.checkpoint_model import load_trained, resolve

    identity = None
    if weights is None:
        model, tokenizer = load_model(cfg)
        name = cfg.model.name
    else:
        source = resolve(str(weights))  # CheckpointModelError (one line) for a corrupt one
        if source is None or source.kind != "train":
            raise PhaseFailed(f"{weights} holds no checkpoint of sera sft or sera train")
        model, tokenizer = load_trained(source)
        # Named by the run folder's name, not its path, so a job moved or given by another path
        # still matches its evaluations' fingerprints; the weights' sha256 is in `identity`.
        name, identity = f"{cfg.model.name}+{weights.name}", source.identity
    return model.to(dtype=_DTYPES[cfg.model.dtype], device=cfg.model.device), tokenizer, name, identity


def open_policy(cfg: TrainConfig, out: Path, weights: Path | None,
                log: Callable[[str], None]) -> tuple[Any, str, str | None, str]:
    """`(sampler, policy name, weights identity, backend)` for `pipeline.eval_backend`: an
    in-process sampler (`hf:<model>`) or one talking to a vLLM server started on the weights
    (`vllm:<model>`; `sera.pipeline.eval_serving`). `auto` falls back to in process, said in
    `log`, when the server does not start; `vllm` fails the phase (infrastructure)."""
    from sera.policy.transformers_sampler import TransformersSampler

    model, tokenizer, name, identity = load_weights(cfg, weights)
    backend = chosen_backend(cfg, out)
    if backend == "vllm":
        try:
            served = start_served_evaluation(cfg, out, model, tokenizer, base=weights is None)
            return served, f"vllm:{name}", identity, backend
        except VLLMServerError as exc:
            if cfg.pipeline.eval_backend == "vllm":
                raise PhaseFailed(f"the evaluation's vLLM server did not start: {exc}", infra=True) from None
            if recorded_backend(out) == "vllm":
                raise PhaseFailed(f"the evaluation's vLLM server did not start ({exc}) and {out} holds rollouts "
                                  f"it sampled: rerun to retry, or remove {out} to redo the evaluation in process",
                                  infra=True) from None
            log(f"the vLLM server did not start ({exc}); evaluating in process (pipeline.eval_backend: auto)")
            backend = "inprocess"
    sampler = TransformersSampler(model, tokenizer, max_batch_size=eval_concurrency(cfg),
                                  prefix_cache_bytes=int(cfg.sampler.prefix_cache_gib * 1024**3))
    return sampler, f"hf:{name}", identity, backend


def run_evaluation(cfg: TrainConfig, out: Path, weights: Path | None = None, samples: int | None = None,
                   log: Callable[[str], None] = lambda _line: None) -> tuple[EvalSummary, dict[str, Any]]:
    """Evaluate (resuming what `out` holds) with `samples` rollouts per task (None:
    `pipeline.eval_samples`); returns the summary and `eval_detail`. `PhaseFailed` (infra) when
    rollouts were lost to the infrastructure."""
    spec = get_env(cfg.environment.name)
    tasks = eval_tasks(cfg, spec)
    runtime = eval_runtime(cfg, spec)
    check_out_dir(out)  # before loading a model: a bad folder is a one-line error
    out.mkdir(parents=True, exist_ok=True)
    policy, policy_name, identity, backend = open_policy(cfg, out, weights, log)
    sampler = policy.sampler if isinstance(policy, ServedEvaluation) else policy
    model_name = policy_name.split(":", 1)[1]
    source = eval_selection(cfg, spec).source
    fingerprint = RunFingerprint.of(env=spec.name, source=source, policy=policy_name, model=model_name,
                                    config=runtime, rules=cfg.environment.rules, seed=cfg.seed, model_weights=identity)

    async def run() -> EvalSummary:
        try:
            return await evaluate(
                tasks, sampler, spec.root_env, out, env_name=spec.name, split=source, policy_name=policy_name,
                config=runtime, concurrency=eval_concurrency(cfg), show_progress=False, seed=cfg.seed,
                samples=samples or cfg.pipeline.eval_samples,
                rules=cfg.environment.rules, fingerprint=fingerprint, launcher=rubric_launcher(cfg, spec, sampler),
            )
        finally:
            close = getattr(policy, "close", None)  # a sampler's workers, a served evaluation's server; a scripted policy has none
            if close is not None:
                await close()

    summary = asyncio.run(run())
    detail = {**eval_detail(summary, identity), "backend": backend}
    if summary.infra_failures:
        kinds = Counter(f.kind for f in summary.failed if f.infra)
        raise PhaseFailed(f"{summary.infra_failures} of {summary.overall.tasks} rollouts failed for infrastructure "
                          f"reasons ({', '.join(f'{k}: {n}' for k, n in sorted(kinds.items()))}); not model results: "
                          f"rerun the same command to retry them", infra=True, detail=detail)
    return summary, detail


def eval_detail(summary: EvalSummary, identity: str | None) -> dict[str, Any]:
    """What `pipeline.json` keeps of an evaluation (the report reads `summary.json` itself)."""
    return {"rollouts": summary.overall.tasks, "successes": summary.overall.successes,
            "infra_failures": summary.infra_failures, "errors": summary.overall.errors,
            "model_weights": identity, "harness_wall_s": round(summary.wall_time_s, 3)}
