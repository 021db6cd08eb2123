"""Checkpoints: round trip, torn checkpoints detected, retention, a full disk leaves the previous one."""

from __future__ import annotations

import errno
import json
import os
import random
from pathlib import Path

import pytest
import torch

import sera.checkpoints.store as ck
from sera.checkpoints.store import (
    CheckpointError,
    CheckpointWriteError,
    capture_rng,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    read_latest,
    restore_rng,
    save_checkpoint,
)


def _files(step: int) -> dict[str, ck.Writer]:
    return {"weights.bin": bytes([step % 256]) * 1000, "state.json": json.dumps({"step": step}).encode()}


def _save(root: Path, step: int, **kw) -> ck.Checkpoint:
    return save_checkpoint(root, _files(step), step=step, version=step, round=step + 1, **kw)


def test_round_trip_with_torch_writers(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    saved = save_checkpoint(tmp_path, {
        "weights.pt": lambda f: torch.save(model.state_dict(), f),
        "optimizer.pt": lambda f: torch.save(opt.state_dict(), f),
        "state.json": json.dumps({"version": 124, "cursor": [0, 17]}).encode(),
    }, step=124, version=124, round=131, meta={"config_hash": "abc"})
    assert saved.path == tmp_path / "step_000124" and read_latest(tmp_path) == "step_000124"
    got = load_latest(tmp_path)
    assert got is not None and got.manifest == saved.manifest
    assert (got.step, got.manifest.version, got.manifest.round, got.manifest.meta) == (124, 124, 131, {"config_hash": "abc"})
    assert sorted(os.listdir(got.path)) == ["manifest.json", "optimizer.pt", "state.json", "weights.pt"]
    weights = torch.load(got.file("weights.pt"), weights_only=True)
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    moments = torch.load(got.file("optimizer.pt"), weights_only=True)["state"][0]["exp_avg"]
    assert torch.equal(moments, opt.state_dict()["state"][0]["exp_avg"])
    assert got.read_json("state.json") == {"version": 124, "cursor": [0, 17]}
    entry = {f.name: f for f in got.manifest.files}["weights.pt"]
    assert entry.size == (got.path / "weights.pt").stat().st_size
    with pytest.raises(KeyError, match="no file 'rng.pt'"):
        got.file("rng.pt")


def test_empty_directory_has_no_checkpoint(tmp_path: Path) -> None:
    assert load_latest(tmp_path) is None and load_latest(tmp_path / "missing") is None


def test_rng_round_trip(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    save_checkpoint(tmp_path, {"rng.pt": lambda f: torch.save(capture_rng(), f)}, step=1, version=1, round=1)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    restore_rng(torch.load(load_latest(tmp_path).file("rng.pt"), weights_only=True))
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_truncated_file_is_named(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    with open(tmp_path / "step_000002" / "weights.bin", "r+b") as f:
        f.truncate(10)
    with pytest.raises(CheckpointError, match=r"step_000002/weights.bin: 10 bytes, the manifest says 1000"):
        load_latest(tmp_path)
    fallback = load_latest(tmp_path, allow_fallback=True)
    assert fallback.step == 1 and "weights.bin" in fallback.fell_back_from


def test_flipped_byte_is_named(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    path = tmp_path / "step_000001" / "state.json"
    path.write_bytes(path.read_bytes().replace(b"1", b"7"))
    with pytest.raises(CheckpointError, match=r"step_000001/state.json: sha256 differs"):
        load_latest(tmp_path)
    with pytest.raises(CheckpointError, match="no earlier complete checkpoint"):
        load_latest(tmp_path, allow_fallback=True)


def test_missing_manifest_and_missing_file(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    (tmp_path / "step_000002" / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"step_000002/manifest.json: missing \(a partial checkpoint\)"):
        load_latest(tmp_path)
    assert load_latest(tmp_path, allow_fallback=True).step == 1
    (tmp_path / "step_000001" / "state.json").unlink()
    with pytest.raises(CheckpointError, match=r"step_000001/state.json: listed in manifest.json but missing"):
        load_checkpoint(tmp_path / "step_000001")


def test_garbage_manifest_and_latest(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    (tmp_path / "step_000001" / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="manifest.json is unreadable"):
        load_latest(tmp_path)
    (tmp_path / "latest").write_text("../../etc\n")
    with pytest.raises(CheckpointError, match="not a checkpoint name"):
        read_latest(tmp_path)


def test_latest_missing_while_checkpoints_exist(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    (tmp_path / "latest").unlink()
    with pytest.raises(CheckpointError, match="latest: missing while 2 checkpoint"):
        load_latest(tmp_path)
    assert load_latest(tmp_path, allow_fallback=True).step == 2


def test_tmp_leftovers_are_removed_and_ignored(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    torn = tmp_path / ".tmp-step_000002-999999999"  # a pid that cannot be alive
    torn.mkdir()
    (torn / "weights.bin").write_bytes(b"half")
    mine = tmp_path / f".tmp-step_000003-{os.getpid()}"
    mine.mkdir()
    (tmp_path / ".latest.999999999.tmp").write_text("step_0000")
    assert load_latest(tmp_path).step == 1
    assert sorted(os.listdir(tmp_path)) == ["latest", "step_000001"]
    assert not torn.exists() and not mine.exists()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000001"]


def test_retention_keeps_last_m_and_latest(tmp_path: Path) -> None:
    for step in range(1, 6):
        _save(tmp_path, step, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000004", "step_000005"]
    # An uncommitted newer directory (crash before `latest` moved) never pushes out what `latest` names.
    (tmp_path / "latest").write_text("step_000004\n")
    _save(tmp_path, 6)
    (tmp_path / "latest").write_text("step_000004\n")
    _save(tmp_path, 7)
    (tmp_path / "latest").write_text("step_000004\n")
    assert ck.apply_retention(tmp_path, 2) == [tmp_path / "step_000005"]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000004", "step_000006", "step_000007"]
    assert load_latest(tmp_path).step == 4
    with pytest.raises(ValueError, match="keep_last"):
        ck.apply_retention(tmp_path, 0)


def test_resaving_an_uncommitted_step_replaces_it(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    (tmp_path / "latest").write_text("step_000001\n")  # the crash left step 2 uncommitted
    save_checkpoint(tmp_path, {"state.json": b'{"again": true}'}, step=2, version=2, round=4)
    got = load_latest(tmp_path)
    assert got.step == 2 and got.read_json("state.json") == {"again": True}
    assert [f.name for f in got.manifest.files] == ["state.json"]


def _disk_full_after(monkeypatch: pytest.MonkeyPatch, writes: int) -> None:
    real = ck._HashingFile.write
    count = {"n": 0}

    def write(self, b):  # type: ignore[no-untyped-def]
        count["n"] += 1
        if count["n"] > writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, b)

    monkeypatch.setattr(ck._HashingFile, "write", write)


@pytest.mark.parametrize("writes", [0, 1, 2])  # during the first file, the second, the manifest
def test_disk_full_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: int) -> None:
    _save(tmp_path, 1)
    _disk_full_after(monkeypatch, writes)
    with pytest.raises(CheckpointWriteError, match=r"checkpoint step_000002 .* no space left on device\); the previous checkpoint 'step_000001' is intact") as err:
        _save(tmp_path, 2)
    assert err.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["latest", "step_000001"]
    assert load_latest(tmp_path).step == 1


def test_disk_full_while_updating_latest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _save(tmp_path, 1)

    def full(path, data):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck, "write_atomic", full)
    with pytest.raises(CheckpointWriteError, match="updating latest: no space left"):
        _save(tmp_path, 2)
    monkeypatch.undo()
    assert read_latest(tmp_path) == "step_000001" and load_latest(tmp_path).step == 1


def test_a_raising_writer_is_a_write_error(tmp_path: Path) -> None:
    def boom(f):  # type: ignore[no-untyped-def]
        raise RuntimeError("cannot serialise")

    with pytest.raises(CheckpointWriteError, match="writing optimizer.pt: RuntimeError: cannot serialise"):
        save_checkpoint(tmp_path, {"optimizer.pt": boom}, step=1, version=1, round=1)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["manifest.json", ".hidden", "a/b", "", "x" * 300])
def test_bad_file_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="not allowed"):
        save_checkpoint(tmp_path, {name: b"x"}, step=1, version=1, round=1)
