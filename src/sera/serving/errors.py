"""The serving layer's own failures, one line each.

They are not `TrainError`s: serving sits below the trainer and never imports it. The trainer's
callers (the CLI) catch `ServingError` beside `TrainError`, so a run stopped by its sampler still
ends with one line.
"""

from __future__ import annotations


class ServingError(RuntimeError):
    """A sampler backend cannot start or go on (a server that does not start or answer, its base
    model folder not written); the message says why and where to look."""


class InfraFailure(ServingError):
    """The sampler failed in a way the run cannot recover from; the message names where to look."""


__all__ = ["InfraFailure", "ServingError"]
