"""On-disk cache of external-model replies, keyed by the exact request.

The key is the sha256 of the canonical JSON of (operation, model, messages, temperature,
max_tokens, extra_body), as in the reference's Kimi client (sera-spec §4.6 item 6): any change
to the prompt or settings is a different entry. Each entry is one file written atomically
(temporary file + rename), so a crash never leaves half an entry under the real name. A file
that cannot be read back is reported (logged and counted) and treated as a miss: the call is
made again and the entry rewritten. A cache never fails a run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sera.types import Message, Usage

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
"""Version of the entry layout; entries of another version are misses."""


def request_key(
    operation: str,
    model: str,
    messages: list[Message],
    temperature: float,
    max_tokens: int,
    extra_body: dict[str, Any] | None,
) -> str:
    """sha256 hex digest of the canonical request."""
    canonical = json.dumps(
        {
            "operation": operation,
            "model": model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": temperature,
            "max_tokens": max_tokens,
            "extra_body": extra_body or {},
        },
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    """A stored reply."""

    text: str
    """The model's reply text."""
    usage: Usage
    """Token counts of the original call."""


class ReplyCache:
    """A folder of cached replies, one JSON file per request key."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.corrupt_entries = 0
        """Entries found unreadable so far (each was reported and ignored)."""

    def path(self, key: str) -> Path:
        """Where the entry for `key` lives (two-level fan-out keeps folders small)."""
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedReply | None:
        """The stored reply, or None when absent or unreadable."""
        path = self.path(key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            return self._corrupt(path, f"cannot read: {exc}")
        try:
            entry = json.loads(raw)
            if entry.get("format") != CACHE_FORMAT or entry.get("key") != key:
                return self._corrupt(path, "wrong format version or key")
            text, usage = entry["text"], entry["usage"]
            if not isinstance(text, str):
                return self._corrupt(path, "'text' is not a string")
            return CachedReply(text=text, usage=Usage.model_validate(usage))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return self._corrupt(path, f"{type(exc).__name__}: {exc}")

    def put(self, key: str, reply: CachedReply) -> None:
        """Store a reply atomically; a failed write is logged, not raised."""
        path = self.path(key)
        entry = {"format": CACHE_FORMAT, "key": key, "text": reply.text, "usage": reply.usage.model_dump()}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:8]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(entry, handle, ensure_ascii=False)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("judge cache: could not write %s: %s", path, exc)

    def _corrupt(self, path: Path, why: str) -> None:
        self.corrupt_entries += 1
        log.warning("judge cache: ignoring unreadable entry %s (%s); the call will be made again", path, why)
        return None
