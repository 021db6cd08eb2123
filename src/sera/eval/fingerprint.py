"""What an evaluation's results depend on, recorded in `OUT/run.json` and checked on every rerun.

Resuming into an `--out` written with another model, temperature or task file would mix two
experiments in one table, so a rerun whose fingerprint differs is refused, naming the keys that
differ (old -> new). Left out on purpose: which tasks are selected (`--limit`, `--task-id`,
`--difficulty`) and `--samples`, since growing a run is what resuming is for (seeds depend only
on the task and sample, `sera.eval.seeds`); concurrency, timeouts and retries, the server's
address and `--unsafe-sandbox`, which change how a run goes but not what a rollout means.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from sera.runtime.config import RuntimeConfig
from sera.types import Record

FINGERPRINT_VERSION = 1
"""Bumped when the fingerprint's keys or the on-disk layout change meaning."""


class RunFingerprint(Record):
    """The settings an evaluation's rollouts depend on."""

    version: int = FINGERPRINT_VERSION
    """Version of this record and of the `rollouts/<task>/<k>.json` layout."""
    env: str
    """Environment name."""
    source: str
    """The split, or the task file's path."""
    tasks_file_sha256: str | None = None
    """sha256 of the task file's bytes; None for a split."""
    policy: str
    """Policy description (`oracle`, `hf:<model>`, `openai:<model>`)."""
    model: str | None = None
    """Model name or path, when the policy has one."""
    model_weights: str | None = None
    """For a `sera train` checkpoint given as `--model`: the checkpoint loaded and its weights'
    sha256 (`step_000124 learner.pt sha256:...`), so a newer checkpoint is another run."""
    rules: str | None = None
    """Rules profile asked for (TextWorld-Sync); None: each task's own."""
    seed: int = 0
    """Base seed the rollouts' seeds are derived from."""
    sampling: dict[str, Any]
    """Sampling settings of every call (`SamplingParams`, without the per-rollout seed)."""
    runtime: dict[str, Any]
    """Runtime budgets (`RuntimeConfig`, without sampling)."""
    protocol: str | None = None
    """The evaluation protocol asked for (`--protocol`, `sera.eval.protocol`); None: plain defaults."""
    context_tokens: int | None = None
    """The protocol's context (prompt + completion fit in it); None without a protocol."""
    best_of: dict[str, Any] | None = None
    """Best-of-N selection (`BestOf.record()`: n, selector, fork cap, candidate temperature);
    None for a plain evaluation, so runs recorded before it existed still match."""

    @classmethod
    def of(
        cls,
        *,
        env: str,
        source: str,
        policy: str,
        config: RuntimeConfig,
        tasks_file: Path | None = None,
        model: str | None = None,
        rules: str | None = None,
        seed: int = 0,
        best_of: dict[str, Any] | None = None,
        protocol: str | None = None,
        context_tokens: int | None = None,
        model_weights: str | None = None,
    ) -> RunFingerprint:
        """The fingerprint of a run with these settings (hashes `tasks_file` when given)."""
        sampling = {k: v for k, v in dataclasses.asdict(config.sampling).items() if k != "seed"}
        runtime = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "sampling"}
        # Through JSON once, so a fresh fingerprint compares equal to one read back from disk.
        sampling, runtime = json.loads(json.dumps(sampling)), json.loads(json.dumps(runtime))
        return cls(
            env=env, source=source, tasks_file_sha256=file_sha256(tasks_file) if tasks_file else None,
            policy=policy, model=model, rules=rules, seed=seed, sampling=sampling, runtime=runtime,
            protocol=protocol, context_tokens=context_tokens, model_weights=model_weights,
            best_of=json.loads(json.dumps(best_of)) if best_of is not None else None,
        )

    def differences(self, other: RunFingerprint) -> list[str]:
        """`key: old -> new` for every key where `other` differs from this (old) one."""
        old, new = _flat(self.model_dump(mode="json")), _flat(other.model_dump(mode="json"))
        return [
            f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
            for key in sorted(old.keys() | new.keys())
            if old.get(key) != new.get(key)
        ]


def file_sha256(path: Path) -> str:
    """sha256 hex digest of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _flat(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as `a.b` keys, so a difference names the one setting that changed."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            flat.update(_flat(item, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = item
    return flat
