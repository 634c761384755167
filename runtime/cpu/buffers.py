"""Host buffers the CPU runtime hands to kernels: aligned, as the emitted
code assumes (`align 64` on arena and output pointers)."""

from __future__ import annotations

import numpy as np


def aligned_empty(nbytes: int, alignment: int = 64) -> np.ndarray:
    """An uninitialised uint8 array whose data starts at a multiple of `alignment`."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + nbytes]


def aligned_zeros(nbytes: int, alignment: int = 64) -> np.ndarray:
    out = aligned_empty(nbytes, alignment)
    out[:] = 0
    return out


__all__ = ["aligned_empty", "aligned_zeros"]
