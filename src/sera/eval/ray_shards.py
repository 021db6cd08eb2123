"""`sera eval --ray ADDRESS`: one evaluation split into shards that run as Ray tasks, then merged.

Shard i of n is exactly `sera eval ... --shard i/n` (`sera.eval.shards`: tasks at positions
p % n == i of the selection), run by `run_eval` inside a Ray task with `shard_cpus` CPUs (and
`shard_gpus` GPUs) on whichever node Ray places it; it writes `OUT/shards/<i>-of-<n>/`, so `OUT`
must be on a filesystem every node sees (a local cluster, NFS). A task whose worker dies is run
again by Ray (`retries` times); the shard's rerun resumes from its folder like any rerun of
`sera eval`: finished rollouts are kept, crashed ones run again, none is counted twice. When
every shard has ended, `merge_shards(OUT)` checks that they agree and cover every selected task
once, and writes the merged run into `OUT`, as `sera eval --merge` does.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import replace

from sera.eval.errors import EvalSetupError
from sera.eval.job import EvalJob
from sera.eval.merge import MergeResult
from sera.ray_cluster import connect, first_line


def run_shard(job: EvalJob) -> tuple[int, int, str]:
    """One shard, on a Ray worker: `run_eval(job)`; returns (rollouts, successes) of its summary
    and where it ran (host:pid)."""
    from sera.eval.run import run_eval

    result = run_eval(job, show_progress=False, log=lambda line: None)
    return (sum(s.overall.tasks for s in result.summaries), sum(s.overall.successes for s in result.summaries),
            f"{socket.gethostname()}:{os.getpid()}")


def run_eval_on_ray(job: EvalJob, address: str, shards: int, *, shard_cpus: float = 1.0, shard_gpus: float = 0.0,
                    retries: int = 2, connect_timeout_s: float = 10.0,
                    log: Callable[[str], None] = print) -> MergeResult:
    """Evaluate `job` as `shards` Ray tasks on the cluster at `address` (module docstring), then
    merge them into `job.out`. Bad combinations and an unreachable cluster are one-line errors
    (`EvalSetupError`, `RayUnavailable`) before any shard starts; a shard that fails on every try
    is an `EvalSetupError` naming it, and the shards that finished stay on disk for a rerun."""
    from sera.eval.run import merge_shards

    if job.shard is not None:
        raise EvalSetupError(f"--ray splits the evaluation into shards itself; drop --shard {job.shard}")
    if job.runs is not None:
        raise EvalSetupError("--ray with --runs is not supported: evaluate each seed with its own --seed and --out")
    if job.new_run:
        raise EvalSetupError("--ray with --new-run is not supported: give a fresh --out")
    if shards < 1:
        raise EvalSetupError(f"--ray-shards must be >= 1, got {shards}")
    owns = connect(address, local_cpus=shards * shard_cpus, timeout_s=connect_timeout_s)
    import ray

    try:
        task = ray.remote(run_shard).options(num_cpus=shard_cpus, num_gpus=shard_gpus, max_retries=retries,
                                             retry_exceptions=False)
        refs = {task.remote(replace(job, shard=f"{i}/{shards}")): i for i in range(shards)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = refs[done[0]]
            try:
                rollouts, successes, where = ray.get(done[0])
            except ray.exceptions.RayError as exc:
                cause = exc.as_instanceof_cause() if isinstance(exc, ray.exceptions.RayTaskError) else exc
                raise EvalSetupError(f"shard {i}/{shards} failed: {first_line(cause)}; finished shards are kept "
                                     f"under {job.out}/shards: rerun the same command to resume") from None
            log(f"shard {i}/{shards}: {successes}/{rollouts} solved (ran on {where})")
    finally:
        if owns:
            ray.shutdown()
    return merge_shards(job.out)


__all__ = ["run_eval_on_ray", "run_shard"]
