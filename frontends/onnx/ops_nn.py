"""Contractions, normalisations and reductions."""

from __future__ import annotations

import numpy as np

from fusecc.dialects import tensor as T
from fusecc.frontends.onnx.context import element_of, shape_of
from fusecc.frontends.onnx.folding import normalized
from fusecc.frontends.onnx.ops_shape import reshaped
from fusecc.frontends.onnx.table import translation


@translation("MatMul")
def translate_matmul(cx, node, args):
    return [cx.emit(T.MatmulOp, list(args))]


@translation("Gemm", attrs=("alpha", "beta", "transA", "transB"))
def translate_gemm(cx, node, args):
    a, b, c = (list(args) + [None])[:3]
    out = cx.emit(T.MatmulOp, [a, b], {"transpose_a": bool(node.attr("transA", 0)), "transpose_b": bool(node.attr("transB", 0))})
    element = out.type.element_type
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        out = cx.emit(T.MulOp, [out, cx.scalar(alpha, element)])
    if c is None or beta == 0.0:
        return [out]
    if beta != 1.0:
        c = (c * np.asarray(beta, c.dtype)) if isinstance(c, np.ndarray) else cx.emit(T.MulOp, [c, cx.scalar(beta, element)])
    return [cx.emit(T.AddOp, [out, c])]


@translation("Softmax", attrs=("axis",))
def translate_softmax(cx, node, args):
    return [cx.emit(T.SoftmaxOp, [args[0]], {"axis": node.attr("axis", -1)})]


@translation("LogSoftmax", attrs=("axis",))
def translate_log_softmax(cx, node, args):
    """x - max - log(sum(exp(x - max))): exact where log(softmax) underflows."""
    x = args[0]
    axis = normalized(node.attr("axis", -1), len(shape_of(x)), cx)
    keep = {"axes": [axis], "keepdims": True}
    shifted = cx.emit(T.SubOp, [x, cx.emit(T.ReduceMaxOp, [x], keep)])
    total = cx.emit(T.ReduceSumOp, [cx.emit(T.ExpOp, [shifted])], keep)
    return [cx.emit(T.SubOp, [shifted, cx.emit(T.LogOp, [total])])]


def check_layernorm(node):
    if node.uses_output(1) or node.uses_output(2):
        return "its Mean or InvStdDev output is used; fusecc's layernorm returns only the normalised tensor"
    if node.attr("stash_type", 1) != 1:
        return f"stash_type {node.attr('stash_type')} (only 1, statistics in float32, is supported)"
    return None


def flattened_parameter(cx, p, norm_shape):
    """A scale or bias broadcast to the normalised axes, flattened to one."""
    size = int(np.prod(norm_shape))
    if isinstance(p, np.ndarray):
        return np.broadcast_to(p, norm_shape).reshape(size)
    p = cx.value(p)
    if tuple(p.type.shape) != tuple(norm_shape):
        p = cx.emit(T.BroadcastToOp, [p], result_type=p.type.with_shape(tuple(norm_shape)))
    return reshaped(cx, p, (size,))


@translation("LayerNormalization", attrs=("axis", "epsilon", "stash_type"), check=check_layernorm)
def translate_layernorm(cx, node, args):
    x, scale, bias = (list(args) + [None])[:3]
    shape = shape_of(x)
    axis = normalized(node.attr("axis", -1), len(shape), cx)
    norm_shape = shape[axis:]
    if bias is None:
        bias = np.zeros(norm_shape, element_of(x).numpy_dtype)
    epsilon = {"epsilon": float(node.attr("epsilon", 1e-5))}
    if axis == len(shape) - 1:
        return [cx.emit(T.LayerNormOp, [x, scale, bias], epsilon)]
    flat = (*shape[:axis], int(np.prod(norm_shape)))
    params = [flattened_parameter(cx, p, norm_shape) for p in (scale, bias)]
    out = cx.emit(T.LayerNormOp, [reshaped(cx, x, flat), *params], epsilon)
    return [reshaped(cx, out, shape)]


REDUCE = {"ReduceMean": T.ReduceMeanOp, "ReduceSum": T.ReduceSumOp, "ReduceMax": T.ReduceMaxOp, "ReduceMin": T.ReduceMinOp}


@translation(*REDUCE, attrs=("axes", "keepdims", "noop_with_empty_axes"), constant_inputs=(1,))
def translate_reduce(cx, node, args):
    x = args[0]
    axes = node.attr("axes")
    if len(args) > 1 and args[1] is not None:
        axes = cx.constant(args[1], "axes").reshape(-1).tolist()
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(len(shape_of(x))))
    attrs = {"axes": [int(a) for a in axes], "keepdims": bool(node.attr("keepdims", 1))}
    shape = shape_of(x)
    if any(shape[normalized(int(a), len(shape), cx)] == 0 for a in axes):
        return [empty_reduction(cx, node, x, attrs)]
    return [cx.emit(REDUCE[node.op_type], [x], attrs)]


def empty_reduction(cx, node, x, attrs) -> np.ndarray:
    """ONNX defines reductions over nothing: the op's identity (0, -inf for
    a max, +inf for a min; the lowest or highest value of an integer type)."""
    shape = shape_of(x)
    axes = {normalized(a, len(shape), cx) for a in attrs["axes"]}
    out = [1 if i in axes else d for i, d in enumerate(shape)] if attrs["keepdims"] else [d for i, d in enumerate(shape) if i not in axes]
    dtype = element_of(x).numpy_dtype
    if node.op_type == "ReduceMean":
        raise cx.fail("averages over an empty axis")
    if node.op_type == "ReduceSum":
        return np.zeros(out, dtype)
    if dtype.kind == "b":
        return np.full(out, node.op_type == "ReduceMin", dtype)
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    lowest, highest = (-np.inf, np.inf) if dtype.kind == "f" else (info.min, info.max)
    return np.full(out, lowest if node.op_type == "ReduceMax" else highest, dtype)
