"""What the report says about where it ran: the machine and the code's git commit."""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
"""The checkout this package runs from (its git commit is recorded)."""


@dataclass(frozen=True)
class Machine:
    """The hardware a run used."""

    cpu: str
    """CPU model name (`/proc/cpuinfo`), else the platform's processor string."""
    native_bf16: bool
    """The CPU has native bf16 arithmetic (AVX-512 BF16 or AMX); without it bf16 is emulated and slow."""
    cores: int
    """Logical CPUs of the machine."""
    usable_cores: int
    """Logical CPUs this process may run on (its affinity)."""
    torch_threads: int
    """Threads torch uses for intra-op work."""
    gpu: str | None
    """The first CUDA device's name; None without one."""

    def to_json(self) -> dict[str, Any]:
        """The fields as a mapping."""
        return asdict(self)


def machine() -> Machine:
    """This machine."""
    import torch

    from sera.train.hardware import cpu_supports_bf16

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return Machine(cpu=cpu, native_bf16=cpu_supports_bf16(), cores=os.cpu_count() or 1, usable_cores=usable,
                   torch_threads=torch.get_num_threads(), gpu=gpu)


def git_state(repo: Path = REPO_ROOT) -> dict[str, Any]:
    """`{commit, dirty}` of the checkout (`commit` None when it is not a git checkout)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}
