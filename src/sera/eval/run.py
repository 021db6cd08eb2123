"""`run_eval`: one evaluation from an `EvalJob`, as `sera eval` runs it, callable from Python.

    from sera.eval.run import EvalJob, run_eval
    result = run_eval(EvalJob(out=Path("runs/mine"), policy="hf", model="runs/sft", tasks_file=Path("mine.jsonl")))

Bad input (an unknown environment or split, an unusable `out`, a checkpoint that cannot be
loaded, ...) raises `EvalSetupError` with one line naming the problem, before any model is
loaded where it can; SIGINT or SIGTERM raises `Stopped` after the partial summaries are written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from sera.envs.registry import EnvSpec, get_env
from sera.envs.selection import TaskSelection, select_tasks
from sera.eval import setup
from sera.eval.aggregate import RunsSummary
from sera.eval.errors import EvalSetupError
from sera.eval.job import EvalJob
from sera.eval.merge import MergeResult, merge
from sera.eval.runs import RunSlot
from sera.eval.stop import Stopped, closing, stoppable
from sera.eval.store import check_out_dir
from sera.eval.summary import EvalSummary
from sera.types import Task

__all__ = ["EvalJob", "EvalResult", "EvalSetupError", "Stopped", "first_over_infra_limit", "merge_shards", "run_eval"]


@dataclass(frozen=True)
class EvalResult:
    """What `run_eval` wrote."""

    run_dir: Path
    """The folder written: `job.out`, or OUT.2 (...) with `new_run` when `out` held another run."""
    slots: list[RunSlot]
    """One per run or shard evaluated, with its folder, seed and tasks."""
    summaries: list[EvalSummary]
    """One per slot, as in its summary.json."""
    aggregate: RunsSummary | None
    """With `runs` (and no shard): mean ± std over the runs, as in OUT/summary.json."""

    def over_infra_limit(self, share: float) -> EvalSummary | None:
        """`first_over_infra_limit` of this result's summaries."""
        return first_over_infra_limit(self.summaries, share)


def first_over_infra_limit(summaries: Iterable[EvalSummary], share: float) -> EvalSummary | None:
    """The first summary where more than `share` of the rollouts failed for infrastructure
    reasons (server down, 5xx, timeouts, sandbox refused), or None."""
    return next((s for s in summaries if s.infra_failure_rate > share), None)


def run_eval(job: EvalJob, *, show_progress: bool = False, log: Callable[[str], None] = print) -> EvalResult:
    """Run `job`: every rollout tree saved under its folder, summary.json written. A rerun with the
    same `out` and settings resumes: finished rollouts are kept, crashed ones and those that
    failed for infrastructure reasons are run again. `log` gets notes (one line each);
    `show_progress` draws a progress bar on stderr."""
    from sera.eval.fingerprint import RunFingerprint
    from sera.eval.harness import evaluate
    from sera.eval.progress import EvalProgress
    from sera.eval.protocol import ProtocolError, resolve_settings
    from sera.eval.runs import evaluate_slots, open_slots, plan_slots, write_runs_summary
    from sera.eval.store import new_run_dir
    from sera.policy.factory import PolicyRequest, build_policy, fit_sampling

    check_out_dir(job.out)  # before any work: a bad `out` is a one-line error, not a lost run
    shard = setup.shard_spec(job.shard, job.runs, job.new_run)
    spec = _env(job.env)
    selection = TaskSelection(job.split, job.tasks_file, tuple(job.task_ids), job.difficulty, job.limit, job.rules)
    tasks = _select(spec, selection)
    http = (setup.http_settings(job.connect_timeout, job.request_timeout, job.total_timeout, job.max_retries)
            if job.policy == "openai" else None)
    if job.unsafe_sandbox:
        from sera.sandbox import configure

        configure(allow_weak_isolation=True)
    try:
        settings = resolve_settings(job.protocol, spec.name, spec.sampling, temperature=job.temperature,
                                    max_tokens=job.max_tokens, max_calls=job.max_calls, max_depth=job.max_depth,
                                    samples=job.samples)
    except ProtocolError as exc:
        raise EvalSetupError(str(exc)) from None
    config, sampling, samples = settings.config, settings.config.sampling, settings.samples
    checkpoint = setup.checkpoint(job.model) if job.policy == "hf" and job.model else None
    best = setup.best_of(job.best_of, job.selector, job.max_forks, job.policy, job.judge_url, job.judge_model, log)
    # The settings asked for (before fitting them to the model's context, which follows from the
    # model), so a mismatch is refused before a model is loaded.
    fingerprint = RunFingerprint.of(
        env=spec.name, source=selection.source, policy=job.policy, model=job.model, config=config,
        tasks_file=job.tasks_file, rules=job.rules, seed=job.seed, best_of=best.record() if best else None,
        protocol=settings.protocol, context_tokens=settings.context_tokens,
        model_weights=checkpoint.identity if checkpoint else None,
    )
    run_dir = new_run_dir(job.out, fingerprint) if job.new_run else job.out
    if run_dir != job.out:
        log(f"{job.out} holds another run; writing to {run_dir}")
    slots = plan_slots(run_dir, tasks, fingerprint, samples=samples, runs=job.runs, shard=shard)
    with ExitStack() as held:
        open_slots(slots, held)  # every folder locked and checked before a model is loaded
        try:
            request = PolicyRequest(kind=job.policy, model=job.model, base_url=job.base_url, device=job.device,
                                    dtype=job.dtype, http=http, checkpoint=checkpoint)
            agent_policy, policy_name = build_policy(request, spec.oracle, tasks)
        except (ValueError, OSError) as exc:
            raise EvalSetupError(str(exc)) from None
        config = replace(config, sampling=fit_sampling(sampling, agent_policy))  # after the overrides
        judge = setup.judge(best, job.judge_url, job.judge_api_key_env)
        make_launcher = setup.best_of_launcher(best, agent_policy, judge)
        display = held.enter_context(EvalProgress()) if show_progress else None  # stderr: stdout is for results
        summaries = asyncio.run(stoppable(closing(judge, closing(agent_policy, evaluate_slots(slots, lambda slot: evaluate(
            slot.tasks, agent_policy, spec.root_env, slot.dir,
            env_name=spec.name, split=selection.source, policy_name=policy_name, config=config,
            concurrency=job.concurrency, progress=display, samples=samples, seed=slot.seed, rules=job.rules,
            fingerprint=slot.fingerprint, lock=False,
            launcher=make_launcher, best_of=best.record() if best else None,
        ))))))
        aggregate = None
        if job.runs is not None and shard is None:
            aggregate = write_runs_summary(run_dir, summaries, [s.dir for s in slots], [s.seed for s in slots])
    return EvalResult(run_dir, slots, summaries, aggregate)


def merge_shards(out: Path, sources: list[Path] | None = None) -> MergeResult:
    """Combine the finished shards under `out` and `sources` (other machines' `out` folders) into
    `out`; runs nothing."""
    check_out_dir(out)
    return merge(out, sources or [])


def _env(name: str) -> EnvSpec:
    try:
        return get_env(name)
    except KeyError as exc:
        raise EvalSetupError(str(exc.args[0])) from None


def _select(spec: EnvSpec, selection: TaskSelection) -> list[Task]:
    try:
        return select_tasks(spec, selection)
    except (ValueError, OSError) as exc:  # TaskSelectionError, a corrupt task file, a missing one
        raise EvalSetupError(str(exc)) from None
