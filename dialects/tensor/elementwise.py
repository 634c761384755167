"""Constants and elementwise ops: binary and unary arithmetic, casts,
comparisons and select (numpy broadcasting)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import UNKNOWN_LOC, Location
from fusecc.compiler.dims import is_unbound
from fusecc.compiler.ir import VerifyError
from fusecc.compiler.op_definitions import DENSE, REQUIRED, STRING, AttrDef, OperandDef, register_op
from fusecc.compiler.traits import Broadcasting, Commutative, ConstantLike, Elementwise, Pure
from fusecc.compiler.types import TensorType, i1

from . import formulas
from .base import (
    ANY_ELEMENT,
    FLOAT_ONLY,
    NUMERIC,
    TensorOp,
    broadcast_or_fail,
    check_element_class,
    expect_same_element_type,
    expect_tensor,
    shape_str,
)
from .numerics import compute_view, divide, erf, maximum, minimum, power, to_storage


@register_op
class ConstantOp(TensorOp):
    """The value of its `value` attribute: `dense<...>` or `dense_resource<name>`."""

    name = "tensor.constant"
    traits = frozenset({Pure, ConstantLike})
    attr_defs = (AttrDef("value", DENSE, REQUIRED),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        value = attributes.get("value")
        if not isinstance(value, A.DenseElementsAttr):
            raise VerifyError("requires a dense 'value' attribute")
        if not isinstance(value.type, TensorType):
            raise VerifyError(f"'value' must have a tensor type, but has {value.type}")
        return [value.type]

    @classmethod
    def of(cls, array, type: TensorType, location: Location = UNKNOWN_LOC) -> "ConstantOp":
        return cls.create([], {"value": A.DenseElementsAttr(array, type)}, location=location)

    def evaluate(self, args):
        return [self.attr("value").array]


# --------------------------------------------------------------------------- binary


class BinaryOp(TensorOp):
    traits = frozenset({Pure, Elementwise, Broadcasting})
    operand_defs = (OperandDef("lhs"), OperandDef("rhs"))
    element_class = NUMERIC
    numpy_function: Callable[[np.ndarray, np.ndarray], np.ndarray]

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        lhs = expect_tensor(operand_types[0], "lhs")
        rhs = expect_tensor(operand_types[1], "rhs")
        element = expect_same_element_type([lhs, rhs])
        check_element_class(element, cls.element_class)
        return [TensorType(broadcast_or_fail([lhs, rhs]), element)]

    def evaluate(self, args):
        computed = type(self).numpy_function(compute_view(args[0]), compute_view(args[1]))
        return [to_storage(computed, self.result_element())]


def _binary(op_name: str, commutative: bool, function, element_class: str = NUMERIC, doc: str = ""):
    traits = BinaryOp.traits | ({Commutative} if commutative else set())
    namespace = {
        "name": op_name,
        "traits": frozenset(traits),
        "element_class": element_class,
        "numpy_function": staticmethod(function),
        "__doc__": doc,
        "__module__": __name__,
    }
    return register_op(type(op_name.split(".")[1].capitalize() + "Op", (BinaryOp,), namespace))


AddOp = _binary("tensor.add", True, np.add, doc="a + b")
SubOp = _binary("tensor.sub", False, np.subtract, doc="a - b")
MulOp = _binary("tensor.mul", True, np.multiply, doc="a * b")
DivOp = _binary("tensor.div", False, divide, doc="a / b (integers truncate toward zero, x / 0 is 0)")
MaxOp = _binary("tensor.max", True, maximum, ANY_ELEMENT, doc="IEEE 754-2019 maximum(a, b): NaN propagates, +0.0 > -0.0")
MinOp = _binary("tensor.min", True, minimum, ANY_ELEMENT, doc="IEEE 754-2019 minimum(a, b): NaN propagates, -0.0 < +0.0")
PowOp = _binary("tensor.pow", False, power, doc="a ** b (floats: C99 pow, docs/semantics.md)")


# --------------------------------------------------------------------------- unary


class UnaryOp(TensorOp):
    traits = frozenset({Pure, Elementwise})
    operand_defs = (OperandDef("input"),)
    element_class = FLOAT_ONLY
    numpy_function: Callable[[np.ndarray], np.ndarray]

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        x = expect_tensor(operand_types[0], "operand")
        check_element_class(x.element_type, cls.element_class)
        return [x]

    def evaluate(self, args):
        return [to_storage(type(self).numpy_function(compute_view(args[0])), self.result_element())]


def _unary(op_name: str, function, element_class: str = FLOAT_ONLY, doc: str = "", attr_defs=(), evaluate=None):
    name = "".join(part.capitalize() for part in op_name.split(".")[1].split("_")) + "Op"
    namespace = {
        "name": op_name,
        "element_class": element_class,
        "numpy_function": staticmethod(function),
        "__doc__": doc,
        "attr_defs": attr_defs,
        "__module__": __name__,
    }
    if evaluate is not None:
        namespace["evaluate"] = evaluate
    return register_op(type(name, (UnaryOp,), namespace))


def _relu(x):
    return maximum(x, np.zeros((), x.dtype))


def _evaluate_gelu(op, args):
    computed = formulas.gelu(formulas.NUMPY, compute_view(args[0]), op.attr("approximate"))
    return [to_storage(computed, op.result_element())]


NegOp = _unary("tensor.neg", np.negative, NUMERIC, "-x")
AbsOp = _unary("tensor.abs", np.abs, NUMERIC, "|x|")
ExpOp = _unary("tensor.exp", np.exp, doc="e^x")
LogOp = _unary("tensor.log", np.log, doc="ln x")
SqrtOp = _unary("tensor.sqrt", np.sqrt, doc="√x")
RsqrtOp = _unary("tensor.rsqrt", lambda x: np.float32(1.0) / np.sqrt(x), doc="1/√x")
TanhOp = _unary("tensor.tanh", np.tanh, doc="tanh x")
ErfOp = _unary("tensor.erf", formulas.NUMPY.erf, doc="erf x (computed in float64, then rounded)")
ReciprocalOp = _unary("tensor.reciprocal", formulas.NUMPY.reciprocal, doc="1/x")
ReluOp = _unary("tensor.relu", _relu, NUMERIC, "maximum(x, 0): NaN stays NaN, -0.0 gives +0.0")
SigmoidOp = _unary("tensor.sigmoid", lambda x: formulas.sigmoid(formulas.NUMPY, x), doc="1/(1+e^-x)")
SiluOp = _unary("tensor.silu", lambda x: formulas.silu(formulas.NUMPY, x), doc="x*sigmoid(x)")
GeluOp = _unary(
    "tensor.gelu",
    None,
    doc="0.5x(1+erf(x/√2)), or the tanh approximation",
    attr_defs=(AttrDef("approximate", STRING, "none", choices=("none", "tanh")),),
    evaluate=_evaluate_gelu,
)


# --------------------------------------------------------------------------- casts, comparisons, select


@register_op
class CastOp(TensorOp):
    """x.astype(result element type); the shape is kept."""

    name = "tensor.cast"
    traits = frozenset({Pure, Elementwise})
    operand_defs = (OperandDef("input"),)
    has_type_inference = False

    def verify_(self):
        x = expect_tensor(self.input.type, "operand")
        out = expect_tensor(self.result.type, "result")
        if x.shape != out.shape:
            raise VerifyError(f"cast changes the shape from {shape_str(x.shape)} to {shape_str(out.shape)}")

    @classmethod
    def refine_result_types(cls, operand_types, attributes, declared):
        """A cast keeps the shape: `?` dims are the operand's."""
        x, out = expect_tensor(operand_types[0], "operand"), expect_tensor(declared[0], "result")
        if x.rank != out.rank:
            return [out]
        return [TensorType([a if is_unbound(d) else d for a, d in zip(x.shape, out.shape)], out.element_type)]

    def fold(self, constant_operands):
        return [self.input] if self.input.type is self.result.type else None

    def evaluate(self, args):
        return [to_storage(args[0], self.result_element())]


CMP_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")
COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


@register_op
class CmpOp(TensorOp):
    """a <predicate> b elementwise, broadcasting: an i1 tensor (NaN compares as in numpy: only `ne` holds)."""

    name = "tensor.cmp"
    traits = frozenset({Pure, Elementwise, Broadcasting})
    operand_defs = (OperandDef("lhs"), OperandDef("rhs"))
    attr_defs = (AttrDef("predicate", STRING, REQUIRED, choices=CMP_PREDICATES),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        lhs = expect_tensor(operand_types[0], "lhs")
        rhs = expect_tensor(operand_types[1], "rhs")
        expect_same_element_type([lhs, rhs])
        return [TensorType(broadcast_or_fail([lhs, rhs]), i1)]

    def evaluate(self, args):
        return [np.asarray(COMPARE[self.attr("predicate")](compute_view(args[0]), compute_view(args[1])))]


@register_op
class SelectOp(TensorOp):
    """np.where(cond, a, b)."""

    name = "tensor.select"
    traits = frozenset({Pure, Elementwise, Broadcasting})
    operand_defs = (OperandDef("condition"), OperandDef("true_value"), OperandDef("false_value"))

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        cond, a, b = (expect_tensor(t, n) for t, n in zip(operand_types, ("condition", "true value", "false value")))
        if cond.element_type is not i1:
            raise VerifyError(f"condition must have element type i1, but has {cond.element_type}")
        element = expect_same_element_type([a, b], "true and false values")
        return [TensorType(broadcast_or_fail([cond, a, b]), element)]

    def evaluate(self, args):
        return [to_storage(np.where(args[0], args[1], args[2]), self.result_element())]


__all__ = [name for name in dir() if name.endswith("Op")] + ["CMP_PREDICATES", "COMPARE"]
