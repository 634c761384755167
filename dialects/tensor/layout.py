"""Layout ops (injective: each result element is one operand element):
reshape, transpose, broadcast_to, slice, concat, gather."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fusecc.compiler.dims import dim_symbol, dims_equal, is_static, is_unbound, normalize_dim, product, require_equal, require_whole, sympy
from fusecc.compiler import attributes as A
from fusecc.compiler.ir import VerifyError
from fusecc.compiler.op_definitions import AttrKind, INT, INT_ARRAY, REQUIRED, AttrDef, OperandDef, register_op
from fusecc.compiler.traits import Broadcasting, Injective, Pure
from fusecc.compiler.types import TensorType, broadcast_shapes, i32, i64

from .base import TensorOp, expect_same_element_type, expect_tensor, normalize_axis, shape_str

# Layout results are made C-contiguous with np.asarray(order="C"), not
# np.ascontiguousarray, which turns a rank-0 array into shape (1,).


@register_op
class ReshapeOp(TensorOp):
    """x.reshape(result shape): the same elements in row-major order."""

    name = "tensor.reshape"
    traits = frozenset({Pure, Injective})
    operand_defs = (OperandDef("input"),)
    has_type_inference = False

    def verify_(self):
        x = expect_tensor(self.input.type, "operand")
        out = expect_tensor(self.result.type, "result")
        if x.element_type is not out.element_type:
            raise VerifyError(f"reshape changes the element type from {x.element_type} to {out.element_type}")
        if dims_equal(x.num_elements, out.num_elements) is False:
            raise VerifyError(
                f"reshape changes the number of elements from {x.num_elements} {shape_str(x.shape)} "
                f"to {out.num_elements} {shape_str(out.shape)}"
            )
        require_equal(x.num_elements, out.num_elements, "reshape must keep the number of elements")
        for axis, d in enumerate(out.shape):
            require_whole(d, f"reshape result dim {axis} ({d}) must be a whole number")

    @classmethod
    def refine_result_types(cls, operand_types, attributes, declared):
        """The `?` dims of the result (docs/dynamic-shapes.md): each but the
        last keeps the operand's dim at the same axis, the last is what the
        element count leaves (as -1 in numpy's reshape)."""
        x = expect_tensor(operand_types[0], "operand")
        out = expect_tensor(declared[0], "result")
        unknown = [axis for axis, d in enumerate(out.shape) if is_unbound(d)]
        if not unknown:
            return declared
        shape = list(out.shape)
        for axis in unknown[:-1]:
            if axis >= x.rank or is_static(x.shape[axis]):
                raise VerifyError(
                    f"cannot tell the size of result dim {axis}: a '?' before the last must keep the operand's dynamic dim at its axis"
                )
            shape[axis] = x.shape[axis]
        others = product(d for axis, d in enumerate(shape) if axis != unknown[-1])
        if others == 0:
            raise VerifyError("cannot tell the size of the '?' dim of a reshape to zero elements")
        total = x.num_elements
        if is_static(total) and is_static(others):
            if total % others:
                raise VerifyError(f"{total} elements do not divide into {others} {shape_str(out.shape)}")
            shape[unknown[-1]] = total // others
        else:
            shape[unknown[-1]] = normalize_dim(sympy().cancel(total / others))
        return [TensorType(shape, out.element_type)]

    def fold(self, constant_operands):
        return [self.input] if self.input.type is self.result.type else None

    def evaluate(self, args):
        return [args[0].reshape(self.result.type.shape)]

    def evaluate_dynamic(self, args, result_shapes):
        return [args[0].reshape(result_shapes[0])]


@register_op
class TransposeOp(TensorOp):
    """np.transpose(x, perm)."""

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

    def evaluate(self, args):
        return [np.asarray(np.transpose(args[0], self.attr("perm")), order="C")]


@register_op
class BroadcastToOp(TensorOp):
    """np.broadcast_to(x, result shape)."""

    name = "tensor.broadcast_to"
    traits = frozenset({Pure, Injective, Broadcasting})
    operand_defs = (OperandDef("input"),)
    has_type_inference = False

    def verify_(self):
        x = expect_tensor(self.input.type, "operand")
        out = expect_tensor(self.result.type, "result")
        if x.element_type is not out.element_type:
            raise VerifyError(f"broadcast_to changes the element type from {x.element_type} to {out.element_type}")
        if len(x.shape) > len(out.shape):
            raise VerifyError(f"shape {shape_str(x.shape)} does not broadcast to {shape_str(out.shape)}")
        if x.is_static and out.is_static:
            if broadcast_shapes(x.shape, out.shape) != out.shape:
                raise VerifyError(f"shape {shape_str(x.shape)} does not broadcast to {shape_str(out.shape)}")
            return
        for axis, d in enumerate(x.shape):
            target = out.shape[axis + out.rank - x.rank]
            if d != 1 and dims_equal(d, target) is False:
                raise VerifyError(f"shape {shape_str(x.shape)} does not broadcast to {shape_str(out.shape)}")
            if d != 1:
                require_equal(d, target, f"dim {axis} of the operand must equal the result's")

    @classmethod
    def refine_result_types(cls, operand_types, attributes, declared):
        """A `?` dim of the result is the operand's dim at the same axis
        (counted from the right): nothing else could tell its size."""
        x = expect_tensor(operand_types[0], "operand")
        out = expect_tensor(declared[0], "result")
        shape = list(out.shape)
        for axis, d in enumerate(out.shape):
            if not is_unbound(d):
                continue
            source = axis - (out.rank - x.rank)
            if source < 0 or is_static(x.shape[source]):
                raise VerifyError(f"cannot tell the size of result dim {axis}: a '?' must keep a dynamic dim of the operand")
            shape[axis] = x.shape[source]
        return [TensorType(shape, out.element_type)]

    def fold(self, constant_operands):
        return [self.input] if self.input.type is self.result.type else None

    def evaluate(self, args):
        return [np.asarray(np.broadcast_to(args[0], self.result.type.shape), order="C")]

    def evaluate_dynamic(self, args, result_shapes):
        return [np.asarray(np.broadcast_to(args[0], result_shapes[0]), order="C")]


# --------------------------------------------------------------------------- slice


class SliceAxis(NamedTuple):
    """One axis of a slice, normalised as Python's `slice.indices` does:
    the elements start, start + step, ..., `length` of them."""

    start: int
    step: int
    length: int

    def as_slice(self) -> slice:
        """The numpy slice of exactly these elements. The end is written
        out of the element count, not taken from `slice.indices`: for a
        negative step that runs past index 0 its stop is -1, which numpy
        would read as the last element."""
        if self.length == 0:
            return slice(0, 0)  # slice.indices may give start -1 here too
        stop = self.start + self.length * self.step
        return slice(self.start, stop if stop >= 0 else None, self.step)


def slice_bounds(shape, start, stop, step) -> list[SliceAxis]:
    """Per axis the normalised slice (Python's clamping of start and stop).
    A stop may name a dim of the function (`"S"`, docs/dynamic-shapes.md)."""
    rank = len(shape)
    step = [1] * rank if step is None else step
    for name, values in (("start", start), ("stop", stop), ("step", step)):
        if len(values) != rank:
            raise VerifyError(f"'{name}' has {len(values)} entries but the operand has rank {rank}")
    bounds = []
    for axis, (dim, a, b, s) in enumerate(zip(shape, start, stop, step)):
        if s == 0:
            raise VerifyError(f"step of axis {axis} is zero")
        if isinstance(a, str):
            raise VerifyError(f"start of axis {axis} names a dim ('{a}'); only a stop may")
        if isinstance(b, str):
            if s < 0 or not b.isidentifier():
                raise VerifyError(f"stop of axis {axis} ('{b}') must name a dim, with a positive step")
            b = dim_symbol(b)
        if not is_static(dim) or not is_static(b):
            bounds.append(_dynamic_slice_axis(dim, a, b, s))
            continue
        elements = range(*slice(a, b, s).indices(dim))
        bounds.append(SliceAxis(elements.start, s, len(elements)))
    return bounds


# A stop this far out means "to the end" (ONNX writes INT64_MAX, as do the
# passes through TO_THE_END): a dynamic dim is assumed smaller, which keeps
# the length a plain expression.
_END_THRESHOLD = 1 << 31
TO_THE_END = (1 << 63) - 1


def _dynamic_slice_axis(dim, a: int, b: int, s: int) -> SliceAxis:
    """Python's `slice(a, b, s).indices(dim)` with `dim` an expression."""
    Max, Min = sympy().Max, sympy().Min
    if s > 0:
        start = Min(a, dim) if a >= 0 else Max(a + dim, 0)
        if not is_static(b):  # a named dim (positive)
            stop = Min(b, dim)
        else:
            stop = dim if b >= _END_THRESHOLD else Min(b, dim) if b >= 0 else Max(b + dim, 0)
    else:
        start = Min(a, dim - 1) if a >= 0 else Max(a + dim, -1)
        stop = -1 if b <= -_END_THRESHOLD else Min(b, dim - 1) if b >= 0 else Max(b + dim, -1)
    length = Max(0, sympy().ceiling((stop - start) / s))
    return SliceAxis(normalize_dim(start), s, normalize_dim(length))


# A slice's stop entries: integers, or the name of a dim of the function.
BOUND_ARRAY = AttrKind(
    "array of integers or dim names",
    lambda a: isinstance(a, A.ArrayAttr) and all(isinstance(e, (A.IntegerAttr, A.StringAttr)) for e in a.elements),
    lambda a: [e.value for e in a.elements],
)


@register_op
class SliceOp(TensorOp):
    """x[start:stop:step] on each axis (Python's clamping; `step` defaults to 1, may be negative; a stop may name a `?` dim, e.g. `"S"`)."""

    name = "tensor.slice"
    traits = frozenset({Pure, Injective})
    operand_defs = (OperandDef("input"),)
    attr_defs = (
        AttrDef("start", INT_ARRAY, REQUIRED),
        AttrDef("stop", BOUND_ARRAY, REQUIRED),
        AttrDef("step", INT_ARRAY, None),
    )

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        x = expect_tensor(operand_types[0], "operand")
        start, stop = cls.get(attributes, "start"), cls.get(attributes, "stop")
        if start is None or stop is None:
            raise VerifyError("requires 'start' and 'stop' attributes")
        bounds = slice_bounds(x.shape, start, stop, cls.get(attributes, "step"))
        return [TensorType([b.length for b in bounds], x.element_type)]

    def bounds(self) -> list[SliceAxis]:
        return slice_bounds(self.input.type.shape, self.attr("start"), self.attr("stop"), self.attr("step"))

    def evaluate(self, args):
        # The bounds of the run's shape: the type may have `?` dims.
        bounds = slice_bounds(args[0].shape, self.attr("start"), self.attr("stop"), self.attr("step"))
        return [np.asarray(args[0][tuple(axis.as_slice() for axis in bounds)], order="C")]

    def evaluate_dynamic(self, args, result_shapes):
        """A stop that names a dim takes its length from the run's result shape."""
        start = self.attr("start")
        stop = [
            slice(a, None).indices(dim)[0] + length if isinstance(b, str) else b
            for a, b, dim, length in zip(start, self.attr("stop"), args[0].shape, result_shapes[0])
        ]
        bounds = slice_bounds(args[0].shape, start, stop, self.attr("step"))
        return [np.asarray(args[0][tuple(axis.as_slice() for axis in bounds)], order="C")]


# --------------------------------------------------------------------------- concat, gather


@register_op
class ConcatOp(TensorOp):
    """np.concatenate(inputs, axis)."""

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
                if d != axis and dims_equal(t.shape[d], tensors[0].shape[d]) is False:
                    raise VerifyError(
                        f"operand {i} of shape {shape_str(t.shape)} differs from operand 0 {shape_str(tensors[0].shape)} off the concat axis {axis}"
                    )
                if d != axis:
                    require_equal(t.shape[d], tensors[0].shape[d], f"dim {d} of operand {i} and operand 0 must be equal off the concat axis")
        shape = list(tensors[0].shape)
        shape[axis] = normalize_dim(sum(t.shape[axis] for t in tensors))
        return [TensorType(shape, element)]

    def evaluate(self, args):
        return [np.concatenate(args, axis=self.attr("axis"))]


def gather_index(indices: np.ndarray, length: int) -> np.ndarray:
    """The element each index reads on an axis of `length` elements: a
    negative index counts from the end (i + length), and the result is then
    clamped to [0, length - 1], so an index out of range reads the nearest
    end (-length - 3 reads element 0, length + 3 the last). Backends compute
    the same with one select and a min/max pair (docs/semantics.md)."""
    wide = indices.astype(np.int64)
    return np.clip(np.where(wide < 0, wide + length, wide), 0, length - 1)


@register_op
class GatherOp(TensorOp):
    """np.take(data, indices, axis), with out-of-range indices clamped
    (`gather_index`). Injective: each result element reads one element of
    `data` (at an address loaded from `indices`), so it fuses as a producer
    (an embedding lookup, the position add and the layernorm are one group)."""

    name = "tensor.gather"
    traits = frozenset({Pure, Injective})
    operand_defs = (OperandDef("data"), OperandDef("indices"))
    attr_defs = (AttrDef("axis", INT, 0),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        data = expect_tensor(operand_types[0], "data")
        indices = expect_tensor(operand_types[1], "indices")
        if indices.element_type not in (i32, i64):
            raise VerifyError(f"indices must have element type i32 or i64, but have {indices.element_type}")
        axis = normalize_axis(cls.get(attributes, "axis"), data.rank)
        if data.shape[axis] == 0 and indices.num_elements > 0:
            raise VerifyError(f"cannot gather from axis {axis} of {data}, which has no elements")
        return [TensorType((*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]), data.element_type)]

    @property
    def normalized_axis(self) -> int:
        return normalize_axis(self.attr("axis"), self.data.type.rank)

    def evaluate(self, args):
        data, indices = args
        axis = self.normalized_axis
        if indices.size == 0:
            return [np.zeros((*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]), data.dtype)]
        return [np.asarray(np.take(data, gather_index(indices, data.shape[axis]), axis=axis), order="C")]


__all__ = [
    "ReshapeOp",
    "TransposeOp",
    "BroadcastToOp",
    "SliceAxis",
    "slice_bounds",
    "TO_THE_END",
    "SliceOp",
    "ConcatOp",
    "gather_index",
    "GatherOp",
]
