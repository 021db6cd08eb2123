"""The `sera` command line: train, evaluate, write data sets, play a task by hand."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import replace
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console

from sera.envs.registry import EnvSpec, env_names, get_env
from sera.envs.selection import TaskSelection, select_tasks
from sera.types import Task

if TYPE_CHECKING:
    from sera.eval.shards import ShardSpec
    from sera.launchers.best_of_n import BestOf
    from sera.policy.checkpoint_model import CheckpointSource
    from sera.policy.openai_http import HttpSettings
    from sera.runtime.delegation import Launcher

T = TypeVar("T")

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train and evaluate recursive LLM agents, write task sets, play tasks by hand.")
data_app = typer.Typer(no_args_is_help=True, help="Write published task sets to files.")
app.add_typer(data_app, name="data")
console = Console(stderr=True)


def _fail(message: str) -> None:
    # One line whatever the width (soft_wrap), and the message printed as is: it may hold brackets.
    console.print("[red]error:[/red]", end=" ")
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def _env(name: str) -> EnvSpec:
    try:
        return get_env(name)
    except KeyError as exc:
        _fail(str(exc.args[0]))
        raise


def _select(spec: EnvSpec, selection: TaskSelection) -> list[Task]:
    try:
        return select_tasks(spec, selection)
    except (ValueError, OSError) as exc:  # TaskSelectionError, a corrupt task file, a missing one
        _fail(str(exc))
        raise


@app.command("eval")
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
    from contextlib import ExitStack

    from sera.eval.errors import EvalSetupError
    from sera.eval.fingerprint import RunFingerprint
    from sera.eval.harness import evaluate
    from sera.eval.progress import EvalProgress
    from sera.eval.protocol import ProtocolError, resolve_settings
    from sera.reports.console import print_slots
    from sera.eval.runs import evaluate_slots, open_slots, plan_slots, write_runs_summary
    from sera.eval.store import check_out_dir, new_run_dir
    from sera.policy.factory import PolicyRequest, build_policy, fit_sampling

    try:
        check_out_dir(out)  # before any work: a bad --out is a one-line error, not a lost run
    except EvalSetupError as exc:
        _fail(str(exc))
    if merge:
        _merge(out, merge_from or [])
        return
    shard_spec = _shard(shard, runs, new_run)
    spec = _env(env)
    selection = TaskSelection(split, tasks_file, tuple(task_id or ()), difficulty, limit, rules)
    tasks = _select(spec, selection)
    http = _http_settings(connect_timeout, request_timeout, total_timeout, max_retries) if policy == "openai" else None
    _sandbox(unsafe_sandbox)
    try:
        settings = resolve_settings(protocol, spec.name, spec.sampling, temperature=temperature, max_tokens=max_tokens,
                                    max_calls=max_calls, max_depth=max_depth, samples=samples)
    except ProtocolError as exc:
        _fail(str(exc))
        raise
    config, sampling, samples = settings.config, settings.config.sampling, settings.samples
    checkpoint = _checkpoint(model) if policy == "hf" and model else None
    best = _best_of(best_of, selector, max_forks, policy, judge_url, judge_model)
    # The settings asked for (before fitting them to the model's context, which follows from the
    # model), so a mismatch is refused before a model is loaded.
    fingerprint = RunFingerprint.of(
        env=spec.name, source=selection.source, policy=policy, model=model, config=config,
        tasks_file=tasks_file, rules=rules, seed=seed, best_of=best.record() if best else None,
        protocol=settings.protocol, context_tokens=settings.context_tokens,
        model_weights=checkpoint.identity if checkpoint else None,
    )
    run_dir = new_run_dir(out, fingerprint) if new_run else out
    if run_dir != out:
        console.print(f"{out} holds another run; writing to {run_dir}")
    try:
        slots = plan_slots(run_dir, tasks, fingerprint, samples=samples, runs=runs, shard=shard_spec)
        with ExitStack() as held:
            open_slots(slots, held)  # every folder locked and checked before a model is loaded
            try:
                agent_policy, policy_name = build_policy(
                    PolicyRequest(kind=policy, model=model, base_url=base_url, device=device, dtype=dtype, http=http,
                                  checkpoint=checkpoint),
                    spec.oracle, tasks,
                )
            except (ValueError, OSError) as exc:
                _fail(str(exc))
                raise
            config = replace(config, sampling=fit_sampling(sampling, agent_policy))  # after the overrides
            judge = _judge(best, judge_url, judge_api_key_env)
            make_launcher = _best_of_launcher(best, agent_policy, judge)
            display = held.enter_context(EvalProgress()) if progress else None  # stderr: stdout is for results
            try:
                summaries = asyncio.run(_stoppable(_closing(judge, _closing(agent_policy, evaluate_slots(slots, lambda slot: evaluate(
                    slot.tasks, agent_policy, spec.root_env, slot.dir,
                    env_name=spec.name, split=selection.source, policy_name=policy_name, config=config,
                    concurrency=concurrency, progress=display, samples=samples, seed=slot.seed, rules=rules,
                    fingerprint=slot.fingerprint, lock=False,
                    launcher=make_launcher, best_of=best.record() if best else None,
                ))))))
            except Stopped as stop:
                if display is not None:
                    display.close()
                console.print(f"stopped by {stop.name}: finished rollouts are saved and each summary.json says what is done "
                              f"(partial); rerun the same command to resume", markup=False, highlight=False, soft_wrap=True)
                raise typer.Exit(code=128 + stop.signum) from None
            aggregate = None
            if runs is not None and shard_spec is None:
                aggregate = write_runs_summary(run_dir, summaries, [s.dir for s in slots], [s.seed for s in slots])
    except EvalSetupError as exc:
        _fail(str(exc))
        raise
    print_slots(run_dir, slots, summaries, aggregate, Console())
    for summary in summaries:
        if summary.infra_failure_rate > max_infra_failures:
            kinds = ", ".join(f"{k}: {n}" for k, n in summary.errors_by_kind.items())
            console.print(
                f"[red]error:[/red] {summary.infra_failures} of {summary.overall.tasks} rollouts "
                f"({100 * summary.infra_failure_rate:.1f}%) failed for infrastructure reasons ({kinds}), more than "
                f"--max-infra-failures {max_infra_failures:g}; rerun the same command to retry them",
                markup=True, highlight=False,
            )
            raise typer.Exit(code=1)


def _shard(text: str | None, runs: int | None, new_run: bool) -> ShardSpec | None:
    """`--shard i/n` parsed, `--runs` checked; bad input is a one-line error."""
    from sera.eval.shards import ShardError, ShardSpec

    if runs is not None and runs < 1:
        _fail(f"--runs {runs}: give at least one run (--runs 3 repeats the evaluation with three seeds)")
    if new_run and (runs is not None or text is not None):
        _fail("--new-run applies to a single run; give --runs or --shard another --out instead")
    if text is None:
        return None
    try:
        return ShardSpec.parse(text)
    except ShardError as exc:
        _fail(str(exc))
        raise


def _checkpoint(model: str) -> CheckpointSource | None:
    """`--model` as trained weights (a `sera train` checkpoint, an adapter), validated; None for
    a plain model; a one-line error for a checkpoint that cannot be used."""
    from sera.policy.checkpoint_model import CheckpointModelError, resolve

    try:
        return resolve(model)
    except CheckpointModelError as exc:
        _fail(str(exc))
        raise


def _merge(out: Path, sources: list[Path]) -> None:
    """`sera eval --merge`: combine the shards under `out` and `sources` into `out` and print it."""
    from sera.eval.errors import EvalSetupError
    from sera.eval.merge import merge
    from sera.reports.console import print_runs_summary, print_summary

    try:
        result = merge(out, sources)
    except EvalSetupError as exc:
        _fail(str(exc))
        raise
    for run_dir, summary in result.runs:
        if result.aggregate is None:
            print_summary(summary, Console())
        Console().print(f"merged {summary.overall.tasks} rollout results into {run_dir}/ (summary.json, rollouts/)")
    if result.aggregate is not None:
        print_runs_summary(result.aggregate, Console())


def _best_of(n: int, selector: str, max_forks: int, policy: str, judge_url: str | None, judge_model: str | None) -> BestOf | None:
    """`--best-of` and its options as settings (None for N = 1); bad input is a one-line error."""
    from sera.launchers.best_of_n import SELECTORS, BestOf

    if n < 1:
        _fail(f"--best-of must be at least 1 (1 evaluates without selection; the paper's best-of uses 2), got {n}")
    if selector not in SELECTORS:
        _fail(f"unknown --selector {selector!r}; known: {', '.join(SELECTORS)}")
    if n == 1:
        return None
    if selector == "self" and policy == "oracle":
        _fail("--best-of with --selector self needs a policy that writes and scores rubrics; the oracle is a "
              "script with no model: use --policy hf or openai, or --selector judge, first or random")
    if selector == "judge" and not (judge_url and judge_model):
        _fail("--selector judge needs the external model's endpoint: --judge-url URL and --judge-model NAME")
    if policy == "oracle":
        console.print(f"note: the oracle is deterministic, so its {n} candidates per delegation are identical")
    return BestOf(n=n, selector=selector, max_forks=max_forks, judge_model=judge_model if selector == "judge" else None)  # type: ignore[arg-type]


def _judge(best: BestOf | None, url: str | None, api_key_env: str) -> object:
    """The external model of `--selector judge` (greedy), or None."""
    if best is None or best.selector != "judge":
        return None
    import os

    from sera.judge import JudgeClient

    assert url is not None and best.judge_model is not None  # checked by _best_of
    return JudgeClient(url, best.judge_model, api_key=os.environ.get(api_key_env, "EMPTY"), temperature=0.0)


def _best_of_launcher(best: BestOf | None, policy: object, judge: object) -> Callable[[int], Launcher] | None:
    """A fresh best-of-N launcher per rollout (seeded by it), or None for plain children."""
    if best is None:
        return None
    from sera.launchers.best_of_n import SCORE_SAMPLING, WRITE_SAMPLING, best_of_launcher
    from sera.policy.factory import fit_sampling

    write, score = fit_sampling(WRITE_SAMPLING, policy), fit_sampling(SCORE_SAMPLING, policy)  # type: ignore[arg-type]
    return lambda seed: best_of_launcher(best, policy, judge=judge, seed=seed,  # type: ignore[arg-type]
                                         write_sampling=write, score_sampling=score)


def _http_settings(connect: float | None, request: float | None, total: float | None, retries: int | None) -> HttpSettings:
    """`HttpSettings` with the command line's timeouts and retries where given (the defaults find a
    hung server within `total_timeout_s`, 5 minutes, and report it as `timeout`); a bad value is a
    one-line error."""
    from sera.policy.openai_http import HttpSettings

    given = {"connect_timeout_s": connect, "request_timeout_s": request, "total_timeout_s": total, "max_retries": retries}
    try:
        return replace(HttpSettings(), **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        _fail(f"--connect-timeout, --request-timeout, --total-timeout, --max-retries: {exc}")
        raise


def _sandbox(unsafe: bool) -> None:
    """`--unsafe-sandbox`: let the sandbox run model code with weaker isolation where it must."""
    if unsafe:
        from sera.sandbox import configure

        configure(allow_weak_isolation=True)


class Stopped(Exception):
    """SIGINT or SIGTERM stopped the work (`_stoppable`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.name = signal.Signals(signum).name


async def _stoppable(work: Awaitable[T]) -> T:
    """Await `work`; SIGINT or SIGTERM cancels it (its `finally`s run: summaries written, policies
    closed) and raises `Stopped`. A second signal meets the default handler: it stops at once."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    received: list[int] = []
    signals = (signal.SIGINT, signal.SIGTERM)

    def stop(signum: int) -> None:
        received.append(signum)
        for sig in signals:
            loop.remove_signal_handler(sig)
        task.cancel()

    for sig in signals:
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise Stopped(received[0]) from None
        raise
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def _closing(policy: object, work: Awaitable[T]) -> T:
    """Await `work`, then release the policy's connections or workers (when it has any)."""
    try:
        return await work
    finally:
        close = getattr(policy, "close", None)
        if close is not None:
            await close()


@data_app.command("textcraft")
def data_textcraft(
    split: Annotated[str, typer.Option(help="train or val.")],
    out: Annotated[Path, typer.Option(help="Output JSONL file.")],
    generate: Annotated[bool, typer.Option(help="Generate with our generator instead of copying the package data.")] = True,
) -> None:
    """Write the TextCraft-Synth task set of a split in the published JSONL format."""
    from sera.envs.textcraft.tasks import generate_tasks, load_split, write_tasks

    if split not in ("train", "val"):
        _fail(f"unknown split {split!r}; known: train, val")
    _check_data_out(out)
    tasks = generate_tasks(split) if generate else load_split(split)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_tasks(tasks, out)
    Console().print(f"wrote {len(tasks)} {split} tasks to {out}")


@data_app.command("textworld")
def data_textworld(
    split: Annotated[str, typer.Option(help="train, dev or test.")],
    out: Annotated[Path, typer.Option(help="Output JSONL file (one task spec per line).")],
) -> None:
    """Generate the TextWorld-Sync task set of a split and write it as JSONL."""
    from sera.envs.textworld.tasks import SPLITS, load_split_specs, write_tasks

    if split not in SPLITS:
        _fail(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    _check_data_out(out)
    count = write_tasks(load_split_specs(split), out)
    Console().print(f"wrote {count} {split} tasks to {out}")


def _check_data_out(out: Path) -> None:
    """`sera data --out` names a file; a folder there is a one-line error, not a traceback."""
    if out.is_dir():
        _fail(f"--out {out} is a folder; give the JSONL file to write, e.g. {out / 'tasks.jsonl'}")


@app.command("play")
def play_command(
    task_id: Annotated[str, typer.Option("--task-id", help="Task to play.")],
    env: Annotated[str, typer.Option(help="Environment.")] = "textcraft-synth",
    split: Annotated[str, typer.Option(help="Task split.")] = "val",
    out: Annotated[Path | None, typer.Option(help="Save the rollout tree here.")] = None,
    rules: Annotated[str | None, typer.Option(help="textworld-sync: rules profile, sync or reference (default: the split's own).")] = None,
    unsafe_sandbox: Annotated[bool, typer.Option("--unsafe-sandbox", help="Run code even where the sandbox cannot isolate it fully.")] = False,
) -> None:
    """Play a task yourself through the agent interface: type replies, end each with an empty line."""
    from sera.eval.failures import classify
    from sera.eval.json_safe import make_json_safe
    from sera.policy.human import HumanPolicy
    from sera.runtime.rollout import run_rollout

    spec = _env(env)
    (task,) = _select(spec, TaskSelection(split, task_ids=(task_id,), rules=rules))
    _sandbox(unsafe_sandbox)
    tree = asyncio.run(run_rollout(task, HumanPolicy(protocol=spec.protocol), spec.root_env(task)))
    Console().print(f"\nsuccess: {tree.root_success}  agents: {len(tree.nodes)}")
    if out is not None:
        out.write_text(make_json_safe(tree)[0].to_json(indent=2), encoding="utf-8")
    problem = classify(tree)
    if problem is not None and problem.infra:  # e.g. the sandbox refused: say why, in one line
        console.print(f"[red]error:[/red] {problem.kind}: {problem.message}", highlight=False)
        raise typer.Exit(code=1)


@app.command("train", context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def train_command(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(help="Run config, e.g. configs/textcraft-synth/sera.yaml.")] = None,
    preset: Annotated[str | None, typer.Option(help="Scale preset beneath the config: paper, cpu or tiny.")] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory: config.yaml, metrics.jsonl, rollouts/, checkpoints/.")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue the run in this directory from its newest complete checkpoint.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the resolved config and the first cycle of stages; train nothing.")] = False,
    fallback: Annotated[bool, typer.Option("--fallback", help="With --resume: if the newest checkpoint is corrupt, use the newest older one that is complete.")] = False,
    init_from: Annotated[Path | None, typer.Option("--init-from", help="Start from the weights of the newest checkpoint of this sera sft (or sera train) run directory; fresh optimizer.")] = None,
) -> None:
    """Train a policy with RL (RAO / SERA): `sera train --config C --preset P --out DIR [key=value ...]`.

    Extra arguments are config overrides (`optimizer.lr=1e-5`, `max_steps=10`). `--resume DIR`
    continues a run; it refuses a changed config except `steps.max_steps`.
    """
    from sera.train.config import ConfigError, describe, load_config
    from sera.checkpoints.store import CheckpointError, CheckpointWriteError
    from sera.serving.errors import ServingError
    from sera.train.loop import CONFIG_FILE, TrainError, run_train
    from sera.train.sft import InitFromError

    overrides = list(ctx.args)
    bad = [a for a in overrides if "=" not in a]
    if bad:
        _fail(f"unexpected argument(s) {bad}; overrides are key=value (e.g. optimizer.lr=1e-5)")
    if resume is not None and out is not None and out != resume:
        _fail("give --resume DIR or --out DIR, not both")
    try:
        if resume is not None:
            cfg = None
            if config is not None or preset is not None or overrides:
                cfg = load_config(config or resume / CONFIG_FILE, preset=preset, overrides=overrides)
        else:
            if config is None:
                _fail("--config is required (or --resume DIR)")
            cfg = load_config(config, preset=preset, overrides=overrides, host=not dry_run)
    except ConfigError as exc:
        _fail(str(exc))
        raise
    if dry_run:
        if cfg is None:
            assert resume is not None
            cfg = load_config(resume / CONFIG_FILE)
        typer.echo(describe(cfg))
        return
    if resume is None and out is None:
        _fail("--out DIR is required")
    try:
        if init_from is not None and resume is not None:
            _fail("--init-from starts a new run; a resumed run keeps the weights of its checkpoint (drop --init-from)")
        result = run_train(cfg, resume or out, resume=resume is not None, allow_fallback=fallback, init_from=init_from,
                           log=lambda m: console.print(m, markup=False, highlight=False, soft_wrap=True))
    except InitFromError as exc:
        _fail(str(exc))
        raise
    except CheckpointError as exc:
        _fail(str(exc))
        raise
    except (TrainError, ServingError, CheckpointWriteError) as exc:  # ServingError: the sampler's (InfraFailure)
        _fail(str(exc))
        raise
    Console().print(f"trained {result.version} updates in {result.steps} steps under {resume or out}/"
                    + (f" (stopped by {result.stopped_by})" if result.stopped_by else ""), soft_wrap=True)
    if result.stopped_by:  # checkpointed, not finished: the shell's convention for a signal
        raise typer.Exit(code=128 + signal.Signals[result.stopped_by].value)


@app.command("report")
def report_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="Evaluation or training run directories, or folders holding them (searched below).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder: report.md, report.json, plots/*.png.")] = Path("report"),
) -> None:
    """Turn recorded runs into the paper's tables (success by difficulty, supervision, wall clock,
    best-of-N) and plots, as DIR/report.md with DIR/report.json.

    Inputs that cannot be used are named one per line and listed in the report; the rest still
    renders. Exit status 1 when any input was not (fully) used, 2 when no run was usable.
    """
    from sera.reports.writer import build_report

    report = build_report(run_dirs, out)
    for problem in report.problems:
        typer.echo(f"problem: {problem.line()}", err=True)  # one line each, never wrapped
    typer.echo(f"wrote {report.markdown} and {report.json.name} ({report.eval_runs} evaluation runs, "
               f"{report.train_runs} training runs, {len(report.plots)} plots, {len(report.problems)} problems)")
    if not report.eval_runs and not report.train_runs:
        _fail("no usable run found under " + ", ".join(str(p) for p in run_dirs))
    if report.problems:
        raise typer.Exit(code=1)


@app.command("view")
def view_command(
    path: Annotated[Path, typer.Argument(help="A rollout tree (.json) or a run directory (evaluation or training).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="HTML file to write (default: X.html beside X.json, or PATH/view.html).")] = None,
    max_mb: Annotated[float, typer.Option(min=1, help="Embed trees until the page holds this many MB; the rest are listed, not shown.")] = 256,
) -> None:
    """Write one self-contained HTML page of rollout trees: agents, steps, rubrics, fork groups.

    The page needs no network. Files of a run directory that are not readable trees are named one
    per line and listed in the page; the rest still renders (exit status 1 then).
    """
    from sera.view import ViewError, write_view

    try:
        result = write_view(path, output, max_mb=max_mb)
    except ViewError as exc:
        _fail(str(exc))
        raise
    for line in result.unreadable:
        typer.echo(f"unreadable: {line}", err=True)  # one line each, never wrapped
    skipped = f", {result.skipped} over the size limit not embedded" if result.skipped else ""
    typer.echo(f"wrote {result.path} ({result.trees} trees, {result.size / 2**20:.1f} MB{skipped})")
    if result.unreadable or result.skipped:
        raise typer.Exit(code=1)


@app.command("sft", context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def sft_command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Run directory: config.yaml, metrics.jsonl, demos/, checkpoints/.")],
    config: Annotated[Path | None, typer.Option(help="Run config, e.g. configs/textcraft-synth/sera.yaml (the one sera train --init-from will use); with --resume: optional.")] = None,
    preset: Annotated[str | None, typer.Option(help="Scale preset beneath the config: paper, cpu or tiny.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its newest checkpoint.")] = False,
) -> None:
    """Supervised warm start on the scripted expert's demonstrations: `sera sft --config C --preset P --out DIR KEY=VALUE ...`.

    Extra arguments are config overrides (`sft.train_tasks=16`, `sft.val_tasks=4`, `sft.epochs=2`,
    `sft.batch_datums=8`, `sft.lr=1e-4`, `sft.checkpoint_every=20`). Then: `sera train --init-from DIR ...`,
    or `sera eval --policy hf --model DIR`. SIGINT or SIGTERM checkpoints at the next batch and exits
    with 130 or 143; `sera sft --resume --out DIR` continues exactly where it stopped (also after a kill).
    """
    from sera.checkpoints.store import CheckpointError, CheckpointWriteError
    from sera.train.config import ConfigError, load_config
    from sera.envs.selection import TaskSelectionError
    from sera.train.sft import run_sft
    from sera.train.run_dir import TrainError

    overrides = list(ctx.args)
    bad = [a for a in overrides if "=" not in a]
    if bad:
        _fail(f"unexpected argument(s) {bad}; overrides are key=value (e.g. sft.epochs=3)")
    if config is None and not resume:
        _fail("--config is required (or --resume to continue the run in --out)")
    try:
        cfg = load_config(config, preset=preset, overrides=overrides, host=True) if config is not None else None
        result = run_sft(cfg, out, resume=resume,
                         log=lambda m: console.print(m, markup=False, highlight=False, soft_wrap=True))
    except (ConfigError, TrainError, CheckpointError, CheckpointWriteError, TaskSelectionError) as exc:
        _fail(str(exc))  # SftError is a TrainError
        raise
    if result.stopped_by:  # checkpointed, not finished: the shell's convention for a signal
        raise typer.Exit(code=128 + signal.Signals[result.stopped_by].value)
    Console().print(f"SFT: {result.steps} steps on {result.train_datums} datums; held-out NLL {result.nll_before:.4f} -> "
                    f"{result.nll_after:.4f} nats/token; checkpoint {result.checkpoint}", soft_wrap=True)


@app.command("pipeline", context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def pipeline_command(
    ctx: typer.Context,
    config: Annotated[Path, typer.Option(help="Run config, e.g. configs/main/textcraft-cpu.yaml.")],
    out: Annotated[Path, typer.Option(help="Job directory: pipeline.json, config.yaml, eval_base/, sft/, eval_sft/, rl/, eval_rl/, report.md.")],
    preset: Annotated[str | None, typer.Option(help="Scale preset beneath the config: paper, cpu or tiny.")] = None,
) -> None:
    """The main job: evaluate the base model, SFT, evaluate, RL for the time left, evaluate, report.

    Extra arguments are config overrides (`pipeline.budget_minutes=30`, `pipeline.eval_tasks=8`,
    `sft.train_tasks=4`, `steps.max_steps=4`). Rerun the same command to resume: finished phases
    are kept, RL continues from its checkpoint. Exit status 1 when a phase failed (recorded in
    pipeline.json), 2 for bad input, 130/143 when a signal stopped it.
    """
    import shlex

    from sera.pipeline.job import PipelineError, run_pipeline
    from sera.train.config import ConfigError, load_config

    overrides = list(ctx.args)
    bad = [a for a in overrides if "=" not in a]
    if bad:
        _fail(f"unexpected argument(s) {bad}; overrides are key=value (e.g. pipeline.budget_minutes=30)")
    command = shlex.join(["sera", "pipeline", "--config", str(config), "--out", str(out),
                          *(["--preset", preset] if preset else []), *overrides])
    try:
        cfg = load_config(config, preset=preset, overrides=overrides, host=True)
        result = run_pipeline(cfg, out, command=command, log=lambda m: typer.echo(m),
                              detail=lambda m: console.print(f"    {m}", markup=False, highlight=False, soft_wrap=True))
    except (ConfigError, PipelineError) as exc:
        _fail(str(exc))
        raise
    if result.report is not None:
        typer.echo(f"outputs under {out}/; report: {result.report}")
    if result.exit_code:
        raise typer.Exit(code=result.exit_code)


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
