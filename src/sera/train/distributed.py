"""Process groups for the sharded learner: init with a timeout, and a local launcher.

`init_process_group` joins (or, on rank 0, hosts) a TCP rendezvous at `host:port` and fails
with a one-line `TimeoutError` when the other ranks do not arrive in time, instead of hanging.
`run_local` spawns `world_size` processes on this machine, runs `fn(rank, world_size, *args)` in
each inside a process group, and returns their results in rank order; a rank that raises, or a
run that exceeds its deadline, is a one-line error in the parent with every process ended.

    results = run_local(worker, 2, args=(...,), backend="gloo")
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue as queue_module
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BACKENDS = ("gloo", "nccl")
"""Process-group backends the learner uses: gloo (CPU, and the tests) and nccl (CUDA)."""


@dataclass(frozen=True)
class GroupSettings:
    """Where and how the ranks of one local run meet."""

    world_size: int
    """Number of processes (ranks)."""
    port: int
    """TCP port of the rendezvous (rank 0 listens)."""
    backend: str = "gloo"
    """`gloo` or `nccl`."""
    timeout_s: float = 60.0
    """Longest wait for all ranks to join the rendezvous, in seconds."""
    collective_timeout_s: float = 1800.0
    """Longest wait in any one collective once the group has formed (torch's default; a rank
    writing a checkpoint keeps the others at a barrier that long at most)."""
    host: str = "127.0.0.1"
    """Address of rank 0's rendezvous: 127.0.0.1 for ranks on one machine; rank 0's node address
    for ranks on other nodes (Ray actors)."""


def check_backend(backend: str) -> None:
    """Raise a one-line error when `backend` is unknown or not built into this torch."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: use one of {list(BACKENDS)}")
    available = dist.is_available() and (dist.is_gloo_available() if backend == "gloo" else dist.is_nccl_available())
    if not available:
        raise RuntimeError(
            f"backend {backend!r} is not available in this torch build ({torch.__version__}); "
            + ("use backend='gloo' (CPU)" if backend == "nccl" else "install a torch with distributed support")
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it; another process could take it
    before rank 0 binds it, which then fails fast with 'address in use')."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def init_process_group(rank: int, settings: GroupSettings) -> None:
    """Join the default process group as `rank`; a one-line TimeoutError when the group does
    not form within `settings.timeout_s` (a rank missing, a wrong port)."""
    check_backend(settings.backend)
    if not 0 <= rank < settings.world_size:
        raise ValueError(f"rank {rank} is outside world size {settings.world_size}")
    timeout = datetime.timedelta(seconds=settings.timeout_s)
    collective = datetime.timedelta(seconds=settings.collective_timeout_s)
    try:
        # The store is made here (not via init_method) so that its own wait is bounded too.
        store = dist.TCPStore(
            settings.host, settings.port, settings.world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=True
        )
        dist.init_process_group(
            settings.backend, store=store, rank=rank, world_size=settings.world_size, timeout=collective
        )
        store.set_timeout(collective)  # later store waits (sub-groups, barriers) are not rendezvous
    except (RuntimeError, dist.DistError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TimeoutError(
            f"rank {rank}: the {settings.world_size}-process {settings.backend} group on {settings.host}:{settings.port} "
            f"did not form within {settings.timeout_s:g}s ({first[:200]})"
        ) from None


def _worker(
    rank: int,
    fn: Callable[..., Any],
    settings: GroupSettings,
    args: Sequence[Any],
    results: Any,
    threads: int,
) -> None:
    """One spawned rank: join the group, run `fn`, post `(rank, ok, value-or-message)`."""
    torch.set_num_threads(threads)  # ranks share the machine's cores: no oversubscription
    try:
        init_process_group(rank, settings)
        try:
            value = fn(rank, settings.world_size, *args)
        finally:
            dist.destroy_process_group()
        # Plain pickle copies tensor data into the bytes; torch's queue pickler would share it
        # through a file descriptor that dies with this process.
        results.put((rank, True, pickle.dumps(value)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as one line
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        results.put((rank, False, f"{type(exc).__name__}: {text}"))


def run_local(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    *,
    backend: str = "gloo",
    timeout_s: float = 300.0,
    group_timeout_s: float = 60.0,
    threads_per_rank: int | None = None,
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` in `world_size` spawned processes joined in one process
    group on 127.0.0.1, and return the values they return (picklable), in rank order.

    `group_timeout_s` bounds the rendezvous; `threads_per_rank` (torch threads of each rank)
    defaults to this machine's cores divided among the ranks. `fn` must be importable by name
    (a module-level function) and its value picklable. Raises RuntimeError naming the
    first rank that failed and its error, TimeoutError when the ranks are not all done within
    `timeout_s`; either way every spawned process is ended before it returns."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    check_backend(backend)
    settings = GroupSettings(world_size=world_size, port=free_port(), backend=backend, timeout_s=group_timeout_s)
    threads = threads_per_rank if threads_per_rank is not None else max(1, (os.cpu_count() or 1) // world_size)
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(target=_worker, args=(rank, fn, settings, tuple(args), results, threads), daemon=True)
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout_s
    values: dict[int, Any] = {}
    try:
        while len(values) < world_size:
            try:
                rank, ok, value = results.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except queue_module.Empty:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"{world_size}-process run did not finish within {timeout_s:g}s "
                        f"(ranks done: {sorted(values)})"
                    ) from None
                dead = [r for r, p in enumerate(processes) if p.exitcode not in (None, 0) and r not in values]
                if dead:
                    raise RuntimeError(f"rank {dead[0]} exited with code {processes[dead[0]].exitcode} before reporting")
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} failed: {value}")
            values[rank] = pickle.loads(value)
    finally:
        for process in processes:
            process.join(timeout=5 if len(values) == world_size else 0.1)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        results.close()
    return [values[rank] for rank in range(world_size)]


__all__ = ["BACKENDS", "GroupSettings", "check_backend", "free_port", "init_process_group", "run_local"]
