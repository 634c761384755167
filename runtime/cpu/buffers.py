"""Host buffers the CPU runtime hands to kernels: aligned, as the emitted
code assumes (`align 64` on arena and output pointers)."""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from fusecc.compiler.types import MemRefType
from fusecc.runtime.loop_interpreter import storage_dtype


def aligned_empty(nbytes: int, alignment: int = 64) -> np.ndarray:
    """An uninitialised uint8 array whose data starts at a multiple of `alignment`."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + nbytes]


def aligned_zeros(nbytes: int, alignment: int = 64) -> np.ndarray:
    out = aligned_empty(nbytes, alignment)
    out[:] = 0
    return out


def address_of(array: np.ndarray) -> int:
    """The address of a contiguous array's first byte. Through the buffer
    protocol (0.5 us here) rather than `array.ctypes.data` (1.7 us: it
    builds a helper object), which is the fallback for what the protocol
    refuses (read-only or empty arrays)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return array.ctypes.data


def output_arrays(types: Sequence[MemRefType]) -> tuple[list[np.ndarray], list[int]]:
    """Fresh outputs in storage layout and their addresses, each 64-byte
    aligned, carved from one allocation (one address look-up per call)."""
    sizes = [-(-t.byte_size // 64) * 64 for t in types]
    raw = np.empty(sum(sizes) + 64, dtype=np.uint8)
    address = address_of(raw)
    start = (-address) % 64
    base = address + start
    outputs, addresses, offset = [], [], start
    for t, size in zip(types, sizes):
        outputs.append(raw[offset:offset + t.byte_size].view(storage_dtype(t)).reshape(t.shape))
        addresses.append(base + offset - start)
        offset += size
    return outputs, addresses


__all__ = ["address_of", "aligned_empty", "aligned_zeros", "output_arrays"]
