"""The `tensor` dialect: value-semantics tensor ops with numpy's semantics.

This is the input language of `../shared/spec/tensor-ir.md`. Each op declares
its operands, attributes, traits (including its fusion class) and a result
type inference that is also its main verifier. Numbers are defined by
`fusecc.runtime.reference`, which evaluates these ops with numpy.
"""

from __future__ import annotations

import math
from typing import Sequence

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import UNKNOWN_LOC, Location
from fusecc.compiler.ir import (
    BOOL,
    DENSE,
    FLOAT,
    INT,
    INT_ARRAY,
    REQUIRED,
    STRING,
    AttrDef,
    Operation,
    OperandDef,
    ResultDef,
    VerifyError,
    register_op,
)
from fusecc.compiler.traits import (
    Broadcasting,
    Commutative,
    Composite,
    ConstantLike,
    Contraction,
    Elementwise,
    Injective,
    Pure,
    Reduction,
)
from fusecc.compiler.types import ScalarType, TensorType, Type, broadcast_shapes, i1

# --------------------------------------------------------------------------- helpers


def shape_str(shape: Sequence[int]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def expect_tensor(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise VerifyError(f"{what} must be a tensor, but has type {t}")
    return t


def expect_same_element_type(types: Sequence[TensorType], what: str = "operands") -> ScalarType:
    first = types[0].element_type
    for t in types[1:]:
        if t.element_type is not first:
            names = ", ".join(str(x.element_type) for x in types)
            raise VerifyError(f"{what} must have the same element type, but have {names}")
    return first


def broadcast_or_fail(types: Sequence[TensorType]) -> tuple[int, ...]:
    shape = broadcast_shapes(*(t.shape for t in types))
    if shape is None:
        shapes = " and ".join(shape_str(t.shape) for t in types)
        raise VerifyError(f"operand shapes {shapes} do not broadcast")
    return shape


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank or rank == 0:
        raise VerifyError(f"{what} {axis} is out of range for a rank-{rank} tensor")
    return axis % rank


FLOAT_ONLY = "float"
NUMERIC = "numeric"  # any integer or float, not i1
ANY_ELEMENT = "any"


def check_element_class(element: ScalarType, allowed: str) -> None:
    if allowed == FLOAT_ONLY and not element.is_float:
        raise VerifyError(f"expects a floating-point element type, but got {element}")
    if allowed == NUMERIC and element is i1:
        raise VerifyError("expects a numeric element type, but got i1")


class TensorOp(Operation):
    """Base of the tensor ops: one tensor result, type inference as verifier."""

    has_type_inference = True
    result_defs = (ResultDef("result"),)

    @classmethod
    def get(cls, attributes: dict[str, A.Attribute], name: str):
        """An attribute's Python value from a raw dict, default filled in."""
        definition = cls._attr_index[name]
        found = attributes.get(name)
        if found is None:
            return None if definition.default is REQUIRED else definition.default
        return definition.kind.to_python(found)


# --------------------------------------------------------------------------- constant


@register_op
class ConstantOp(TensorOp):
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


# --------------------------------------------------------------------------- elementwise


class BinaryOp(TensorOp):
    traits = frozenset({Pure, Elementwise, Broadcasting})
    operand_defs = (OperandDef("lhs"), OperandDef("rhs"))
    element_class = NUMERIC

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        lhs = expect_tensor(operand_types[0], "lhs")
        rhs = expect_tensor(operand_types[1], "rhs")
        element = expect_same_element_type([lhs, rhs])
        check_element_class(element, cls.element_class)
        return [TensorType(broadcast_or_fail([lhs, rhs]), element)]


def _binary(op_name: str, commutative: bool, element_class: str = NUMERIC, doc: str = ""):
    traits = BinaryOp.traits | ({Commutative} if commutative else set())
    cls = type(
        op_name.split(".")[1].capitalize() + "Op",
        (BinaryOp,),
        {"name": op_name, "traits": frozenset(traits), "element_class": element_class, "__doc__": doc},
    )
    return register_op(cls)


AddOp = _binary("tensor.add", True, doc="a + b")
SubOp = _binary("tensor.sub", False, doc="a - b")
MulOp = _binary("tensor.mul", True, doc="a * b")
DivOp = _binary("tensor.div", False, doc="a / b (integers truncate toward zero)")
MaxOp = _binary("tensor.max", True, ANY_ELEMENT, doc="np.maximum(a, b)")
MinOp = _binary("tensor.min", True, ANY_ELEMENT, doc="np.minimum(a, b)")
PowOp = _binary("tensor.pow", False, doc="a ** b")


class UnaryOp(TensorOp):
    traits = frozenset({Pure, Elementwise})
    operand_defs = (OperandDef("input"),)
    element_class = FLOAT_ONLY

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        x = expect_tensor(operand_types[0], "operand")
        check_element_class(x.element_type, cls.element_class)
        return [x]


def _unary(op_name: str, element_class: str = FLOAT_ONLY, doc: str = "", attr_defs=()):
    name = "".join(part.capitalize() for part in op_name.split(".")[1].split("_")) + "Op"
    cls = type(name, (UnaryOp,), {"name": op_name, "element_class": element_class, "__doc__": doc, "attr_defs": attr_defs})
    return register_op(cls)


NegOp = _unary("tensor.neg", NUMERIC, "-x")
AbsOp = _unary("tensor.abs", NUMERIC, "|x|")
ExpOp = _unary("tensor.exp", doc="e^x")
LogOp = _unary("tensor.log", doc="ln x")
SqrtOp = _unary("tensor.sqrt", doc="√x")
RsqrtOp = _unary("tensor.rsqrt", doc="1/√x")
TanhOp = _unary("tensor.tanh", doc="tanh x")
ErfOp = _unary("tensor.erf", doc="erf x")
ReciprocalOp = _unary("tensor.reciprocal", doc="1/x")
ReluOp = _unary("tensor.relu", NUMERIC, "max(x, 0)")
SigmoidOp = _unary("tensor.sigmoid", doc="1/(1+e^-x)")
SiluOp = _unary("tensor.silu", doc="x*sigmoid(x)")
GeluOp = _unary(
    "tensor.gelu",
    doc="0.5x(1+erf(x/√2)), or the tanh approximation",
    attr_defs=(AttrDef("approximate", STRING, "none", choices=("none", "tanh")),),
)


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


CMP_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")


@register_op
class CmpOp(TensorOp):
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


# --------------------------------------------------------------------------- reductions


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


def _reduce(op_name: str, element_class: str):
    name = "Reduce" + op_name.split("_")[1].capitalize() + "Op"
    return register_op(type(name, (ReduceOp,), {"name": op_name, "element_class": element_class}))


ReduceSumOp = _reduce("tensor.reduce_sum", NUMERIC)
ReduceMaxOp = _reduce("tensor.reduce_max", ANY_ELEMENT)
ReduceMinOp = _reduce("tensor.reduce_min", ANY_ELEMENT)
ReduceMeanOp = _reduce("tensor.reduce_mean", FLOAT_ONLY)


# --------------------------------------------------------------------------- composites


@register_op
class SoftmaxOp(TensorOp):
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


@register_op
class LayerNormOp(NormOp):
    name = "tensor.layernorm"
    operand_defs = (OperandDef("input"), OperandDef("gamma"), OperandDef("beta"))
    attr_defs = (AttrDef("epsilon", FLOAT, 1e-5),)


@register_op
class RmsNormOp(NormOp):
    name = "tensor.rmsnorm"
    operand_defs = (OperandDef("input"), OperandDef("gamma"))
    attr_defs = (AttrDef("epsilon", FLOAT, 1e-6),)


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...], what=("lhs", "rhs")) -> tuple[int, ...]:
    """np.matmul's result shape, with its 1-D promotion rules."""
    if len(a) == 0 or len(b) == 0:
        raise VerifyError("matmul operands must have at least one axis")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise VerifyError(
            f"contracting dimensions differ: {what[0]} {shape_str(a)} has {a2[-1]}, {what[1]} {shape_str(b)} has {b2[-2]}"
        )
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
        if q.shape[-1] != k.shape[-1]:
            raise VerifyError(f"query head size {q.shape[-1]} differs from key head size {k.shape[-1]}")
        if k.shape[-2] != v.shape[-2]:
            raise VerifyError(f"key length {k.shape[-2]} differs from value length {v.shape[-2]}")
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

    def effective_scale(self) -> float:
        scale = self.attr("scale")
        return 1.0 / math.sqrt(self.query.type.shape[-1]) if scale is None else scale


# --------------------------------------------------------------------------- layout (injective)


@register_op
class ReshapeOp(TensorOp):
    name = "tensor.reshape"
    traits = frozenset({Pure, Injective})
    operand_defs = (OperandDef("input"),)
    has_type_inference = False

    def verify_(self):
        x = expect_tensor(self.input.type, "operand")
        out = expect_tensor(self.result.type, "result")
        if x.element_type is not out.element_type:
            raise VerifyError(f"reshape changes the element type from {x.element_type} to {out.element_type}")
        if x.num_elements != out.num_elements:
            raise VerifyError(
                f"reshape changes the number of elements from {x.num_elements} {shape_str(x.shape)} "
                f"to {out.num_elements} {shape_str(out.shape)}"
            )


@register_op
class TransposeOp(TensorOp):
    name = "tensor.transpose"
    traits = frozenset({Pure, Injective})
    operand_defs = (OperandDef("input"),)
    attr_defs = (AttrDef("perm", INT_ARRAY, REQUIRED),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        x = expect_tensor(operand_types[0], "operand")
        perm = cls.get(attributes, "perm")
        if perm is None:
            raise VerifyError("requires a 'perm' attribute")
        if sorted(perm) != list(range(x.rank)):
            raise VerifyError(f"perm {perm} is not a permutation of the {x.rank} axes of {x}")
        return [TensorType([x.shape[p] for p in perm], x.element_type)]


@register_op
class BroadcastToOp(TensorOp):
    name = "tensor.broadcast_to"
    traits = frozenset({Pure, Injective, Broadcasting})
    operand_defs = (OperandDef("input"),)
    has_type_inference = False

    def verify_(self):
        x = expect_tensor(self.input.type, "operand")
        out = expect_tensor(self.result.type, "result")
        if x.element_type is not out.element_type:
            raise VerifyError(f"broadcast_to changes the element type from {x.element_type} to {out.element_type}")
        if len(x.shape) > len(out.shape) or broadcast_shapes(x.shape, out.shape) != out.shape:
            raise VerifyError(f"shape {shape_str(x.shape)} does not broadcast to {shape_str(out.shape)}")


def slice_bounds(shape, start, stop, step) -> list[tuple[int, int, int, int]]:
    """Per axis (start, stop, step, length) after Python's slice clamping."""
    rank = len(shape)
    step = [1] * rank if step is None else step
    for name, values in (("start", start), ("stop", stop), ("step", step)):
        if len(values) != rank:
            raise VerifyError(f"'{name}' has {len(values)} entries but the operand has rank {rank}")
    bounds = []
    for axis, (dim, a, b, s) in enumerate(zip(shape, start, stop, step)):
        if s == 0:
            raise VerifyError(f"step of axis {axis} is zero")
        lo, hi, st = slice(a, b, s).indices(dim)
        bounds.append((lo, hi, st, len(range(lo, hi, st))))
    return bounds


@register_op
class SliceOp(TensorOp):
    name = "tensor.slice"
    traits = frozenset({Pure, Injective})
    operand_defs = (OperandDef("input"),)
    attr_defs = (
        AttrDef("start", INT_ARRAY, REQUIRED),
        AttrDef("stop", INT_ARRAY, REQUIRED),
        AttrDef("step", INT_ARRAY, None),
    )

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        x = expect_tensor(operand_types[0], "operand")
        start, stop = cls.get(attributes, "start"), cls.get(attributes, "stop")
        if start is None or stop is None:
            raise VerifyError("requires 'start' and 'stop' attributes")
        bounds = slice_bounds(x.shape, start, stop, cls.get(attributes, "step"))
        return [TensorType([b[3] for b in bounds], x.element_type)]

    def bounds(self):
        return slice_bounds(self.input.type.shape, self.attr("start"), self.attr("stop"), self.attr("step"))


@register_op
class ConcatOp(TensorOp):
    name = "tensor.concat"
    traits = frozenset({Pure, Injective})
    operand_defs = (OperandDef("inputs", variadic=True),)
    attr_defs = (AttrDef("axis", INT, 0),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        if not operand_types:
            raise VerifyError("expects at least one operand")
        tensors = [expect_tensor(t, f"operand {i}") for i, t in enumerate(operand_types)]
        element = expect_same_element_type(tensors)
        rank = tensors[0].rank
        axis = normalize_axis(cls.get(attributes, "axis"), rank)
        for i, t in enumerate(tensors):
            if t.rank != rank:
                raise VerifyError(f"operand {i} has rank {t.rank} but operand 0 has rank {rank}")
            for d in range(rank):
                if d != axis and t.shape[d] != tensors[0].shape[d]:
                    raise VerifyError(
                        f"operand {i} of shape {shape_str(t.shape)} differs from operand 0 {shape_str(tensors[0].shape)} off the concat axis {axis}"
                    )
        shape = list(tensors[0].shape)
        shape[axis] = sum(t.shape[axis] for t in tensors)
        return [TensorType(shape, element)]
