"""The worker's side of the boundary: its framed channel, tool stubs (RPC client), stdout capture.

Runs inside the sandbox worker process. Nothing here is reachable from a cell by name: the
stubs keep their state in `_`-prefixed slots, which the policy makes unreadable.
"""

from __future__ import annotations

import asyncio
import select
import signal
import socket
from typing import Any

from sera.sandbox import protocol
from sera.sandbox.safe_builtins import ToolError


class HostGone(Exception):
    """The host closed the channel: the worker should exit quietly."""


class Channel:
    """Framed messages over the worker's end of the socket pair (non-blocking socket)."""

    def __init__(self, fd: int) -> None:
        self._sock = socket.socket(fileno=fd)
        self._sock.setblocking(False)
        self._buffer = bytearray()
        self.sending = False
        """True while a frame is being written (a signal handler must not send then)."""

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, message: dict[str, Any]) -> None:
        """Send one message, waiting for room when the host is slow to read."""
        data = memoryview(protocol.pack_frame(message))
        self.sending = True
        try:
            while data:
                try:
                    sent = self._sock.send(data)
                except BlockingIOError:
                    select.select([], [self._sock], [])
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    raise HostGone from None
                data = data[sent:]
        finally:
            self.sending = False

    def poll(self) -> dict[str, Any] | None:
        """The next message if one has fully arrived, else None; never blocks."""
        while True:
            message = self._take()
            if message is not None:
                return message
            try:
                chunk = self._sock.recv(1 << 16)
            except BlockingIOError:
                return None
            except ConnectionResetError:
                raise HostGone from None
            if not chunk:
                raise HostGone
            self._buffer += chunk

    def recv(self) -> dict[str, Any]:
        """The next message, blocking until it arrives."""
        while (message := self.poll()) is None:
            select.select([self._sock], [], [])
        return message

    def _take(self) -> dict[str, Any] | None:
        if len(self._buffer) < protocol.HEADER_BYTES:
            return None
        end = protocol.HEADER_BYTES + protocol.frame_length(bytes(self._buffer[: protocol.HEADER_BYTES]))
        if len(self._buffer) < end:
            return None
        body = bytes(self._buffer[protocol.HEADER_BYTES : end])
        del self._buffer[:end]
        return protocol.unpack_message(body)


class OutputCapture:
    """The worker's stdout and stderr: forwards text to the host, up to a per-cell cap.

    Text beyond the cap is counted, not kept, so a print loop cannot grow memory. Text is sent
    in batches: at most `FLUSH_INTERVAL_S` after it was written (a SIGALRM timer, so output
    printed just before a hang still reaches the host before the worker is killed), or at once
    past `FLUSH_CHARS`.
    """

    FLUSH_INTERVAL_S = 0.02
    FLUSH_CHARS = 8192
    encoding = "utf-8"
    errors = "strict"

    def __init__(self, channel: Channel, limit: int) -> None:
        self._channel = channel
        self._limit = limit
        self._pending: list[str] = []
        self._pending_chars = 0
        self._accepted = 0
        self._busy = False  # inside write/flush: the alarm handler must not touch the buffer
        self._armed = False
        self.dropped = 0
        """Characters written this cell beyond the cap."""
        signal.signal(signal.SIGALRM, self._on_alarm)

    def start_cell(self) -> None:
        self._pending, self._pending_chars, self._accepted, self.dropped = [], 0, 0, 0

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        kept = text[: max(self._limit - self._accepted, 0)]
        first_cut = len(kept) < len(text) and not self.dropped
        self.dropped += len(text) - len(kept)
        if kept:
            self._busy = True
            self._accepted += len(kept)
            self._pending.append(kept)
            self._pending_chars += len(kept)
            self._busy = False
        if first_cut:
            self._flush(cut=True)  # tell the host at once: a timeout would lose the final count
        elif self._pending_chars >= self.FLUSH_CHARS:
            self.flush()
        elif kept and not self._armed:
            self._arm()
        return len(text)

    def flush(self) -> None:
        self._flush(cut=False)

    def _flush(self, cut: bool) -> None:
        self._busy = True
        try:
            if self._pending or cut:
                text = "".join(self._pending)
                self._pending, self._pending_chars = [], 0
                self._channel.send({"op": "out", "text": text, "cut": cut})
        finally:
            self._busy = False

    def _arm(self) -> None:
        self._armed = True
        signal.setitimer(signal.ITIMER_REAL, self.FLUSH_INTERVAL_S)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        self._armed = False
        if self._busy or self._channel.sending:
            self._arm()  # try again shortly rather than interleave frames
        elif self._pending:
            self.flush()

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


class ToolRpc:
    """Calls host tools: `call` blocks for sync tools, `call_async` awaits for async ones.

    Several async calls may be open at once (the host runs them concurrently); replies are
    matched by id, and replies to calls the cell gave up on are dropped.
    """

    def __init__(self, channel: Channel, output: OutputCapture) -> None:
        self._channel = channel
        self._output = output
        self._next_id = 0
        self._futures: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._blocking: set[int] = set()
        self._replies: dict[int, dict[str, Any]] = {}

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call_id = self._send_call(name, args, kwargs)
        self._blocking.add(call_id)
        try:
            while call_id not in self._replies:
                self.dispatch(self._channel.recv())
        finally:
            self._blocking.discard(call_id)
        return self._unwrap(self._replies.pop(call_id))

    async def call_async(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call_id = self._send_call(name, args, kwargs)
        future = asyncio.get_running_loop().create_future()
        self._futures[call_id] = future
        try:
            reply = await future
        except asyncio.CancelledError:
            if self._futures.pop(call_id, None) is not None:
                self._channel.send({"op": "cancel", "id": call_id})  # let the host stop the tool
            raise
        return self._unwrap(reply)

    def dispatch(self, message: dict[str, Any]) -> None:
        """Route one host message (a tool reply) to its waiting call."""
        if message["op"] != "result":
            raise protocol.ProtocolError(f"unexpected {message['op']!r} message during a cell")
        protocol.require(message, id=int)
        call_id = message["id"]
        if call_id in self._blocking:
            self._replies[call_id] = message
        elif (future := self._futures.pop(call_id, None)) is not None and not future.done():
            future.set_result(message)

    def on_readable(self) -> None:
        """Event-loop reader callback: dispatch every reply that has arrived."""
        while (message := self._channel.poll()) is not None:
            self.dispatch(message)

    def _send_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        try:
            payload = {"args": protocol.encode_value(list(args)), "kwargs": protocol.encode_value(kwargs)}
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"{name}(): cannot pass this argument to a tool: {exc}") from None
        self._next_id += 1
        self._output.flush()  # keep printed output in order with the tool's effects
        try:
            self._channel.send({"op": "call", "id": self._next_id, "name": name, **payload})
        except ValueError as exc:  # frame too large
            raise ValueError(f"{name}(): arguments too large: {exc}") from None
        return self._next_id

    @staticmethod
    def _unwrap(reply: dict[str, Any]) -> Any:
        if reply.get("error") is not None:
            raise ToolError(str(reply["error"]))
        return protocol.decode_value(reply.get("value"))


class SyncTool:
    """A host tool as seen by a cell: calling it runs the tool on the host and returns its result."""

    __slots__ = ("_name", "_rpc")

    def __init__(self, name: str, rpc: ToolRpc) -> None:
        self._name = name
        self._rpc = rpc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._rpc.call(self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<tool {self._name}>"


class AsyncTool(SyncTool):
    """An async host tool: calling it gives an awaitable; awaiting several runs them concurrently."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._rpc.call_async(self._name, args, kwargs)
