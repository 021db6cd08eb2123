"""Small real run directories for the report tests, built once per session.

Evaluations are oracle runs through `sera.eval.harness.evaluate` on a few tasks; the second seed
of each environment fails chosen tasks on purpose (`FailOn`: the policy answers nonsense in the
rollouts with those seeds), so the mean ± std over seeds is not trivial. Training runs are a
`config.yaml` and a hand-written `metrics.jsonl` in the loop's format.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sera.envs.registry import get_env
from sera.eval.harness import evaluate
from sera.eval.seeds import sample_seed
from sera.policy.factory import PolicyRequest, build_policy
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message, Task


class FailOn:
    """The oracle, except in rollouts whose seed is in `seeds`, where every reply is nonsense."""

    def __init__(self, inner: Any, seeds: set[int]) -> None:
        self.inner, self.seeds = inner, seeds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        if sampling.seed in self.seeds:
            return Completion(text="no code here")
        return await self.inner(messages, sampling)


def run_eval(out: Path, env: str, split: str, tasks: list[Task], seed: int, fail: tuple[str, ...] = ()) -> None:
    """An oracle evaluation of `tasks` into `out`, failing the tasks with ids in `fail`."""
    spec = get_env(env)
    oracle, name = build_policy(PolicyRequest(kind="oracle"), spec.oracle, tasks)
    policy = FailOn(oracle, {sample_seed(seed, task_id, 0) for task_id in fail})
    asyncio.run(evaluate(tasks, policy, spec.root_env, out, env_name=env, split=split, policy_name=name,
                         seed=seed, show_progress=False, concurrency=4))


def first_of(tasks: list[Task], counts: dict[str, int]) -> list[Task]:
    """The first `counts[band]` tasks of each band, in split order."""
    chosen, left = [], dict(counts)
    for task in tasks:
        if left.get(task.difficulty or "", 0) > 0:
            chosen.append(task)
            left[task.difficulty or ""] -= 1
    return chosen


def write_train_run(out: Path, steps: list[dict[str, Any]], *, method: str = "sera", env: str = "textcraft-synth", seed: int = 7) -> Path:
    """A training directory: config.yaml (the keys the report reads) and metrics.jsonl."""
    out.mkdir(parents=True)
    config = {"preset": "tiny", "model": {"name": "tiny"}, "method": {"name": method, "overrides": {}},
              "environment": {"name": env, "split": "train"}, "seed": seed}
    (out / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (out / "metrics.jsonl").write_text("".join(json.dumps(s, sort_keys=True) + "\n" for s in steps), encoding="utf-8")
    return out


def step(n: int, stage: str, trained: bool, success: float, times: dict[str, float], loss: float | None = None, **extra: Any) -> dict[str, Any]:
    """One metrics line as `sera.train.loop.run_step` writes it (a subset of its keys)."""
    line = {"step": n, "policy_version": n, "stage": stage, "trained": trained, "root_success": success,
            "loss": loss if trained else None, "grad_norm": 0.5 if trained else None, "trees": 4,
            "skip_reason": None if trained else "0 trainable datums < steps.min_trainable_datums=1",
            "credit/trees": 4, **{f"time/{k}": v for k, v in times.items()}}
    line.update(extra)
    return line


TRAIN_STEPS = [
    step(0, "execution", True, 0.25, {"sampling": 1.0, "credit": 0.25, "update": 0.25, "checkpoint": 0.0, "step": 1.5}, loss=0.9,
         **{"calls/judge": 3, "tokens/judge/prompt": 300, "tokens/judge/completion": 30, "counters/judge_calls": 3}),
    step(1, "execution", False, 0.5, {"sampling": 2.0, "credit": 0.5, "update": 0.0, "checkpoint": 0.0, "step": 2.5},
         **{"calls/judge": 4, "tokens/judge/prompt": 400, "tokens/judge/completion": 40}),
    step(2, "delegation", True, 0.5, {"sampling": 0.5, "credit": 0.125, "update": 0.125, "checkpoint": 0.0, "step": 0.75}, loss=0.7),
    step(3, "rubric", True, 0.75, {"sampling": 0.125, "credit": 0.0625, "update": 0.0625, "checkpoint": 0.25}, loss=0.5,
         **{"calls/verifier": 16}),
]
"""Four steps over three stages; step 3 has no `time/step` (its stage total is its parts' sum)."""


@dataclass(frozen=True)
class Runs:
    """The session's run directories."""

    root: Path
    """Holds everything below."""
    tc: Path
    """TextCraft `--runs 2` layout: tc/runs/r0 (seed 0), tc/runs/r1 (seed 1), tc/summary.json."""
    tc_tasks: list[Task]
    """Its tasks: two easy, one medium; seed 1 fails the medium one."""
    tw: Path
    """TextWorld: tw/r0, tw/r1; tasks two easy, one medium, hard, extreme; seed 1 fails an easy one."""
    train: Path
    """A training run with counters in metrics.jsonl (`TRAIN_STEPS`)."""
    train_trees: Path
    """A training run whose counters are only in its trees."""


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("report-runs")
    tc_tasks = first_of(get_env("textcraft-synth").load_split("val"), {"easy": 2, "medium": 1})
    medium = next(t.id for t in tc_tasks if t.difficulty == "medium")
    run_eval(root / "tc/runs/r0", "textcraft-synth", "val", tc_tasks, seed=0)
    run_eval(root / "tc/runs/r1", "textcraft-synth", "val", tc_tasks, seed=1, fail=(medium,))
    # What `sera eval --runs` writes beside its runs: not a run itself, and not to be read as one.
    (root / "tc/summary.json").write_text(json.dumps({"runs": [{"dir": "runs/r0"}, {"dir": "runs/r1"}]}), encoding="utf-8")
    tw_tasks = first_of(get_env("textworld-sync").load_split("dev"), {"easy": 2, "medium": 1, "hard": 1, "extreme": 1})
    easy = next(t.id for t in tw_tasks if t.difficulty == "easy")
    run_eval(root / "tw/r0", "textworld-sync", "dev", tw_tasks, seed=0)
    run_eval(root / "tw/r1", "textworld-sync", "dev", tw_tasks, seed=1, fail=(easy,))
    train = write_train_run(root / "train/sera", TRAIN_STEPS)
    trees = write_train_run(root / "train/rao", [step(0, "execution", False, 0.0, {"sampling": 1.0, "step": 1.0})], method="rao")
    folder = trees / "rollouts/step_00000"
    folder.mkdir(parents=True)
    for i, source in enumerate(sorted((root / "tc/runs/r0/rollouts").glob("*/0.json"))[:2]):
        tree = json.loads(source.read_bytes())
        tree["counters"] = {**tree["counters"], "verifier_calls": 5, "judge_calls": 2 + i}
        (folder / f"t{i}.0.json").write_text(json.dumps(tree), encoding="utf-8")
    return Runs(root=root, tc=root / "tc", tc_tasks=tc_tasks, tw=root / "tw", train=train, train_trees=trees)


def copy_run(source: Path, target: Path) -> Path:
    """A copy of a run directory (to damage or edit)."""
    shutil.copytree(source, target)
    return target


def edit_json(path: Path, **changes: Any) -> None:
    """Set top-level keys of a JSON file."""
    data = json.loads(path.read_bytes())
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")
