"""Wire format between the host and a sandbox worker: tagged JSON values in length-prefixed frames.

Everything the worker sends is untrusted, so the format is data only: JSON (never pickle),
decoded into plain Python values (None, bool, int, float, str, bytes, list, tuple, dict, set,
frozenset). JSON alone would turn tuples into lists and lose non-string dict keys, so those are
tagged: ``{"$t": [...]}`` tuple, ``{"$s": [...]}`` set, ``{"$fs": [...]}`` frozenset,
``{"$b": "<base64>"}`` bytes, ``{"$d": [[key, value], ...]}`` dict. Every JSON object on the
wire is one of these tags, so a value can never be mistaken for a tag.

A frame is a 4-byte big-endian length followed by one UTF-8 JSON message (a dict with an
``op`` field). Value-carrying fields of a message hold tagged values.
"""

from __future__ import annotations

import base64
import json
from typing import Any

MAX_FRAME_BYTES = 8 * 1024 * 1024
"""Largest frame either side sends or accepts; a bigger one from the worker is a protocol violation."""
MAX_ERROR_CHARS = 4000
"""Longest error text sent across (tool errors, cell errors; the middle of a longer one is cut)."""
MAX_DEPTH = 100
"""Deepest nesting of containers a value may have (also stops reference cycles)."""
HEADER_BYTES = 4
"""Size of the frame length prefix."""

PLAIN_TYPES = "None, bool, int, float, str, bytes, list, tuple, dict, set, frozenset"
"""The types that may cross the boundary, spelled for error messages."""


class ProtocolError(ValueError):
    """A frame or value that does not follow the wire format."""


def encode_value(value: Any, _depth: int = 0) -> Any:
    """Turn a plain-data value into its tagged-JSON form; TypeError for anything else."""
    if _depth > MAX_DEPTH:
        raise TypeError(f"value is nested more than {MAX_DEPTH} levels deep (or contains itself)")
    kind = type(value)  # exact types: subclasses could run arbitrary code while encoded
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [encode_value(v, _depth + 1) for v in value]
    if kind is tuple:
        return {"$t": [encode_value(v, _depth + 1) for v in value]}
    if kind is dict:
        return {"$d": [[encode_value(k, _depth + 1), encode_value(v, _depth + 1)] for k, v in value.items()]}
    if kind is set:
        return {"$s": [encode_value(v, _depth + 1) for v in value]}
    if kind is frozenset:
        return {"$fs": [encode_value(v, _depth + 1) for v in value]}
    if kind is bytes:
        return {"$b": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"a value of type {kind.__name__} is not plain data (allowed: {PLAIN_TYPES})")


def decode_value(data: Any, _depth: int = 0) -> Any:
    """Inverse of `encode_value`; ProtocolError on anything malformed."""
    if _depth > MAX_DEPTH:
        raise ProtocolError("value nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode_value(v, _depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise ProtocolError(f"malformed value: {str(data)[:80]}")
    ((tag, body),) = data.items()
    try:
        if tag == "$b":
            if type(body) is not str:
                raise ProtocolError("bytes payload must be a base64 string")
            return base64.b64decode(body, validate=True)
        if type(body) is not list:
            raise ProtocolError(f"payload of {tag!r} must be a list")
        items = [decode_value(v, _depth + 1) for v in body]
        if tag == "$t":
            return tuple(items)
        if tag == "$s":
            return set(items)
        if tag == "$fs":
            return frozenset(items)
        if tag == "$d":
            if not all(type(p) is list and len(p) == 2 for p in items):
                raise ProtocolError("dict payload must be [key, value] pairs")
            return {k: v for k, v in items}
    except TypeError as exc:  # unhashable set members or dict keys
        raise ProtocolError(f"malformed {tag!r} value: {exc}") from None
    except ValueError as exc:  # bad base64
        raise ProtocolError(f"malformed {tag!r} value: {exc}") from None
    raise ProtocolError(f"unknown value tag {tag!r}")


def is_plain(value: Any) -> bool:
    """Whether `value` can cross the boundary."""
    try:
        encode_value(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def pack_frame(message: dict[str, Any]) -> bytes:
    """One message as a frame; ValueError if it is larger than `MAX_FRAME_BYTES`."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if len(body) > MAX_FRAME_BYTES:
        raise ValueError(f"message of {len(body):,} bytes is larger than the {MAX_FRAME_BYTES:,}-byte limit")
    return len(body).to_bytes(HEADER_BYTES, "big") + body


def frame_length(header: bytes) -> int:
    """The body length announced by a frame header; ProtocolError when it is out of bounds."""
    length = int.from_bytes(header, "big")
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length:,} bytes exceeds the {MAX_FRAME_BYTES:,}-byte limit")
    return length


def unpack_message(body: bytes) -> dict[str, Any]:
    """Parse one frame body into a message dict with a string ``op``; ProtocolError otherwise."""
    try:
        message = json.loads(body.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:  # ValueError covers UnicodeDecodeError and JSON errors
        raise ProtocolError(f"undecodable frame: {exc}") from None
    if type(message) is not dict or type(message.get("op")) is not str:
        raise ProtocolError("a message must be an object with a string 'op'")
    return message


def require(message: dict[str, Any], **fields: type | tuple[type, ...]) -> None:
    """Check that `message` has each field with the given JSON type; ProtocolError otherwise."""
    for name, kinds in fields.items():
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if name not in message or type(message[name]) not in kinds:
            raise ProtocolError(f"{message['op']!r} message needs field {name!r} of type {kinds}")
