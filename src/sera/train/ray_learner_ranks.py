"""The sharded learner's followers as Ray actors (`model.fsdp_placement: ray`), so that FSDP2 ranks
can sit on other nodes of the cluster than rank 0 (the `sera train` process).

Each follower is one actor (`LearnerRank`; one GPU each when the learner runs on CUDA, one CPU
otherwise) holding the same `Follower` a local follower process holds. The actors are placed
through one placement group, all or none and packed onto as few nodes as the cluster allows (the
collectives' bandwidth): a cluster that cannot hold every rank is a one-line error after
`ray.placement_timeout_s`, naming what it lacks, instead of a group that waits for its missing
ranks at the rendezvous until the collective timeout. Rank 0 calls the actor's
`run` for every learner call and then makes the call itself, so the collectives meet as with
local followers; the actor answers with the alike error or ''. The process group's rendezvous is
rank 0's node address (`rendezvous_host`), not 127.0.0.1. Actors are not restarted by Ray: a
restarted rank could not rejoin a formed group, so a dead actor is a one-line `LearnerGroupError`
at the next call, as a dead local follower is (rank 0 asks every actor whether it is alive before
each call: a dead peer would otherwise hold it in a collective until the timeout). Ray never sends a
signal to an actor for the driver's Ctrl-C: rank 0 decides when to stop, checkpoints through the
actors, then kills them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from sera.eval.failures import one_line
from sera.train.distributed import GroupSettings
from sera.train.learner import LearnerConfig
from sera.train.follower import Call, Follower, LearnerGroupError


ALIVE_TIMEOUT_S = 30.0
"""Longest wait for an actor's answer that it is there."""
REASON_WAIT_S = 10.0
"""Longest wait, after rank 0 saw the group fail, for a rank's answer that says why."""


def rendezvous_host() -> str:
    """This node's address as the Ray cluster knows it (followers on other nodes reach rank 0 there)."""
    import ray

    return ray.util.get_node_ip_address()


class LearnerRank:
    """One follower rank in a Ray actor."""

    def __init__(self, threads: int) -> None:
        torch.set_num_threads(threads)
        self.follower: Follower | None = None

    def start(self, rank: int, settings: GroupSettings, build: Callable[[], tuple[nn.Module, Any]],
              config: LearnerConfig) -> str:
        """Join the group as `rank`, shard the model, and receive rank 0's weights."""
        try:
            self.follower = Follower(rank, settings, build, config)
        except BaseException:
            self.leave()  # closes this rank's connections, so rank 0's collective fails instead of waiting
            raise
        return ""

    def run(self, call: Call) -> str:
        """One learner call; the alike error as one line, or ''. Any other error leaves the group
        (rank 0's collective then fails at once; an actor that merely raised would keep it waiting)."""
        assert self.follower is not None, "start first"
        try:
            return self.follower.run(call)
        except BaseException:
            self.leave()
            raise

    def alive(self) -> bool:
        """Answers while the actor lives (rank 0 asks before each call)."""
        return True

    def leave(self) -> None:
        """Leave the process group (before the actor is killed)."""
        if dist.is_initialized():
            dist.destroy_process_group()


class RayFollowers:
    """Ranks 1..N-1 as `LearnerRank` actors of the connected Ray cluster (a `Followers`)."""

    def __init__(self, settings: GroupSettings, build: Callable[[], tuple[nn.Module, Any]], config: LearnerConfig,
                 owns_ray: bool = False, placement_timeout_s: float = 120.0) -> None:
        """Reserve every follower rank at once (at most `placement_timeout_s`), start one actor per
        rank and have each join the group (`collect('start')` waits); `owns_ray`: `end` shuts Ray
        down too (the run connected to it), also when this fails."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.owns_ray = owns_ray
        self.actors: list[Any] = []
        self._pending: list[Any] = []
        self._failure = ""
        cuda = torch.device(config.device).type == "cuda"
        bundle = {"CPU": 1.0, "GPU": 1.0} if cuda else {"CPU": 1.0}
        followers = settings.world_size - 1
        self.placement: Any = None
        try:
            self.placement = placement_group([bundle] * followers, strategy="PACK")
            if not self.placement.wait(timeout_seconds=placement_timeout_s):
                raise LearnerGroupError(_unplaced(followers, bundle, placement_timeout_s))
            actor = ray.remote(LearnerRank)
            for index in range(followers):
                strategy = PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=index)
                self.actors.append(actor.options(num_cpus=1, num_gpus=1 if cuda else 0, max_restarts=0, max_task_retries=0,
                                                 scheduling_strategy=strategy).remote(1))
            self._pending = [a.start.remote(rank, settings, build, config) for rank, a in enumerate(self.actors, start=1)]
        except BaseException:
            self.end(graceful=False)
            raise

    def send(self, call: Call) -> None:
        self._pending = [a.run.remote(call) for a in self.actors]

    def collect(self, doing: str, timeout_s: float) -> str:
        import ray
        from ray.exceptions import GetTimeoutError

        alike = ""
        pending, self._pending = self._pending, []
        for rank, ref in enumerate(pending, start=1):
            try:
                alike = alike or ray.get(ref, timeout=timeout_s)
            except GetTimeoutError:
                raise LearnerGroupError(f"the learner's followers did not answer {doing} within {timeout_s:g}s") from None
            except Exception as exc:  # noqa: BLE001 - an actor that died or a call that raised
                raise self._failed(rank, doing, exc) from None
        return alike

    def check_alive(self, doing: str) -> None:
        """Ask every actor whether it is there (a dead one would leave rank 0 in a collective)."""
        import ray

        for rank, actor in enumerate(self.actors, start=1):
            try:
                ray.get(actor.alive.remote(), timeout=ALIVE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - named in the error
                raise self._failed(rank, doing, exc) from None

    def _failed(self, rank: int, doing: str, exc: BaseException) -> LearnerGroupError:
        """The one-line error for rank `rank`'s failure `exc` in `doing` (also kept for `reason`)."""
        from ray.exceptions import RayActorError, RayTaskError

        if isinstance(exc, RayTaskError) and exc.cause is not None:
            exc = exc.cause
        if isinstance(exc, RayActorError):
            what = f"its actor died ({one_line(str(exc))[:200]})"
        else:
            what = f"{type(exc).__name__}: {one_line(str(exc))[:300]}"
        self._failure = f": rank {rank}: {what}"
        return LearnerGroupError(f"learner rank {rank} failed in {doing}: {what}")

    def reason(self) -> str:
        """The failure seen so far, else one a pending call already reports (e.g. a rank whose
        model failed to build while rank 0 waits at the rendezvous)."""
        import ray

        if not self._failure and self._pending:
            # Rank 0's collective can fail (the rank left the group) before Ray has the rank's answer.
            ready, _ = ray.wait(self._pending, num_returns=len(self._pending), timeout=REASON_WAIT_S)
            for rank, ref in enumerate(self._pending, start=1):
                if ref in ready:
                    try:
                        ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - recorded as the reason
                        self._failed(rank, "start", exc)
                        break
        return self._failure

    def end(self, graceful: bool) -> None:
        """Stop every actor (after it left the group, when `graceful`), free their reservation,
        and shut Ray down when the run connected to it."""
        import ray
        from ray.util.placement_group import remove_placement_group

        if graceful:
            try:
                ray.get([a.leave.remote() for a in self.actors], timeout=30)
            except Exception:  # noqa: BLE001 - they are killed next either way
                pass
        for a in self.actors:
            ray.kill(a, no_restart=True)
        try:
            if self.placement is not None:
                remove_placement_group(self.placement)
        finally:
            if self.owns_ray:
                ray.shutdown()


def _unplaced(followers: int, bundle: dict[str, float], timeout_s: float) -> str:
    """The one-line error for a cluster that did not reserve every follower rank in time."""
    import ray

    free, total = ray.available_resources(), ray.cluster_resources()
    each = " and ".join(f"{amount:g} {name}" for name, amount in bundle.items())
    has = ", ".join(f"{free.get(name, 0):g} of {total.get(name, 0):g} {name}" for name in bundle)
    return (f"the Ray cluster did not reserve the learner's {followers} follower rank(s) ({each} each) within "
            f"{timeout_s:g}s (ray.placement_timeout_s): it has {has} free")


__all__ = ["LearnerRank", "RayFollowers", "rendezvous_host"]
