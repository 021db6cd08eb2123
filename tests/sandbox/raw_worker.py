"""A test-only worker entry: the real isolation and limits, then *unchecked* Python.

It stands for code that got past the language policy: it runs with the real builtins and
with `os`, `socket`, `ctypes`, ... at hand. The fork server imports it as its preload (so the
modules are loaded before the root is emptied), forks it exactly like a real worker, and the
test sends it one script. The script's `result` dict comes back as JSON.
"""

from __future__ import annotations

import ctypes  # noqa: F401  (preloaded for the scripts)
import errno  # noqa: F401
import json
import os
import signal  # noqa: F401
import socket
import threading  # noqa: F401
from typing import Any

from sera.sandbox import hardening, protocol


def main(channel_fd: int, devnull_fd: int, proc_fd: int, isolation: Any) -> None:
    hardening.isolate_fds(channel_fd, devnull_fd, proc_fd)
    channel = socket.socket(fileno=hardening.CHANNEL_FD)
    request = _recv(channel)
    report = hardening.apply_limits(request["memory_mb"], 30, hardening.PROC_FD)
    report.update(network_namespace=isolation.network_namespace, ipc_namespace=isolation.ipc_namespace)
    namespace: dict[str, Any] = {"result": {}, "report": report, **request["args"]}
    try:
        exec(request["code"], namespace)  # noqa: S102 - deliberately unchecked
    except BaseException as exc:
        namespace["result"]["uncaught"] = f"{type(exc).__name__}: {exc}"
    channel.sendall(protocol.pack_frame({"op": "result", "result": namespace["result"], "report": report}))
    os._exit(0)


def _recv(channel: socket.socket) -> dict[str, Any]:
    header = channel.recv(protocol.HEADER_BYTES, socket.MSG_WAITALL)
    return json.loads(channel.recv(protocol.frame_length(header), socket.MSG_WAITALL))
