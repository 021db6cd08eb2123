"""Joining a Ray cluster, for `sera train --ray` (rollout workers) and `sera eval --ray` (shards).

`address` is `local` (start a Ray instance on this machine, shut down by the caller), `auto`, a
`HOST:PORT` of a running cluster's head, or `ray://HOST:PORT` (Ray Client). An unreachable
`HOST:PORT` fails fast with a one-line `RayUnavailable` after a TCP check (`ray.init` alone would
retry for a minute); a process already connected to Ray keeps its connection.
"""

from __future__ import annotations

import os
import socket

from sera.eval.failures import one_line


class RayUnavailable(RuntimeError):
    """Ray is missing, or the cluster at the address cannot be reached; one line."""


def check_reachable(address: str, timeout_s: float) -> None:
    """A one-line `RayUnavailable` when `HOST:PORT` (or `ray://HOST:PORT`) does not accept a TCP
    connection within `timeout_s` (ray.init would retry for a minute before failing)."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return  # `auto` and other forms: ray.init reports them itself
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise RayUnavailable(f"ray.address={address!r}: cannot reach {host}:{port} within {timeout_s:g}s ({exc})") from None


def connect(address: str, *, local_cpus: float, timeout_s: float) -> bool:
    """Join (or start, for `local`, with at least `local_cpus` CPUs) the Ray cluster at `address`;
    True when this call started or joined it (so the caller shuts it down), False when this
    process was already connected."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable("Ray is not installed (pip install 'ray==2.52.0', or the project's `ray` extra)") from None
    if ray.is_initialized():
        return False
    if address != "local":
        check_reachable(address, timeout_s)
    try:
        if address == "local":
            ray.init(num_cpus=max(os.cpu_count() or 1, int(local_cpus)), include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayUnavailable(f"ray.address={address!r}: {first_line(exc)}") from None
    return True


def first_line(exc: BaseException) -> str:
    """The exception's message on one line, or its type's name when it has none."""
    return one_line(str(exc)) or type(exc).__name__


__all__ = ["RayUnavailable", "check_reachable", "connect", "first_line"]
