"""Contractions: matmul and attention."""

from __future__ import annotations

import math

import numpy as np

from fusecc.compiler.ir import VerifyError
from fusecc.compiler.op_definitions import BOOL, FLOAT, AttrDef, OperandDef, register_op
from fusecc.compiler.traits import Composite, Contraction, Pure
from fusecc.compiler.dims import dims_equal, require_equal
from fusecc.compiler.types import TensorType, broadcast_shapes

from . import formulas
from .base import FLOAT_ONLY, NUMERIC, TensorOp, check_element_class, expect_same_element_type, expect_tensor, shape_str
from .numerics import compute_view, to_storage


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...], what=("lhs", "rhs")) -> tuple[int, ...]:
    """np.matmul's result shape, with its 1-D promotion rules."""
    if len(a) == 0 or len(b) == 0:
        raise VerifyError("matmul operands must have at least one axis")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if dims_equal(a2[-1], b2[-2]) is False:
        raise VerifyError(
            f"contracting dimensions differ: {what[0]} {shape_str(a)} has {a2[-1]}, {what[1]} {shape_str(b)} has {b2[-2]}"
        )
    require_equal(a2[-1], b2[-2], f"contracting dimensions of {what[0]} and {what[1]} must be equal")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    if batch is None:
        raise VerifyError(f"batch dimensions {shape_str(a2[:-2])} and {shape_str(b2[:-2])} do not broadcast")
    shape = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape


def swap_last_two(shape: tuple[int, ...], flag: bool, what: str) -> tuple[int, ...]:
    if not flag:
        return shape
    if len(shape) < 2:
        raise VerifyError(f"cannot transpose the rank-{len(shape)} {what}")
    return (*shape[:-2], shape[-1], shape[-2])


@register_op
class MatmulOp(TensorOp):
    """np.matmul(a, b) after the optional swap of the last two axes of a (`transpose_a`) or b (`transpose_b`); batch dims broadcast."""

    name = "tensor.matmul"
    traits = frozenset({Pure, Contraction})
    operand_defs = (OperandDef("lhs"), OperandDef("rhs"))
    attr_defs = (AttrDef("transpose_a", BOOL, False), AttrDef("transpose_b", BOOL, False))

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        a = expect_tensor(operand_types[0], "lhs")
        b = expect_tensor(operand_types[1], "rhs")
        element = expect_same_element_type([a, b])
        check_element_class(element, NUMERIC)
        a_shape = swap_last_two(a.shape, cls.get(attributes, "transpose_a"), "lhs")
        b_shape = swap_last_two(b.shape, cls.get(attributes, "transpose_b"), "rhs")
        return [TensorType(matmul_shape(a_shape, b_shape), element)]

    def evaluate(self, args):
        a, b = (compute_view(x) for x in args)
        if self.attr("transpose_a"):
            a = np.swapaxes(a, -1, -2)
        return [to_storage(formulas.NUMPY.matmul(a, b, transpose_b=self.attr("transpose_b")), self.result_element())]


@register_op
class AttentionOp(TensorOp):
    """softmax(q @ kᵀ * scale + mask [+ causal]) @ v."""

    name = "tensor.attention"
    traits = frozenset({Pure, Composite})
    operand_defs = (OperandDef("query"), OperandDef("key"), OperandDef("value"), OperandDef("mask", optional=True))
    attr_defs = (AttrDef("scale", FLOAT, None), AttrDef("causal", BOOL, False))

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        q, k, v = (expect_tensor(t, n) for t, n in zip(operand_types, ("query", "key", "value")))
        element = expect_same_element_type([q, k, v], "query, key and value")
        check_element_class(element, FLOAT_ONLY)
        for t, n in ((q, "query"), (k, "key"), (v, "value")):
            if t.rank < 2:
                raise VerifyError(f"{n} must have rank at least 2, but has shape {shape_str(t.shape)}")
        if dims_equal(q.shape[-1], k.shape[-1]) is False:
            raise VerifyError(f"query head size {q.shape[-1]} differs from key head size {k.shape[-1]}")
        require_equal(q.shape[-1], k.shape[-1], "query and key head sizes must be equal")
        if dims_equal(k.shape[-2], v.shape[-2]) is False:
            raise VerifyError(f"key length {k.shape[-2]} differs from value length {v.shape[-2]}")
        require_equal(k.shape[-2], v.shape[-2], "key and value lengths must be equal")
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        if batch is None:
            raise VerifyError("batch dimensions of query, key and value do not broadcast")
        scores = (*batch, q.shape[-2], k.shape[-2])
        if len(operand_types) == 4:
            mask = expect_tensor(operand_types[3], "mask")
            if mask.element_type is not element:
                raise VerifyError(f"mask must have element type {element}, but has {mask.element_type}")
            if broadcast_shapes(mask.shape, scores) != scores:
                raise VerifyError(f"mask of shape {shape_str(mask.shape)} does not broadcast to the scores {shape_str(scores)}")
        return [TensorType((*batch, q.shape[-2], v.shape[-1]), element)]

    def effective_scale(self, head_size=None) -> float:
        """`scale`, or 1/√D; `head_size` gives D when the type has it as `?`."""
        scale = self.attr("scale")
        if scale is not None:
            return scale
        d = self.query.type.shape[-1] if head_size is None else head_size
        return 1.0 / math.sqrt(d) if d else 1.0  # no head dim: the scores are empty sums (0), any scale will do

    def formula(self, o, q, k, v, mask, sizes=None):
        """The op's definition over the arithmetic interface of `formulas`.
        `sizes` = (rows, cols, head size) where the types have `?` dims."""
        rows, cols, head = sizes or (self.query.type.shape[-2], self.key.type.shape[-2], None)
        rank = len(self.result.type.shape)
        return formulas.attention(o, q, k, v, mask, self.effective_scale(head), self.attr("causal"), rows, cols, rank - 1)

    def evaluate(self, args):
        q, k, v, *mask = (compute_view(a) for a in args)
        sizes = (q.shape[-2], k.shape[-2], q.shape[-1])  # the run's sizes: the types may have `?` dims
        computed = self.formula(formulas.NUMPY, q, k, v, mask[0] if mask else None, sizes)
        return [to_storage(computed, self.result_element())]


__all__ = ["MatmulOp", "AttentionOp", "matmul_shape", "swap_last_two"]
