"""The `sera` command line: evaluate, write data sets, play a task by hand."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from sera.envs.registry import EnvSpec, env_names, get_env
from sera.envs.selection import TaskSelection, select_tasks
from sera.runtime.config import RuntimeConfig
from sera.types import Task

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluate recursive LLM agents, write task sets, play tasks by hand.")
data_app = typer.Typer(no_args_is_help=True, help="Write published task sets to files.")
app.add_typer(data_app, name="data")
console = Console(stderr=True)


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}")
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
    out: Annotated[Path, typer.Option(help="Output folder: rollouts/*.json and summary.json.")],
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
    concurrency: Annotated[int, typer.Option(min=1, help="Rollouts run at once.")] = 8,
    max_calls: Annotated[int, typer.Option(min=1, help="Policy calls per agent.")] = 20,
    max_depth: Annotated[int, typer.Option(min=0, help="Maximum delegation depth.")] = 3,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Run a policy on a task set, save every rollout tree and print the results table."""
    from sera.eval.harness import evaluate
    from sera.eval.report import print_summary

    spec = _env(env)
    selection = TaskSelection(split, tasks_file, tuple(task_id or ()), difficulty, limit)
    tasks = _select(spec, selection)
    from sera.policy.factory import PolicyRequest, build_policy, fit_sampling

    try:
        agent_policy, policy_name = build_policy(
            PolicyRequest(kind=policy, model=model, base_url=base_url, device=device, dtype=dtype), spec.oracle, tasks
        )
    except (ValueError, OSError) as exc:
        _fail(str(exc))
        raise
    sampling = replace(
        spec.sampling,
        temperature=spec.sampling.temperature if temperature is None else temperature,
        max_tokens=spec.sampling.max_tokens if max_tokens is None else max_tokens,
    )
    sampling = fit_sampling(sampling, agent_policy)  # after the overrides, so they fit the context too
    summary = asyncio.run(
        evaluate(
            tasks, agent_policy, spec.root_env, out,
            env_name=spec.name, split=selection.source, policy_name=policy_name,
            config=RuntimeConfig(max_calls_per_agent=max_calls, max_depth=max_depth, sampling=sampling),
            concurrency=concurrency, show_progress=progress,
        )
    )
    print_summary(summary, Console())
    Console().print(f"saved {summary.overall.tasks} task results under {out}/ (summary.json, rollouts/)")


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
    count = write_tasks(load_split_specs(split), out)
    Console().print(f"wrote {count} {split} tasks to {out}")


@app.command("play")
def play_command(
    task_id: Annotated[str, typer.Option("--task-id", help="Task to play.")],
    env: Annotated[str, typer.Option(help="Environment.")] = "textcraft-synth",
    split: Annotated[str, typer.Option(help="Task split.")] = "val",
    out: Annotated[Path | None, typer.Option(help="Save the rollout tree here.")] = None,
) -> None:
    """Play a task yourself through the agent interface: type replies, end each with an empty line."""
    from sera.policy.human import HumanPolicy
    from sera.runtime.rollout import run_rollout

    spec = _env(env)
    (task,) = _select(spec, TaskSelection(split, task_ids=(task_id,)))
    tree = asyncio.run(run_rollout(task, HumanPolicy(protocol=spec.protocol), spec.root_env(task)))
    Console().print(f"\nsuccess: {tree.root_success}  agents: {len(tree.nodes)}")
    if out is not None:
        out.write_text(tree.to_json(indent=2))


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
