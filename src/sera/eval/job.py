"""`EvalJob`: everything one evaluation (`run_eval`, `sera eval`) is asked to do, as plain values.

The defaults are the command line's: `EvalJob(out=Path("runs/x"))` evaluates the oracle on
textcraft-synth's val split. Fields left None take the environment's or protocol's setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EvalJob:
    """One evaluation's settings (each field is the `sera eval` option of the same name)."""

    out: Path
    """Output folder: run.json, rollouts/<task>/<k>.json and summary.json."""
    env: str = "textcraft-synth"
    """Environment name (`sera.envs.registry.env_names()`)."""
    split: str = "val"
    """Task split (ignored when `tasks_file` is given)."""
    policy: str = "oracle"
    """oracle, hf (in-process transformers) or openai (a server)."""
    model: str | None = None
    """hf: model name or path, or a `sera train` / `sera sft` run directory; openai: served name."""
    base_url: str | None = None
    """openai: server URL, e.g. http://127.0.0.1:8000/v1."""
    device: str = "cpu"
    """hf: cpu or cuda."""
    dtype: str = "float32"
    """hf: float32 or bfloat16."""
    temperature: float | None = None
    """Sampling temperature (None: the environment's, 0)."""
    max_tokens: int | None = None
    """Completion tokens per call (None: the environment's)."""
    limit: int | None = None
    """Evaluate only the first N tasks."""
    difficulty: str | None = None
    """Only this difficulty band."""
    task_ids: tuple[str, ...] = ()
    """Only these task ids (empty: all)."""
    tasks_file: Path | None = None
    """Read tasks from this file instead of the split: your own tasks, in the environment's format."""
    rules: str | None = None
    """textworld-sync: rules profile, sync or reference (None: each split's or file's own)."""
    samples: int | None = None
    """Rollouts per task, each with its own seed (pass@k) (None: 1)."""
    seed: int = 0
    """Base seed; rollout k of a task gets a seed derived from it, the task id and k."""
    new_run: bool = False
    """If `out` holds a run with other settings, write to OUT.2 (OUT.3, ...) instead of refusing."""
    protocol: str | None = None
    """Evaluation protocol, e.g. paper; the explicit settings above override it."""
    runs: int | None = None
    """Repeat the evaluation N times with seeds seed, seed+1, ... into OUT/runs/r<i>/."""
    shard: str | None = None
    """i/n: evaluate only shard i (from 0) of n of the selected tasks, into OUT/shards/<i>-of-<n>/."""
    concurrency: int = 8
    """Rollouts run at once."""
    max_calls: int | None = None
    """Policy calls per agent (None: 20)."""
    max_depth: int | None = None
    """Maximum delegation depth (None: 3)."""
    connect_timeout: float | None = None
    """openai: seconds to wait for a connection (None: 10)."""
    request_timeout: float | None = None
    """openai: seconds to wait for one reply before retrying (None: 180)."""
    total_timeout: float | None = None
    """openai: seconds one call may take, retries included (None: 300)."""
    max_retries: int | None = None
    """openai: retries of a call after a 5xx, a timeout or a dropped connection (None: 5)."""
    unsafe_sandbox: bool = False
    """Run model code even where the sandbox cannot isolate it fully (a process-wide setting)."""
    best_of: int = 1
    """Best-of-N at test time: N candidate children per delegation (1: off; the paper uses 2)."""
    selector: str = "self"
    """best_of: self, judge, first or random."""
    max_forks: int = 32
    """best_of: candidates one task may run, nested ones included."""
    judge_url: str | None = None
    """selector judge: the external model's OpenAI-compatible URL."""
    judge_model: str | None = None
    """selector judge: the external model's served name."""
    judge_api_key_env: str = "KIMI_API_KEY"
    """selector judge: environment variable holding its API key."""

    def __post_init__(self) -> None:
        # Paths given as strings from Python work as they do from the command line.
        object.__setattr__(self, "out", Path(self.out))
        if self.tasks_file is not None:
            object.__setattr__(self, "tasks_file", Path(self.tasks_file))
        object.__setattr__(self, "task_ids", tuple(self.task_ids))
