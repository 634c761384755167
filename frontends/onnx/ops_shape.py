"""Shape and indexing ops: their shape arguments must be known at import
time (they are, once shape arithmetic is folded); the data may be runtime."""

from __future__ import annotations

import numpy as np

from fusecc.dialects import tensor as T
from fusecc.frontends.onnx.context import shape_of
from fusecc.compiler.types import broadcast_shapes
from fusecc.frontends.onnx.folding import (
    INT64_MAX,
    as_dim,
    broadcast_shape,
    flatten_axis,
    normalized,
    reshape_target,
    slice_per_axis,
    split_sizes,
    squeezed_shape,
    unsqueezed_shape,
)
from fusecc.frontends.onnx.table import translation


def reshaped(cx, x, shape):
    x = cx.value(x)
    if tuple(x.type.shape) == tuple(shape):
        return x
    return cx.emit(T.ReshapeOp, [x], named_dims(shape), result_type=x.type.with_shape(tuple(shape)))


def named_dims(shape) -> dict:
    """`fusecc.dims` naming a result's dynamic dims, for ops whose operands
    cannot tell them in the text (docs/dynamic-shapes.md)."""
    dynamic = [str(d) for d in shape if type(d) is not int]
    return {"fusecc.dims": dynamic} if dynamic else {}


@translation("Reshape", attrs=("allowzero",), constant_inputs=(1,))
def translate_reshape(cx, node, args):
    spec = cx.constant(args[1], "the target shape")
    return [reshaped(cx, args[0], reshape_target(shape_of(args[0]), spec, node.attr("allowzero", 0), cx))]


@translation("Flatten", attrs=("axis",))
def translate_flatten(cx, node, args):
    shape = shape_of(args[0])
    axis = flatten_axis(node.attr("axis", 1), len(shape), cx)
    return [reshaped(cx, args[0], (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))]


@translation("Unsqueeze", constant_inputs=(1,))
def translate_unsqueeze(cx, node, args):
    axes = cx.constant(args[1], "axes")
    return [reshaped(cx, args[0], unsqueezed_shape(shape_of(args[0]), axes.reshape(-1), cx))]


@translation("Squeeze", constant_inputs=(1,))
def translate_squeeze(cx, node, args):
    axes = cx.constant(args[1] if len(args) > 1 else None, "axes")
    return [reshaped(cx, args[0], squeezed_shape(shape_of(args[0]), None if axes is None else axes.reshape(-1), cx))]


@translation("Transpose", attrs=("perm",))
def translate_transpose(cx, node, args):
    rank = len(shape_of(args[0]))
    perm = list(node.attr("perm", range(rank - 1, -1, -1)))
    if perm == list(range(rank)):
        return [args[0]]
    return [cx.emit(T.TransposeOp, [args[0]], {"perm": perm})]


@translation("Expand", constant_inputs=(1,))
def translate_expand(cx, node, args):
    target = cx.constant(args[1], "the target shape")
    x = cx.value(args[0])
    dims = [as_dim(d) for d in target.reshape(-1)]
    if x.type.is_static and all(type(d) is int for d in dims):
        shape = broadcast_shape(x.type.shape, dims, cx)
    else:
        shape = broadcast_shapes(tuple(x.type.shape), tuple(dims))
        if shape is None:
            raise cx.fail(f"shapes {list(x.type.shape)} and {dims} do not broadcast")
    if shape == tuple(x.type.shape):
        return [x]
    return [cx.emit(T.BroadcastToOp, [x], named_dims(shape), result_type=x.type.with_shape(shape))]


@translation("Concat", attrs=("axis",))
def translate_concat(cx, node, args):
    return [cx.emit(T.ConcatOp, list(args), {"axis": node.attr("axis")})]


def sliced(cx, x, start, stop, step):
    shape = shape_of(x)
    full = [d if type(d) is int else INT64_MAX for d in shape]
    if start == [0] * len(shape) and stop == full and step == [1] * len(shape):
        return cx.value(x)
    return cx.emit(T.SliceOp, [x], {"start": start, "stop": stop, "step": step})


@translation("Slice", constant_inputs=(1, 2, 3, 4))
def translate_slice(cx, node, args):
    x, starts, ends, axes, steps = (list(args) + [None] * 5)[:5]
    bounds = [cx.constant(v, what) for v, what in ((starts, "starts"), (ends, "ends"), (axes, "axes"), (steps, "steps"))]
    return [sliced(cx, x, *slice_per_axis(shape_of(x), *bounds, cx))]


@translation("Split", attrs=("axis", "num_outputs"), constant_inputs=(1,))
def translate_split(cx, node, args):
    x = args[0]
    shape = shape_of(x)
    axis = normalized(node.attr("axis", 0), len(shape), cx)
    sizes = split_sizes(node, shape[axis], cx.constant(args[1] if len(args) > 1 else None, "split"), cx)
    outputs, offset = [], 0
    for size in sizes:
        start, stop = [0] * len(shape), [d if type(d) is int else INT64_MAX for d in shape]
        start[axis], stop[axis] = offset, offset + size
        outputs.append(sliced(cx, x, start, stop, [1] * len(shape)))
        offset += size
    return outputs


@translation("Gather", attrs=("axis",))
def translate_gather(cx, node, args):
    data, indices = args
    axis = normalized(node.attr("axis", 0), len(shape_of(data)), cx)
    gather = getattr(T, "GatherOp", None)
    if gather is None:
        raise cx.fail("gathers at run time, and this fusecc has no tensor.gather yet")
    return [cx.emit(gather, [data, indices], {"axis": axis})]


