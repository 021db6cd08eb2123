"""What a follower rank of the sharded learner runs, wherever it lives (`sera.train.sharded_learner`:
local processes; `sera.train.ray_learner_ranks`: Ray actors): the call it receives, the learner it
runs it on, the errors it reports, and the `Followers` seam through which rank 0 reaches them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from torch import nn

from sera.train.distributed import GroupSettings, init_process_group
from sera.train.fsdp_learner import FsdpLearner
from sera.train.learner import LearnerConfig

ALIKE_ERRORS = (FloatingPointError, ValueError)
"""Errors every rank raises alike for the same call (the checks run on the full arguments): a
follower reports them and keeps following."""


class LearnerGroupError(RuntimeError):
    """A follower of the sharded learner failed or died; one line naming the rank and why."""


@dataclass(frozen=True)
class Call:
    """One learner call sent to a follower."""

    method: str
    """The `FsdpLearner` method to run."""
    args: tuple[Any, ...] = ()
    """Its positional arguments (the follower's share of a state is sent in place of rank 0's)."""


CLOSE = Call("close")
"""Sent to a follower to leave the group and exit."""


class Follower:
    """A follower's learner, whatever process it lives in: joins the group, shards the model,
    receives rank 0's weights, then runs the calls rank 0 sends."""

    def __init__(self, rank: int, settings: GroupSettings, build: Callable[[], tuple[nn.Module, Any]],
                 config: LearnerConfig) -> None:
        init_process_group(rank, settings)
        model, tokenizer = build()
        self.learner = FsdpLearner(model, config, tokenizer=tokenizer)
        self.learner.broadcast_weights({})

    def run(self, call: Call) -> str:
        """Run `call`; the alike error it raised as one line, or ''. Its value stays here (rank 0's is the answer)."""
        try:
            getattr(self.learner, call.method)(*call.args)
            return ""
        except ALIKE_ERRORS as exc:
            return f"{type(exc).__name__}: {exc}"


class Followers(Protocol):
    """Ranks 1..N-1 as rank 0 reaches them: processes on this machine (`sera.train.sharded_learner.LocalFollowers`)
    or Ray actors (`sera.train.ray_learner_ranks.RayFollowers`)."""

    def send(self, call: Call) -> None:
        """Hand `call` to every follower (returns at once; they run it against rank 0's collectives)."""

    def collect(self, doing: str, timeout_s: float) -> str:
        """Wait for every follower's answer to the last call (or to the start); the alike error
        they report, or ''. `LearnerGroupError` when one failed, died, or did not answer in time."""

    def check_alive(self, doing: str) -> None:
        """`LearnerGroupError` when a follower is known to have died (with its reason)."""

    def reason(self) -> str:
        """A follower's error known now (': rank R: <error>'), else ''."""

    def end(self, graceful: bool) -> None:
        """Close the followers (asking them to leave first when `graceful`)."""


__all__ = ["ALIKE_ERRORS", "CLOSE", "Call", "Follower", "Followers", "LearnerGroupError"]
