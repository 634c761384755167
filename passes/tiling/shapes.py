"""Integer helpers on sizes and shapes, and where a concatenated operand
changes pieces (`concat_boundaries`), shared by the tiler, the cost model
and the lowering templates."""

from __future__ import annotations

from typing import Collection, Sequence

from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.traits import Elementwise
from fusecc.compiler.types import ScalarType, f32
from fusecc.dialects import tensor as T


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


def concat_boundaries(value: Value, axis: int, inside: Collection[Operation] | None = None) -> set[int]:
    """Where, along `axis` of `value` (0 < b < extent), the group input an
    element is computed from changes because of a concatenation: through
    concats (nested too), transposes and elementwise ops on same-shape
    operands, as the scalar emitter follows them. Ranges between two
    boundaries can be read without branching once the index's range is
    assumed. `inside`: the group's ops, where `value`'s producers are not
    yet a group's region (a candidate group of the cost model); a value
    made outside them is a group input, read whole."""
    op = value.defining_op
    if op is None or (inside is not None and op not in inside):
        return set()
    if isinstance(op, T.ConcatOp):
        if op.attr("axis") % op.result.type.rank != axis:
            return set().union(*(concat_boundaries(piece, axis, inside) for piece in op.inputs))
        found, offset = set(), 0
        for piece in op.inputs:
            found |= {offset + b for b in concat_boundaries(piece, axis, inside)}
            offset += piece.type.shape[axis]
            found.add(offset)
        found.discard(offset)
        return found
    if isinstance(op, T.TransposeOp):
        return concat_boundaries(op.input, op.attr("perm")[axis], inside)
    if op.has_trait(Elementwise):  # the ops with a scalar formula (lowering/scalar_formulas.py; a test checks they agree)
        same = [v for v in op.operands if v.type.shape == value.type.shape]
        return set().union(*(concat_boundaries(v, axis, inside) for v in same))
    return set()
