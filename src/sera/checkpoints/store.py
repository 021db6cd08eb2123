"""Checkpoints as atomic directories with a manifest, a `latest` pointer and retention.

Layout of a checkpoint directory `ckpt/`:

    ckpt/step_000124/     the files the caller gave (weights, optimizer.pt, rng.pt, state.json, ...)
    ckpt/step_000124/manifest.json   written last: name, size and sha256 of every file; step, version, round
    ckpt/latest           the name of the newest committed checkpoint (one line)

A save writes into `ckpt/.tmp-<name>-<pid>/`, fsyncs every file, writes and fsyncs the manifest,
renames the directory into place, fsyncs `ckpt/`, then replaces `latest` atomically. The update
of `latest` is the commit point: a complete directory that `latest` does not name yet (a crash
between the rename and the pointer) is not loaded, and saving that step again replaces it. Any
failure before the commit (a full disk included) removes the temporary directory and leaves the
previous checkpoint and `latest` as they were.

The files are whatever the caller gives: a mapping of file names to bytes or to writers
`f(binary_file) -> None` (e.g. `lambda f: torch.save(optimizer.state_dict(), f)`), so learners,
LoRA adapters and loop state need nothing from this module but `save_checkpoint`.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import random
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

FORMAT = 1
"""Manifest format version."""
MANIFEST = "manifest.json"
LATEST = "latest"
TMP_PREFIX = ".tmp-"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")
_CHUNK = 1 << 20

Writer = bytes | Callable[[BinaryIO], None]
"""A file's content: its bytes, or a function writing them into an open binary file."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, partial or corrupt; the message names the directory and the file."""


class CheckpointWriteError(OSError):
    """Writing a checkpoint failed (a full disk, a writer that raised); the previous one is intact."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint as the manifest records it."""

    name: str
    """File name inside the checkpoint directory."""
    size: int
    """Size in bytes."""
    sha256: str
    """Hex sha256 of the content."""


@dataclass(frozen=True)
class Manifest:
    """What `manifest.json` holds."""

    name: str
    """The checkpoint directory's name, e.g. `step_000124`."""
    step: int
    """Optimizer step (policy version) the checkpoint was taken at; orders checkpoints."""
    version: int
    """Policy version (completed optimizer updates)."""
    round: int
    """Rounds started, trained or skipped."""
    files: tuple[FileEntry, ...]
    """Every file but the manifest."""
    created: float = 0.0
    """Unix time of the save."""
    format: int = FORMAT
    """Manifest format version."""
    meta: dict[str, Any] = field(default_factory=dict)
    """The caller's small JSON-safe extras (config hash, git sha, ...)."""

    def to_json(self) -> str:
        return json.dumps({"format": self.format, "name": self.name, "step": self.step, "version": self.version,
                           "round": self.round, "created": self.created, "meta": self.meta,
                           "files": [vars(f) for f in self.files]}, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        try:
            data = json.loads(text)
            files = tuple(FileEntry(str(f["name"]), int(f["size"]), str(f["sha256"])) for f in data["files"])
            return cls(name=str(data["name"]), step=int(data["step"]), version=int(data["version"]),
                       round=int(data["round"]), files=files, created=float(data.get("created", 0.0)),
                       format=int(data["format"]), meta=dict(data.get("meta") or {}))
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{where}: {MANIFEST} is unreadable ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class Checkpoint:
    """A validated checkpoint on disk."""

    path: Path
    """Its directory."""
    manifest: Manifest
    """Its manifest."""
    fell_back_from: str | None = None
    """With `allow_fallback`: why the checkpoint `latest` named was not used; None otherwise."""

    @property
    def step(self) -> int:
        return self.manifest.step

    def file(self, name: str) -> Path:
        """The path of one of its files; KeyError if the manifest has no such file."""
        if name not in {f.name for f in self.manifest.files}:
            raise KeyError(f"checkpoint {self.path} has no file {name!r}; it has {[f.name for f in self.manifest.files]}")
        return self.path / name

    def read_bytes(self, name: str) -> bytes:
        return self.file(name).read_bytes()

    def read_json(self, name: str) -> Any:
        return json.loads(self.file(name).read_text(encoding="utf-8"))


def checkpoint_name(step: int) -> str:
    """The directory name of the checkpoint taken at `step`: `step_000124`."""
    return f"step_{step:06d}"


# ---------------------------------------------------------------- writing


class _HashingFile(io.RawIOBase):
    """A write-only file that hashes and counts what passes through (one pass over the bytes)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f, self.sha, self.size = f, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:  # type: ignore[override]
        view = memoryview(b).cast("B")
        self._f.write(view)
        self.sha.update(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._f.flush()


def _write_file(path: Path, content: Writer) -> FileEntry:
    with open(path, "xb") as raw:
        out = _HashingFile(raw)
        if isinstance(content, bytes | bytearray | memoryview):
            out.write(content)
        else:
            content(out)  # type: ignore[arg-type]
        out.flush()
        os.fsync(raw.fileno())
    return FileEntry(path.name, out.size, out.sha.hexdigest())


def fsync_dir(path: Path) -> None:
    """Make renames inside `path` durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically: a temporary file, fsync, `os.replace`, fsync of the directory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _check_names(files: Mapping[str, Writer]) -> None:
    if not files:
        raise ValueError("a checkpoint needs at least one file")
    for name in files:
        if not _SAFE_NAME.match(name) or name == MANIFEST:
            raise ValueError(f"checkpoint file name {name!r} is not allowed (plain names of [A-Za-z0-9_.-], "
                             f"not starting with '.', not {MANIFEST!r})")


def save_checkpoint(
    ckpt_dir: str | Path,
    files: Mapping[str, Writer],
    *,
    step: int,
    version: int,
    round: int,
    name: str | None = None,
    keep_last: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Write `files` as the checkpoint `name` (default `step_<step>`), commit it, apply retention.

    Raises `CheckpointWriteError` if anything fails before the commit; the temporary directory is
    removed and the previous checkpoint and `latest` are untouched.
    """
    ckpt_dir = Path(ckpt_dir)
    name = name or checkpoint_name(step)
    _check_names({**files, name: b""})
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    tmp = ckpt_dir / f"{TMP_PREFIX}{name}-{os.getpid()}"
    final = ckpt_dir / name
    try:
        previous = read_latest(ckpt_dir)
    except CheckpointError:
        previous = None
    current = f"the previous checkpoint {previous!r}" if previous else "the directory's previous state"
    shutil.rmtree(tmp, ignore_errors=True)
    doing = "creating the directory"
    try:
        tmp.mkdir()
        entries = []
        for file_name, content in files.items():
            doing = f"writing {file_name}"
            entries.append(_write_file(tmp / file_name, content))
        doing = f"writing {MANIFEST}"
        manifest = Manifest(name, step, version, round, tuple(entries), created=time.time(), meta=dict(meta or {}))
        _write_file(tmp / MANIFEST, manifest.to_json().encode())
        fsync_dir(tmp)
        doing = f"moving it into place as {final}"
        if final.exists():  # an uncommitted directory of this step from a crashed run: replace it
            aside = ckpt_dir / f"{TMP_PREFIX}replaced-{name}-{os.getpid()}"
            os.rename(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
        os.rename(tmp, final)
        fsync_dir(ckpt_dir)
        doing = f"updating {LATEST}"
        write_atomic(ckpt_dir / LATEST, f"{name}\n".encode())
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        reason = "no space left on device" if isinstance(exc, OSError) and exc.errno == errno.ENOSPC else f"{type(exc).__name__}: {exc}"
        raise CheckpointWriteError(
            getattr(exc, "errno", None) or errno.EIO,
            f"checkpoint {name} in {ckpt_dir} not written ({doing}: {reason}); {current} is intact",
        ) from exc
    if keep_last is not None:
        apply_retention(ckpt_dir, keep_last)
    return Checkpoint(final, manifest)


# ---------------------------------------------------------------- reading


def read_latest(ckpt_dir: str | Path) -> str | None:
    """The name `latest` holds, or None if there is no `latest`."""
    try:
        text = (Path(ckpt_dir) / LATEST).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    if not _SAFE_NAME.match(text):
        raise CheckpointError(f"{Path(ckpt_dir) / LATEST}: not a checkpoint name: {text[:80]!r}")
    return text


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Validate one checkpoint directory against its manifest (every file present, sizes, hashes)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"{manifest_path}: missing (a partial checkpoint)")
    manifest = Manifest.from_json(manifest_path.read_text(encoding="utf-8", errors="replace"), str(manifest_path))
    for entry in manifest.files:
        file_path = path / entry.name
        if not _SAFE_NAME.match(entry.name) or not file_path.is_file():
            raise CheckpointError(f"{file_path}: listed in {MANIFEST} but missing")
        size = file_path.stat().st_size
        if size != entry.size:
            raise CheckpointError(f"{file_path}: {size} bytes, the manifest says {entry.size} (truncated or torn)")
        if _sha256(file_path) != entry.sha256:
            raise CheckpointError(f"{file_path}: sha256 differs from the manifest (corrupt)")
    return Checkpoint(path, manifest)


def _dirs(ckpt_dir: Path) -> list[Path]:
    """Visible checkpoint directories (those with a manifest), oldest step first."""
    found = []
    for p in ckpt_dir.iterdir() if ckpt_dir.is_dir() else ():
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST).is_file():
            try:
                found.append((Manifest.from_json((p / MANIFEST).read_text(encoding="utf-8"), str(p)).step, p.name, p))
            except (CheckpointError, OSError, UnicodeDecodeError):
                continue
    return [p for _, _, p in sorted(found)]


def list_checkpoints(ckpt_dir: str | Path) -> list[Path]:
    """Checkpoint directories that have a readable manifest, oldest step first (not hash-checked)."""
    return _dirs(Path(ckpt_dir))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers(ckpt_dir: str | Path) -> list[Path]:
    """Delete `.tmp-*` directories of interrupted saves (not those of another live process) and
    temporary files of an interrupted `latest` update."""
    removed = []
    ckpt_dir = Path(ckpt_dir)
    for p in ckpt_dir.glob(f"{TMP_PREFIX}*") if ckpt_dir.is_dir() else ():
        pid = p.name.rsplit("-", 1)[-1]
        if p.is_dir() and not (pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid))):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    for p in ckpt_dir.glob(f".{LATEST}.*.tmp") if ckpt_dir.is_dir() else ():  # a torn `write_atomic`
        p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def load_latest(ckpt_dir: str | Path, *, allow_fallback: bool = False) -> Checkpoint | None:
    """The checkpoint `latest` names, validated; None when the directory holds no checkpoint.

    A missing, partial or corrupt checkpoint is a `CheckpointError` naming the file; with
    `allow_fallback=True` the newest older one that validates is returned instead, with
    `fell_back_from` saying why. Leftover `.tmp-*` directories are removed first.
    """
    ckpt_dir = Path(ckpt_dir)
    remove_leftovers(ckpt_dir)
    name = read_latest(ckpt_dir)
    candidates = _dirs(ckpt_dir)
    if name is None:
        if not candidates:
            return None
        problem = f"{ckpt_dir / LATEST}: missing while {len(candidates)} checkpoint(s) exist"
    else:
        try:
            return load_checkpoint(ckpt_dir / name)
        except CheckpointError as exc:
            problem = str(exc)
    if not allow_fallback:
        raise CheckpointError(f"{problem}; pass allow_fallback=True (sera train --resume DIR --fallback) to use the previous complete one")
    limit = _step_of(ckpt_dir / name) if name else None
    for path in reversed(candidates):
        if path.name == name or (limit is not None and _step_of(path) >= limit):
            continue
        try:
            return Checkpoint(path, load_checkpoint(path).manifest, fell_back_from=problem)
        except CheckpointError:
            continue
    raise CheckpointError(f"{problem}; and no earlier complete checkpoint in {ckpt_dir}")


def _step_of(path: Path) -> int | None:
    try:
        return Manifest.from_json((path / MANIFEST).read_text(encoding="utf-8"), str(path)).step
    except (CheckpointError, OSError, UnicodeDecodeError):
        match = re.search(r"(\d+)$", path.name)
        return int(match.group(1)) if match else None


def apply_retention(ckpt_dir: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints; the one `latest` names is always kept."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    ckpt_dir = Path(ckpt_dir)
    protected = read_latest(ckpt_dir)
    dirs = _dirs(ckpt_dir)
    removed = []
    for path in dirs[: max(0, len(dirs) - keep_last)]:
        if path.name != protected:
            shutil.rmtree(path)
            removed.append(path)
    if removed:
        fsync_dir(ckpt_dir)
    return removed


# ---------------------------------------------------------------- RNG states


def capture_rng() -> dict[str, Any]:
    """The Python, NumPy (if installed) and torch (CPU, and CUDA if present) RNG states, as plain
    values and tensors, so `torch.save` of it loads back with `torch.load(weights_only=True)`."""
    state: dict[str, Any] = {"python": _to_lists(random.getstate())}
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        state["numpy"] = [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)]
    import torch

    state["torch"] = torch.get_rng_state()
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: Mapping[str, Any]) -> None:
    """Set the RNGs `capture_rng` captured; a state captured with CUDA needs the same device count."""
    random.setstate(_to_tuples(state["python"]))
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    import torch

    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        if torch.cuda.device_count() != len(state["cuda"]):
            raise ValueError(f"RNG state holds {len(state['cuda'])} CUDA device(s), this machine has {torch.cuda.device_count()}")
        torch.cuda.set_rng_state_all(state["cuda"])


def _to_lists(value: Any) -> Any:
    return [_to_lists(v) for v in value] if isinstance(value, tuple | list) else value


def _to_tuples(value: Any) -> Any:
    return tuple(_to_tuples(v) for v in value) if isinstance(value, list) else value
