"""Elementwise aten ops: arithmetic, activations, comparisons, where, casts.

aten ops promote like torch (a Python scalar takes the tensor's type), and
the FakeTensor of each node says the result's dtype, so operands are cast
to it; the tensor dialect then broadcasts like numpy, as torch does."""

from __future__ import annotations

import numpy as np
import torch

from fusecc.compiler.ir import Value
from fusecc.compiler.types import i1
from fusecc.dialects import tensor as T
from fusecc.frontends.torch.context import TORCH_ELEMENT_TYPES, element_of, fake_value
from fusecc.frontends.torch.table import translation

BINARY = {"aten.add": T.AddOp, "aten.sub": T.SubOp, "aten.mul": T.MulOp, "aten.div": T.DivOp,
          "aten.maximum": T.MaxOp, "aten.minimum": T.MinOp}
UNARY = {
    "aten.neg": T.NegOp, "aten.abs": T.AbsOp, "aten.exp": T.ExpOp, "aten.log": T.LogOp, "aten.sqrt": T.SqrtOp,
    "aten.rsqrt": T.RsqrtOp, "aten.tanh": T.TanhOp, "aten.erf": T.ErfOp, "aten.reciprocal": T.ReciprocalOp,
    "aten.relu": T.ReluOp, "aten.sigmoid": T.SigmoidOp, "aten.silu": T.SiluOp,
}
COMPARE = {"aten.eq": "eq", "aten.ne": "ne", "aten.lt": "lt", "aten.le": "le", "aten.gt": "gt", "aten.ge": "ge"}


def packet(cx) -> str:
    target = cx.node.target
    return f"{target.namespace}.{target._opname}"


@translation(*BINARY)
def translate_binary(cx, args, kwargs):
    a, b = args[0], args[1]
    if kwargs.get("rounding_mode") is not None:
        raise cx.unsupported(f"rounding_mode={kwargs['rounding_mode']!r} (only true division is supported)")
    element = cx.result_type().element_type
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    if alpha != 1:
        b = cx.emit(T.MulOp, [cx.cast(b, element), cx.scalar(alpha, element)])
    return cx.emit(BINARY[packet(cx)], [cx.cast(a, element), cx.cast(b, element)])


@translation("aten.rsub")
def translate_rsub(cx, args, kwargs):
    element = cx.result_type().element_type
    a, b = cx.cast(args[0], element), cx.cast(args[1], element)
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    if alpha != 1:
        a = cx.emit(T.MulOp, [a, cx.scalar(alpha, element)])
    return cx.emit(T.SubOp, [b, a])


@translation(*UNARY)
def translate_unary(cx, args, kwargs):
    element = cx.result_type().element_type
    return cx.emit(UNARY[packet(cx)], [cx.cast(args[0], element)])


@translation("aten.gelu")
def translate_gelu(cx, args, kwargs):
    approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    return cx.emit(T.GeluOp, [args[0]], {"approximate": approximate})


@translation("aten.pow")
def translate_pow(cx, args, kwargs):
    """x ** 2 is x * x (exact, as torch computes it); other exponents are C99 pow."""
    element = cx.result_type().element_type
    base, exponent = args
    if not isinstance(exponent, Value) and not isinstance(exponent, np.ndarray) and exponent == 2:
        x = cx.cast(base, element)
        return cx.emit(T.MulOp, [x, x])
    return cx.emit(T.PowOp, [cx.cast(base, element), cx.cast(exponent, element)])


@translation("aten.clamp")
def translate_clamp(cx, args, kwargs):
    low = kwargs.get("min", args[1] if len(args) > 1 else None)
    high = kwargs.get("max", args[2] if len(args) > 2 else None)
    element = cx.result_type().element_type
    out = cx.cast(args[0], element)
    if low is not None:
        out = cx.emit(T.MaxOp, [out, cx.cast(low, element)])
    if high is not None:
        out = cx.emit(T.MinOp, [out, cx.cast(high, element)])
    return out


def common_element(cx, a, b):
    """torch's promotion of two operands (a Python number takes the tensor's type)."""
    dtypes = [fake_value(n).dtype for n in cx.node.args[:2] if isinstance(n, torch.fx.Node)]
    dtype = torch.promote_types(*dtypes) if len(dtypes) == 2 else dtypes[0]
    return TORCH_ELEMENT_TYPES.get(dtype) or element_of(a if isinstance(a, Value) else b)


@translation(*COMPARE)
def translate_compare(cx, args, kwargs):
    a, b = args
    element = common_element(cx, a, b)
    return cx.emit(T.CmpOp, [cx.cast(a, element), cx.cast(b, element)], {"predicate": COMPARE[packet(cx)]})


@translation("aten.logical_not", "aten.bitwise_not")
def translate_not(cx, args, kwargs):
    if element_of(args[0]) is not i1:
        raise cx.unsupported("bitwise not of an integer tensor")
    return cx.emit(T.CmpOp, [args[0], np.array(False)], {"predicate": "eq"})


@translation("aten.logical_and", "aten.bitwise_and", "aten.logical_or", "aten.bitwise_or")
def translate_logic(cx, args, kwargs):
    if any(element_of(x) is not i1 for x in args[:2] if isinstance(x, (Value, np.ndarray))):
        raise cx.unsupported("bitwise logic on integers (only booleans are supported)")
    a, b = (cx.cast(x, i1) for x in args[:2])
    if "and" in packet(cx):
        return cx.emit(T.SelectOp, [a, b, np.array(False)])
    return cx.emit(T.SelectOp, [a, np.array(True), b])


@translation("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def translate_where(cx, args, kwargs):
    element = cx.result_type().element_type
    condition, a, b = args
    return cx.emit(T.SelectOp, [condition, cx.cast(a, element), cx.cast(b, element)])


@translation("aten.masked_fill")
def translate_masked_fill(cx, args, kwargs):
    x, mask, fill = args
    element = cx.result_type().element_type
    return cx.emit(T.SelectOp, [mask, cx.cast(fill, element), cx.cast(x, element)])


@translation("aten._to_copy", "aten.to", "aten.type_as", "prims.convert_element_type")
def translate_cast(cx, args, kwargs):
    return cx.cast(args[0], cx.result_type().element_type)


@translation("aten.full_like", "aten.zeros_like", "aten.ones_like", "aten.empty_like")
def translate_full_like(cx, args, kwargs):
    """A tensor of one value shaped like its input (only the input's shape
    matters): the value broadcast, no constant of the full size."""
    name = packet(cx)
    value = {"aten.zeros_like": 0, "aten.ones_like": 1, "aten.empty_like": 0}.get(name)
    if value is None:
        value = kwargs.get("fill_value", args[1] if len(args) > 1 else None)
    if isinstance(value, (Value, np.ndarray)):
        raise cx.unsupported("a fill value that is a tensor")
    result = cx.result_type()
    return cx.emit(T.BroadcastToOp, [cx.scalar(value, result.element_type)], result_type=result)


@translation("aten.clone", "aten.alias", "aten.detach", "aten.contiguous", "aten.lift_fresh_copy", "aten.dropout")
def translate_identity(cx, args, kwargs):
    if packet(cx) == "aten.dropout" and (kwargs.get("train", args[2] if len(args) > 2 else False)):
        raise cx.unsupported("dropout in training mode (only inference is supported)")
    return args[0]
