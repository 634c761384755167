"""Contractions, normalisations, reductions and attention."""

from __future__ import annotations

import math

import numpy as np

from fusecc.compiler.ir import Value
from fusecc.dialects import tensor as T
from fusecc.frontends.torch.context import shape_of
from fusecc.frontends.torch.ops_shape import axis_of, reshaped
from fusecc.frontends.torch.table import translation


def matmul(cx, a, b):
    """a @ b; a `b` that is a transpose of its last two axes is read
    transposed (linear layers give `mm(x, permute(w, [1, 0]))`)."""
    b = cx.value(b)
    producer = b.defining_op
    if isinstance(producer, T.TransposeOp):
        perm = list(producer.attr("perm"))
        rank = len(perm)
        if rank >= 2 and perm == [*range(rank - 2), rank - 1, rank - 2]:
            return cx.emit(T.MatmulOp, [a, producer.input], {"transpose_b": True})
    return cx.emit(T.MatmulOp, [a, b])


@translation("aten.mm", "aten.bmm", "aten.matmul")
def translate_matmul(cx, args, kwargs):
    return matmul(cx, args[0], args[1])


@translation("aten.addmm")
def translate_addmm(cx, args, kwargs):
    bias, a, b = args[:3]
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    out = matmul(cx, a, b)
    element = out.type.element_type
    if alpha != 1:
        out = cx.emit(T.MulOp, [out, cx.scalar(alpha, element)])
    if beta == 0:
        return out
    if beta != 1:
        bias = cx.emit(T.MulOp, [bias, cx.scalar(beta, element)])
    return cx.emit(T.AddOp, [out, bias])


@translation("aten.linear")
def translate_linear(cx, args, kwargs):
    x, weight = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    out = cx.emit(T.MatmulOp, [x, weight], {"transpose_b": True})
    return out if bias is None else cx.emit(T.AddOp, [out, bias])


@translation("aten._softmax", "aten.softmax.int")
def translate_softmax(cx, args, kwargs):
    x, dim = args[0], args[1]
    if len(args) > 2 and args[2] is True:
        raise cx.unsupported("half_to_float softmax")
    return cx.emit(T.SoftmaxOp, [x], {"axis": axis_of(dim, len(shape_of(x)))})


@translation("aten._log_softmax", "aten.log_softmax.int")
def translate_log_softmax(cx, args, kwargs):
    x, dim = args[0], args[1]
    keep = {"axes": [axis_of(dim, len(shape_of(x)))], "keepdims": True}
    shifted = cx.emit(T.SubOp, [x, cx.emit(T.ReduceMaxOp, [x], keep)])
    total = cx.emit(T.ReduceSumOp, [cx.emit(T.ExpOp, [shifted])], keep)
    return cx.emit(T.SubOp, [shifted, cx.emit(T.LogOp, [total])])


@translation("aten.native_layer_norm", "aten.layer_norm")
def translate_layer_norm(cx, args, kwargs):
    """The normalised tensor; native_layer_norm's mean and rstd (for
    gradients) are left empty, and a graph that uses them is refused at getitem."""
    x, normalized_shape, weight, bias, eps = (list(args) + [None, None, 1e-5])[:5]
    shape = shape_of(x)
    norm = tuple(int(d) for d in normalized_shape)
    element = cx.value(x).type.element_type
    size = int(np.prod(norm))
    weight = np.ones(size, element.numpy_dtype) if weight is None else weight
    bias = np.zeros(size, element.numpy_dtype) if bias is None else bias
    flat = (*shape[: len(shape) - len(norm)], size)
    params = [reshaped(cx, p, (size,)) if len(norm) > 1 else p for p in (weight, bias)]
    out = cx.emit(T.LayerNormOp, [reshaped(cx, x, flat), *params], {"epsilon": float(eps)})
    out = reshaped(cx, out, shape)
    return (out, None, None) if cx.node.target._opname == "native_layer_norm" else out


REDUCE = {"aten.mean": T.ReduceMeanOp, "aten.sum": T.ReduceSumOp, "aten.amax": T.ReduceMaxOp, "aten.amin": T.ReduceMinOp}


@translation(*REDUCE)
def translate_reduce(cx, args, kwargs):
    x = args[0]
    dims = kwargs.get("dim", args[1] if len(args) > 1 else None)
    keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    rank = len(shape_of(x))
    axes = list(range(rank)) if not dims else [axis_of(d, rank) for d in ([dims] if isinstance(dims, int) else dims)]
    element = cx.result_type().element_type
    target = cx.node.target
    return cx.emit(REDUCE[f"{target.namespace}.{target._opname}"], [cx.cast(x, element)], {"axes": axes, "keepdims": bool(keepdim)})


@translation("aten.linalg_vector_norm")
def translate_vector_norm(cx, args, kwargs):
    """‖x‖ over `dim` for ord 2 (sqrt of the sum of squares: F.normalize),
    1 (sum of |x|) and inf (max of |x|)."""
    x = args[0]
    order = kwargs.get("ord", args[1] if len(args) > 1 else 2)
    dims = kwargs.get("dim", args[2] if len(args) > 2 else None)
    keepdim = kwargs.get("keepdim", args[3] if len(args) > 3 else False)
    rank = len(shape_of(x))
    axes = list(range(rank)) if not dims else [axis_of(d, rank) for d in ([dims] if isinstance(dims, int) else dims)]
    attrs = {"axes": axes, "keepdims": bool(keepdim)}
    x = cx.cast(x, cx.result_type().element_type)
    if order == 2:
        return cx.emit(T.SqrtOp, [cx.emit(T.ReduceSumOp, [cx.emit(T.MulOp, [x, x])], attrs)])
    if order == 1:
        return cx.emit(T.ReduceSumOp, [cx.emit(T.AbsOp, [x])], attrs)
    if order == math.inf:
        return cx.emit(T.ReduceMaxOp, [cx.emit(T.AbsOp, [x])], attrs)
    raise cx.unsupported(f"vector norm of order {order} (only 1, 2 and inf are supported)")


def attention(cx, q, k, v, mask, causal, scale):
    """softmax(q kᵀ * scale + mask) v; a boolean mask (True = attend) becomes 0 / -inf."""
    element = cx.value(q).type.element_type
    operands = [q, k, v]
    if mask is not None:
        if isinstance(mask, Value) and mask.type.element_type.name == "i1" or isinstance(mask, np.ndarray) and mask.dtype == np.bool_:
            mask = cx.emit(T.SelectOp, [mask, cx.scalar(0.0, element), cx.scalar(-math.inf, element)])
        operands.append(cx.cast(mask, element))
    attrs = {"causal": bool(causal)}
    if scale is not None:
        attrs["scale"] = float(scale)
    return cx.emit(T.AttentionOp, operands, attrs)


@translation("aten.scaled_dot_product_attention")
def translate_sdpa(cx, args, kwargs):
    q, k, v = args[:3]
    mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
    if kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0):
        raise cx.unsupported("attention dropout (only inference is supported)")
    if kwargs.get("enable_gqa"):
        raise cx.unsupported("grouped-query attention (enable_gqa)")
    return attention(cx, q, k, v, mask, kwargs.get("is_causal", args[5] if len(args) > 5 else False), kwargs.get("scale"))


@translation("aten._scaled_dot_product_flash_attention_for_cpu", "aten._scaled_dot_product_flash_attention")
def translate_flash(cx, args, kwargs):
    """(output, logsumexp, ...): the logsumexp is for gradients, left empty."""
    q, k, v = args[:3]
    if kwargs.get("dropout_p", args[3] if len(args) > 3 else 0.0):
        raise cx.unsupported("attention dropout (only inference is supported)")
    out = attention(cx, q, k, v, kwargs.get("attn_mask"), kwargs.get("is_causal", args[4] if len(args) > 4 else False), kwargs.get("scale"))
    return (out, *[None] * (len(cx.node.meta["val"]) - 1))
