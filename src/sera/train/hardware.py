"""What this machine's processors can compute natively, for choosing a dtype.

On a CPU, torch runs bf16 everywhere, but only AVX-512 BF16 or AMX do it in hardware; elsewhere it
is emulated and 6-15× slower than fp32 (`stack.md`), so `model.dtype: auto` picks bf16 only where
it is native.
"""

from __future__ import annotations

from pathlib import Path

import torch


def cpu_supports_bf16() -> bool:
    """True when this CPU has native bf16 arithmetic (AVX-512 BF16 or AMX)."""
    if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def native_dtype(device: str) -> str:
    """`bf16` where `device` (`cpu` or `cuda`) computes it natively, else `fp32`."""
    if device == "cuda":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_supports_bf16() else "fp32"
