"""`sera train` over an N-process FSDP2 learner (`model.fsdp_processes: N`).

The loop, the sampler and the journal stay in one process, which is rank 0 of the learner. It
starts N-1 **followers** (`LocalFollowers`: spawned processes on this machine; or, with
`model.fsdp_placement: ray`, `sera.train.ray_learner_ranks.RayFollowers`: Ray actors on any node),
forms the process group with them (`sera.train.distributed`), and every rank shards the same model
with `FsdpLearner`. Each learner call of the loop (`train_step`, `state_dict`, `load_state_dict`,
`sequence_logprobs`, `full_weights`, `save_for_sampler`) is sent to every follower (over its own
command queue, or as an actor call) and then run on rank 0: FSDP2's methods are collectives, so
every rank makes the same calls in the same order. Commands do not travel over collectives, so a
follower waits through a long sampling phase without a collective timeout running.

**Weights.** The run starts from rank 0's model (after `--init-from`): followers build the
architecture (`load_model`) and receive rank 0's weights by broadcast. An in-process sampler
cannot run a sharded module, so rank 0 keeps an unsharded `replica` for it, which each weight sync
refreshes from the gathered full weights (`sera.serving.weight_sync.CopiedModuleSync`). A vLLM
server needs no replica: each sync gathers the full weights, rank 0 writes them as the version's
folder (`save_for_sampler`), the server takes them (`sampler.vllm.full_sync`), and the canary
compares its log-probabilities with the sharded learner's (`sequence_logprobs`).

**Failures.** A follower that raises where every rank raises alike (a non-finite gradient norm,
a bad datum) answers with the error and keeps following, as rank 0 goes on. Any other error ends
the follower; rank 0 then raises `LearnerGroupError` with the follower's one-line reason, at the
latest when its next collective fails. Local followers ignore SIGINT and SIGTERM (Ctrl-C reaches
the whole process group; Ray actors never get it): rank 0 decides when to stop, checkpoints through
them, then closes them.
"""

from __future__ import annotations

import copy
import os
import queue as queue_module
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from sera.eval.failures import one_line
from sera.train.datums import Datum
from sera.train.distributed import GroupSettings, check_backend, free_port, init_process_group
from sera.train.follower import ALIKE_ERRORS, CLOSE, Call, Follower, Followers, LearnerGroupError
from sera.train.fsdp_learner import FsdpLearner
from sera.train.learner import LearnerConfig, StepStats

REPLY_TIMEOUT_S = 1800.0
"""Longest wait for a follower's answer to a call, the process group's collective timeout."""


def _follow(rank: int, settings: GroupSettings, build: Callable[[], tuple[nn.Module, Any]], config: LearnerConfig,
            calls: Any, replies: Any, threads: int) -> None:
    """A local follower process's life: a `Follower` that runs every call rank 0 puts on `calls`
    until it says close. Replies are (rank, ok, one-line error)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(threads)  # the ranks share this machine's cores
    try:
        follower = Follower(rank, settings, build, config)
        replies.put((rank, True, ""))
        parent = mp.parent_process()
        while True:
            try:
                call = calls.get(timeout=1.0)
            except queue_module.Empty:
                if parent is not None and not parent.is_alive():
                    return  # rank 0 is gone: nothing left to follow
                continue
            if call == CLOSE:
                return
            replies.put((rank, True, follower.run(call)))
    except BaseException as exc:  # noqa: BLE001 - rank 0 reports it as one line
        replies.put((rank, False, f"{type(exc).__name__}: {one_line(str(exc))}"))
        raise SystemExit(1) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class LocalFollowers:
    """Followers as spawned processes on this machine, fed over queues."""

    def __init__(self, settings: GroupSettings, build: Callable[[], tuple[nn.Module, Any]], config: LearnerConfig) -> None:
        context = mp.get_context("spawn")
        processes = settings.world_size
        self._replies = context.Queue()
        self._calls = [context.Queue() for _ in range(1, processes)]
        threads = max(1, (os.cpu_count() or 1) // processes)
        self.processes = [
            context.Process(target=_follow, args=(rank, settings, build, config, self._calls[rank - 1],
                                                  self._replies, threads), daemon=True, name=f"sera-learner-rank{rank}")
            for rank in range(1, processes)
        ]
        for process in self.processes:
            process.start()

    def send(self, call: Call) -> None:
        for calls in self._calls:
            calls.put(call)

    def check_alive(self, doing: str) -> None:
        for rank, process in enumerate(self.processes, start=1):
            if process.exitcode is not None:
                raise LearnerGroupError(f"learner rank {rank} exited with code {process.exitcode} before {doing}"
                                        + self.reason())

    def reason(self) -> str:
        try:
            while True:
                rank, ok, text = self._replies.get_nowait()
                if not ok:
                    return f": rank {rank}: {text}"
        except (queue_module.Empty, OSError, ValueError):
            return ""

    def collect(self, doing: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        alike = ""
        for _ in self.processes:
            while True:
                try:
                    rank, ok, text = self._replies.get(timeout=1.0)
                    break
                except queue_module.Empty:
                    self.check_alive(doing)
                    if time.monotonic() > deadline:
                        raise LearnerGroupError(f"the learner's followers did not answer {doing} within {timeout_s:g}s")
            if not ok:
                raise LearnerGroupError(f"learner rank {rank} failed in {doing}: {text}")
            alike = alike or text
        return alike

    def end(self, graceful: bool) -> None:
        if graceful:
            for calls, process in zip(self._calls, self.processes):
                if process.is_alive():
                    calls.put(CLOSE)
        for process in self.processes:
            process.join(timeout=30 if graceful else 0.1)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)


class ShardedLearner:
    """Rank 0's handle on an N-process FSDP2 learner; the `Learner` seam the loop uses, plus
    `replica` (the unsharded module an in-process sampler runs) and `full_weights` (to refresh it)."""

    def __init__(self, model: nn.Module, tokenizer: Any, config: LearnerConfig, processes: int,
                 build: Callable[[], tuple[nn.Module, Any]], *, group_timeout_s: float = 120.0,
                 replica: bool = True, placement: Literal["local", "ray"] = "local", owns_ray: bool = False,
                 placement_timeout_s: float = 120.0) -> None:
        """Start `processes - 1` followers that build their model with `build` (a picklable
        callable), and shard `model` (rank 0's, whose weights every rank starts from). `replica`
        False keeps no unsharded copy (`self.replica` None): a vLLM server samples, from the
        weights `save_for_sampler` writes, and the copy would only cost a model's memory.
        `placement` `ray` runs the followers as actors of the Ray cluster this process is connected
        to (`sera.train.ray_learner_ranks`; one GPU each on CUDA), possibly on other nodes, all
        reserved at once within `placement_timeout_s`; with `owns_ray` (this run connected to it)
        `close` also shuts Ray down."""
        if processes < 2:
            raise ValueError(f"a sharded learner needs at least 2 processes, got {processes}")
        backend = "nccl" if torch.device(config.device).type == "cuda" else "gloo"
        check_backend(backend)
        self.world_size = processes
        host = "127.0.0.1"
        if placement == "ray":
            from sera.train.ray_learner_ranks import RayFollowers, rendezvous_host

            host = rendezvous_host()
        self.settings = GroupSettings(world_size=processes, port=free_port(), backend=backend, timeout_s=group_timeout_s,
                                      host=host)
        self.replica: nn.Module | None = None
        if replica:
            self.replica = copy.deepcopy(model).eval()  # before sharding turns `model`'s parameters into shards
            self.replica.requires_grad_(False)
        start_weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
        self._group: Followers = (RayFollowers(self.settings, build, config, owns_ray, placement_timeout_s)
                                  if placement == "ray"
                                  else LocalFollowers(self.settings, build, config))
        try:
            init_process_group(0, self.settings)
            self.learner = FsdpLearner(model, config, tokenizer=tokenizer)
            self.learner.broadcast_weights(start_weights)
            self._group.collect("start", group_timeout_s + 600.0)
        except BaseException as exc:
            reason = self._reason()
            self._end(graceful=False)
            if isinstance(exc, (RuntimeError, TimeoutError, dist.DistError)):
                first = one_line(str(exc)) or type(exc).__name__
                raise LearnerGroupError(f"the {processes}-process learner did not start: {first}{reason}") from None
            raise
        del start_weights
        self.config = config
        self.tokenizer = tokenizer

    # -- the command channel -----------------------------------------------------------------------

    def _reason(self) -> str:
        """A follower's known error (': rank R: <error>'), else ''."""
        return self._group.reason()

    def _run(self, method: str, args: tuple[Any, ...], follower_args: tuple[Any, ...] | None = None) -> Any:
        """Send `method` to the followers, run it here, and wait for their answers."""
        self._group.check_alive(method)
        self._group.send(Call(method, args if follower_args is None else follower_args))
        try:
            value = getattr(self.learner, method)(*args)
        except ALIKE_ERRORS:
            self._group.collect(method, REPLY_TIMEOUT_S)
            raise
        except (RuntimeError, dist.DistError) as exc:  # a collective broke: a follower is the usual cause
            self._group.check_alive(method)
            raise LearnerGroupError(f"the sharded learner's {method} failed: {one_line(str(exc))}"
                                    + self._reason()) from None
        self._group.collect(method, REPLY_TIMEOUT_S)
        return value

    # -- the Learner seam ------------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Optimizer steps taken."""
        return self.learner.steps

    def train_step(self, datums: Sequence[Datum], loss: str | None = None,
                   loss_options: Mapping[str, float] | None = None) -> StepStats:
        """One update over all ranks (each computes its share of `datums`); rank 0's stats."""
        return self._run("train_step", (list(datums), loss, loss_options))

    def sequence_logprobs(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> torch.Tensor:
        """Log-probabilities of `completion_ids` under the sharded weights (the canary's recompute)."""
        return self._run("sequence_logprobs", (list(prompt_ids), list(completion_ids)))

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The full weights, gathered to this process's CPU."""
        return self._run("full_weights", ())

    def state_dict(self) -> dict[str, Any]:
        """Full weights, optimizer state, scheduler and step count, gathered to this process."""
        return self._run("state_dict", ())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a `state_dict()` snapshot; the followers get only its small parts (weights and
        optimizer state reach them by broadcast)."""
        share = {**state, "weights": {}, "optimizer": {}}
        self._run("load_state_dict", (state,), (share,))

    def save_for_sampler(self, path: str | os.PathLike[str]) -> Path:
        """Rank 0 writes the full model into the folder `path` atomically."""
        return self._run("save_for_sampler", (str(path),))

    def close(self) -> None:
        """Tell the followers to leave, wait for them, and leave the group (idempotent)."""
        self._end(graceful=True)

    def _end(self, *, graceful: bool) -> None:
        self._group.end(graceful)
        if dist.is_initialized():
            dist.destroy_process_group()


__all__ = ["LearnerGroupError", "LocalFollowers", "ShardedLearner"]  # LearnerGroupError: from sera.train.follower
