"""Reductions and the normalisations built on them: reduce_*, softmax,
layernorm, rmsnorm."""

from __future__ import annotations

import numpy as np

from fusecc.compiler.ir import VerifyError
from fusecc.compiler.op_definitions import BOOL, FLOAT, INT, INT_ARRAY, AttrDef, OperandDef, register_op
from fusecc.compiler.traits import Composite, Pure, Reduction
from fusecc.compiler.types import TensorType, broadcast_shapes

from . import formulas
from .base import (
    ANY_ELEMENT,
    FLOAT_ONLY,
    NUMERIC,
    DomainError,
    TensorOp,
    check_element_class,
    expect_same_element_type,
    expect_tensor,
    normalize_axis,
    shape_str,
)
from .numerics import compute_view, reduce_maximum, reduce_minimum, to_storage


def reduced_axes(axes, rank: int) -> list[int]:
    """Normalised, checked reduction axes; None means every axis."""
    if axes is None:
        return list(range(rank))
    normalised = [normalize_axis(a, rank) for a in axes]
    if len(set(normalised)) != len(normalised):
        raise VerifyError(f"axes {list(axes)} repeat an axis")
    return sorted(normalised)


class ReduceOp(TensorOp):
    traits = frozenset({Pure, Reduction})
    operand_defs = (OperandDef("input"),)
    attr_defs = (AttrDef("axes", INT_ARRAY, None), AttrDef("keepdims", BOOL, False))
    element_class = NUMERIC
    numpy_function = None
    has_identity = True  # reduce_max/min of nothing have no value

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        x = expect_tensor(operand_types[0], "operand")
        check_element_class(x.element_type, cls.element_class)
        axes = reduced_axes(cls.get(attributes, "axes"), x.rank)
        keepdims = cls.get(attributes, "keepdims")
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdims else [d for i, d in enumerate(x.shape) if i not in axes]
        return [TensorType(shape, x.element_type)]

    @property
    def normalized_axes(self) -> list[int]:
        return reduced_axes(self.attr("axes"), self.input.type.rank)

    def evaluate(self, args):
        axes = tuple(self.normalized_axes)
        x = compute_view(args[0])
        if not self.has_identity and any(x.shape[a] == 0 for a in axes):
            raise DomainError(f"'{self.name}' over an empty axis has no value")
        out = type(self).numpy_function(x, axis=axes, keepdims=self.attr("keepdims"))
        return [to_storage(np.asarray(out, dtype=x.dtype) if x.dtype.kind == "f" else out, self.result_element())]


def _reduce(op_name: str, element_class: str, function, has_identity: bool = True):
    name = "Reduce" + op_name.split("_")[1].capitalize() + "Op"
    namespace = {
        "name": op_name,
        "element_class": element_class,
        "numpy_function": staticmethod(function),
        "has_identity": has_identity,
        "__module__": __name__,
    }
    return register_op(type(name, (ReduceOp,), namespace))


ReduceSumOp = _reduce("tensor.reduce_sum", NUMERIC, np.sum)
ReduceMaxOp = _reduce("tensor.reduce_max", ANY_ELEMENT, reduce_maximum, has_identity=False)
ReduceMinOp = _reduce("tensor.reduce_min", ANY_ELEMENT, reduce_minimum, has_identity=False)
ReduceMeanOp = _reduce("tensor.reduce_mean", FLOAT_ONLY, np.mean)
ReduceSumOp.__doc__ = "np.sum(x, axis=axes, keepdims=keepdims); without `axes`, every axis."
ReduceMaxOp.__doc__ = "maximum over `axes` (docs/semantics.md: NaN propagates, +0.0 > -0.0; an empty axis is an error)."
ReduceMinOp.__doc__ = "minimum over `axes` (docs/semantics.md: NaN propagates, -0.0 < +0.0; an empty axis is an error)."
ReduceMeanOp.__doc__ = "np.mean(x, axis=axes, keepdims=keepdims)."


# --------------------------------------------------------------------------- normalisations


@register_op
class SoftmaxOp(TensorOp):
    """exp(x - max) / sum(exp(x - max)) along `axis`."""

    name = "tensor.softmax"
    traits = frozenset({Pure, Composite})
    operand_defs = (OperandDef("input"),)
    attr_defs = (AttrDef("axis", INT, -1),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        x = expect_tensor(operand_types[0], "operand")
        check_element_class(x.element_type, FLOAT_ONLY)
        normalize_axis(cls.get(attributes, "axis"), x.rank)
        return [x]

    @property
    def normalized_axis(self) -> int:
        return normalize_axis(self.attr("axis"), self.input.type.rank)

    def evaluate(self, args):
        if args[0].size == 0:  # nothing to normalise (an empty axis has no maximum, and needs none)
            return [to_storage(compute_view(args[0]), self.result_element())]
        computed = formulas.softmax(formulas.NUMPY, compute_view(args[0]), self.normalized_axis)
        return [to_storage(computed, self.result_element())]


class NormOp(TensorOp):
    """Normalisation over the last axis; scale/shift broadcast to the input."""

    traits = frozenset({Pure, Composite})

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        x = expect_tensor(operand_types[0], "input")
        check_element_class(x.element_type, FLOAT_ONLY)
        if x.rank == 0:
            raise VerifyError("input must have at least one axis to normalise")
        params = [expect_tensor(t, d.name) for t, d in zip(operand_types[1:], cls.operand_defs[1:])]
        expect_same_element_type([x, *params], "input and parameters")
        for p, d in zip(params, cls.operand_defs[1:]):
            if broadcast_shapes(p.shape, x.shape) != x.shape:
                raise VerifyError(f"{d.name} of shape {shape_str(p.shape)} does not broadcast to the input shape {shape_str(x.shape)}")
        return [x]

    @property
    def normalized_axis(self) -> int:
        return self.input.type.rank - 1


@register_op
class LayerNormOp(NormOp):
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over the last axis (biased variance)."""

    name = "tensor.layernorm"
    operand_defs = (OperandDef("input"), OperandDef("gamma"), OperandDef("beta"))
    attr_defs = (AttrDef("epsilon", FLOAT, 1e-5),)

    def evaluate(self, args):
        x, gamma, beta = (compute_view(a) for a in args)
        computed = formulas.layernorm(formulas.NUMPY, x, gamma, beta, self.attr("epsilon"), self.normalized_axis)
        return [to_storage(computed, self.result_element())]


@register_op
class RmsNormOp(NormOp):
    """x / sqrt(mean(x²) + epsilon) * gamma over the last axis."""

    name = "tensor.rmsnorm"
    operand_defs = (OperandDef("input"), OperandDef("gamma"))
    attr_defs = (AttrDef("epsilon", FLOAT, 1e-6),)

    def evaluate(self, args):
        x, gamma = (compute_view(a) for a in args)
        computed = formulas.rmsnorm(formulas.NUMPY, x, gamma, self.attr("epsilon"), self.normalized_axis)
        return [to_storage(computed, self.result_element())]


__all__ = [name for name in dir() if name.endswith("Op")] + ["reduced_axes"]
