"""Seeds of an evaluation's rollouts: one per (task, sample), derived from the run's base seed.

The seed depends only on (base seed, task id, sample index), never on which tasks were selected
or in what order, so `--limit 3` then `--limit 10`, or `--samples 1` then `--samples 3`, resume
the rollouts already done, and a rerun of one task reproduces it.
"""

from __future__ import annotations

import hashlib

SEED_BITS = 31
"""Seeds are below 2**31: every backend (torch generators, vLLM's `seed`) accepts them."""


def sample_seed(base_seed: int, task_id: str, sample: int) -> int:
    """The seed of sample `sample` of task `task_id` in a run with base seed `base_seed`."""
    key = f"{base_seed}\x00{task_id}\x00{sample}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % (1 << SEED_BITS)
