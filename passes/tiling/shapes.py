"""Integer helpers on sizes and shapes, shared by the tiler, the cost model
and the lowering templates."""

from __future__ import annotations

from typing import Sequence

from fusecc.compiler.types import ScalarType, f32


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def product(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def compute_type(t: ScalarType) -> ScalarType:
    """Floats are computed in f32 whatever their storage (as the reference does)."""
    return f32 if t.is_float else t


__all__ = ["ceil_div", "compute_type", "next_pow2", "product"]
