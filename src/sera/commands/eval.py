"""`sera eval`: options into an `EvalJob`, `sera.eval.run.run_eval`, the results table printed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from sera.commands.common import console, fail
from sera.envs.registry import env_names


def eval_command(
    out: Annotated[Path, typer.Option(help="Output folder: run.json, rollouts/<task>/<k>.json and summary.json.")],
    env: Annotated[str, typer.Option(help=f"Environment: {', '.join(env_names())}.")] = "textcraft-synth",
    split: Annotated[str, typer.Option(help="Task split.")] = "val",
    policy: Annotated[str, typer.Option(help="Policy: oracle, hf (in-process transformers) or openai (a server).")] = "oracle",
    model: Annotated[str | None, typer.Option(help="hf: model name or path (default: the embedded smollm2); openai: served model name.")] = None,
    base_url: Annotated[str | None, typer.Option(help="openai: server URL, e.g. http://127.0.0.1:8000/v1.")] = None,
    device: Annotated[str, typer.Option(help="hf: cpu or cuda.")] = "cpu",
    dtype: Annotated[str, typer.Option(help="hf: float32 or bfloat16.")] = "float32",
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (default: the environment's, 0).")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Completion tokens per call (default: the environment's).")] = None,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N tasks.")] = None,
    difficulty: Annotated[str | None, typer.Option(help="Only this difficulty band.")] = None,
    task_id: Annotated[list[str] | None, typer.Option("--task-id", help="Only these task ids (repeatable).")] = None,
    tasks_file: Annotated[Path | None, typer.Option(help="Read tasks from this file instead of the split.")] = None,
    rules: Annotated[str | None, typer.Option(help="textworld-sync: rules profile, sync or reference (default: each split's or file's own).")] = None,
    samples: Annotated[int | None, typer.Option(min=1, help="Rollouts per task, each with its own seed (pass@k) (default 1).")] = None,
    seed: Annotated[int, typer.Option(help="Base seed; rollout k of a task gets a seed derived from it, the task id and k.")] = 0,
    new_run: Annotated[bool, typer.Option("--new-run", help="If --out holds a run with other settings, write to OUT.2 (OUT.3, ...) instead of refusing.")] = False,
    protocol: Annotated[str | None, typer.Option(help="Evaluation protocol: paper (temperature 0, one trajectory, 20 calls, depth 3, the environment's context caps); explicit flags override it.")] = None,
    runs: Annotated[int | None, typer.Option(help="Repeat the evaluation N times with seeds --seed, --seed+1, ...: OUT/runs/r<i>/, mean ± std in OUT/summary.json.")] = None,
    shard: Annotated[str | None, typer.Option(help="i/n: evaluate only shard i (from 0) of n of the selected tasks, into OUT/shards/<i>-of-<n>/; combine with --merge.")] = None,
    merge: Annotated[bool, typer.Option("--merge", help="Merge the finished shards under --out (and --merge-from) into --out; runs nothing.")] = False,
    merge_from: Annotated[list[Path] | None, typer.Option("--merge-from", help="--merge: another --out folder holding shards (repeatable), e.g. from another machine.")] = None,
    ray: Annotated[str | None, typer.Option("--ray", help="Split the evaluation into --ray-shards shards run as Ray tasks on this cluster (local, auto, HOST:PORT or ray://HOST:PORT), then merge them into --out (which every node must see).")] = None,
    ray_shards: Annotated[int, typer.Option(min=1, help="--ray: number of shards (Ray tasks).")] = 2,
    ray_shard_cpus: Annotated[float, typer.Option(min=0.0, help="--ray: CPUs Ray reserves per shard.")] = 1.0,
    ray_shard_gpus: Annotated[float, typer.Option(min=0.0, help="--ray: GPUs Ray reserves per shard (hf on cuda).")] = 0.0,
    concurrency: Annotated[int, typer.Option(min=1, help="Rollouts run at once.")] = 8,
    max_calls: Annotated[int | None, typer.Option(min=1, help="Policy calls per agent (default 20).")] = None,
    max_depth: Annotated[int | None, typer.Option(min=0, help="Maximum delegation depth (default 3).")] = None,
    max_infra_failures: Annotated[float, typer.Option(min=0.0, max=1.0, help="Exit with status 1 when more than this share of rollouts failed for infrastructure reasons.")] = 0.1,
    connect_timeout: Annotated[float | None, typer.Option(help="openai: seconds to wait for a connection (default 10).")] = None,
    request_timeout: Annotated[float | None, typer.Option(help="openai: seconds to wait for one reply before retrying (default 180).")] = None,
    total_timeout: Annotated[float | None, typer.Option(help="openai: seconds one call may take, retries included, before it fails as a timeout (default 300).")] = None,
    max_retries: Annotated[int | None, typer.Option(help="openai: retries of a call after a 5xx, a timeout or a dropped connection (default 5).")] = None,
    unsafe_sandbox: Annotated[bool, typer.Option("--unsafe-sandbox", help="Run model code even where the sandbox cannot isolate it fully.")] = False,
    best_of: Annotated[int, typer.Option("--best-of", help="Best-of-N at test time: N candidate children per delegation, on copies of the world, the selected one committed (1: off; the paper uses 2).")] = 1,
    selector: Annotated[str, typer.Option(help="--best-of: what selects a candidate: self (the policy's own rubric and score), judge (an external model's), first or random (controls).")] = "self",
    max_forks: Annotated[int, typer.Option(min=0, help="--best-of: candidates one task may run, nested ones included; past it a launch runs as one child.")] = 32,
    judge_url: Annotated[str | None, typer.Option(help="--selector judge: the external model's OpenAI-compatible URL.")] = None,
    judge_model: Annotated[str | None, typer.Option(help="--selector judge: the external model's served name.")] = None,
    judge_api_key_env: Annotated[str, typer.Option(help="--selector judge: environment variable holding its API key.")] = "KIMI_API_KEY",
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Run a policy on a task set, save every rollout tree and print the results table.

    A rerun with the same --out and settings resumes: finished rollouts are kept, crashed ones and
    those that failed for infrastructure reasons (server down, 5xx, timeouts) are run again.
    SIGINT or SIGTERM stops it (exit status 130 or 143), the partial summary written.
    """
    from sera.reports.console import print_slots
    from sera.eval.run import EvalJob, EvalSetupError, Stopped, run_eval
    from sera.ray_cluster import RayUnavailable

    job = EvalJob(
        out=out, env=env, split=split, policy=policy, model=model, base_url=base_url, device=device, dtype=dtype,
        temperature=temperature, max_tokens=max_tokens, limit=limit, difficulty=difficulty, task_ids=tuple(task_id or ()),
        tasks_file=tasks_file, rules=rules, samples=samples, seed=seed, new_run=new_run, protocol=protocol, runs=runs,
        shard=shard, concurrency=concurrency, max_calls=max_calls, max_depth=max_depth,
        connect_timeout=connect_timeout, request_timeout=request_timeout, total_timeout=total_timeout,
        max_retries=max_retries, unsafe_sandbox=unsafe_sandbox, best_of=best_of, selector=selector,
        max_forks=max_forks, judge_url=judge_url, judge_model=judge_model, judge_api_key_env=judge_api_key_env,
    )
    try:
        if merge:
            _merge(out, merge_from or [])
            return
        if ray is not None:
            from sera.eval.ray_shards import run_eval_on_ray

            merged = run_eval_on_ray(job, ray, ray_shards, shard_cpus=ray_shard_cpus, shard_gpus=ray_shard_gpus,
                                     log=console.print)
            _print_merged(merged)
            _exit_if_over_infra_limit([s for _, s in merged.runs], max_infra_failures)
            return
        result = run_eval(job, show_progress=progress, log=console.print)
    except (EvalSetupError, RayUnavailable) as exc:
        fail(str(exc))
    except Stopped as stop:
        console.print(f"stopped by {stop.name}: finished rollouts are saved and each summary.json says what is done "
                      f"(partial); rerun the same command to resume", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(code=128 + stop.signum) from None
    print_slots(result.run_dir, result.slots, result.summaries, result.aggregate, Console())
    _exit_if_over_infra_limit(result.summaries, max_infra_failures)


def _exit_if_over_infra_limit(summaries: list[Any], share: float) -> None:
    """Exit with status 1 when more than `share` of some summary's rollouts failed for
    infrastructure reasons (`--max-infra-failures`)."""
    from sera.eval.run import first_over_infra_limit

    summary = first_over_infra_limit(summaries, share)
    if summary is not None:
        kinds = ", ".join(f"{k}: {n}" for k, n in summary.errors_by_kind.items())
        console.print(
            f"[red]error:[/red] {summary.infra_failures} of {summary.overall.tasks} rollouts "
            f"({100 * summary.infra_failure_rate:.1f}%) failed for infrastructure reasons ({kinds}), more than "
            f"--max-infra-failures {share:g}; rerun the same command to retry them",
            markup=True, highlight=False,
        )
        raise typer.Exit(code=1)


def _merge(out: Path, sources: list[Path]) -> None:
    """`sera eval --merge`: combine the shards under `out` and `sources` into `out` and print it."""
    from sera.eval.run import merge_shards

    _print_merged(merge_shards(out, sources))


def _print_merged(result: Any) -> None:
    """The merged run's summary (per run with --runs, then their aggregate)."""
    from sera.reports.console import print_runs_summary, print_summary

    for run_dir, summary in result.runs:
        if result.aggregate is None:
            print_summary(summary, Console())
        Console().print(f"merged {summary.overall.tasks} rollout results into {run_dir}/ (summary.json, rollouts/)")
    if result.aggregate is not None:
        print_runs_summary(result.aggregate, Console())
