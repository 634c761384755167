"""Elementwise, comparison and logic ops, with ONNX's semantics.

Binary ops broadcast like numpy in both ONNX and the tensor dialect, so they
map one to one; the logic ops the dialect lacks are selects and compares
on booleans."""

from __future__ import annotations

import numpy as np

from fusecc.dialects import tensor as T
from fusecc.frontends.onnx.context import ONNX_ELEMENT_TYPES, element_of, onnx_type_name, shape_of
from fusecc.frontends.onnx.table import translation

BINARY = {"Add": T.AddOp, "Sub": T.SubOp, "Mul": T.MulOp, "Div": T.DivOp, "Pow": T.PowOp}
UNARY = {
    "Sqrt": T.SqrtOp, "Reciprocal": T.ReciprocalOp, "Exp": T.ExpOp, "Log": T.LogOp, "Tanh": T.TanhOp,
    "Erf": T.ErfOp, "Neg": T.NegOp, "Abs": T.AbsOp, "Relu": T.ReluOp, "Sigmoid": T.SigmoidOp,
}
COMPARE = {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le", "GreaterOrEqual": "ge"}


def same_element(cx, x, like):
    """`x` in the element type of `like` (ONNX's Pow may mix them)."""
    want = element_of(like)
    if element_of(x) is want:
        return x
    if isinstance(x, np.ndarray):
        return x.astype(want.numpy_dtype)
    return cx.emit(T.CastOp, [x], result_type=x.type.with_element_type(want))


@translation(*BINARY)
def translate_binary(cx, node, args):
    a, b = args
    if node.op_type == "Pow":
        b = same_element(cx, b, a)
    return [cx.emit(BINARY[node.op_type], [a, b])]


@translation(*UNARY)
def translate_unary(cx, node, args):
    return [cx.emit(UNARY[node.op_type], [args[0]])]


@translation("Gelu", attrs=("approximate",))
def translate_gelu(cx, node, args):
    return [cx.emit(T.GeluOp, [args[0]], {"approximate": node.attr("approximate", "none")})]


@translation("Max", "Min")
def translate_max_min(cx, node, args):
    op = T.MaxOp if node.op_type == "Max" else T.MinOp
    out = args[0]
    for x in args[1:]:
        out = cx.emit(op, [out, x])
    return [cx.value(out)]


@translation("Clip")
def translate_clip(cx, node, args):
    x, low, high = (list(args) + [None, None])[:3]
    out = x
    if low is not None:
        out = cx.emit(T.MaxOp, [out, low])
    if high is not None:
        out = cx.emit(T.MinOp, [out, high])
    return [cx.value(out)]


@translation(*COMPARE)
def translate_compare(cx, node, args):
    return [cx.emit(T.CmpOp, list(args), {"predicate": COMPARE[node.op_type]})]


@translation("Not")
def translate_not(cx, node, args):
    return [cx.emit(T.CmpOp, [args[0], np.array(False)], {"predicate": "eq"})]


@translation("And", "Or", "Xor")
def translate_logic(cx, node, args):
    a, b = args
    if node.op_type == "Xor":
        return [cx.emit(T.CmpOp, [a, b], {"predicate": "ne"})]
    if node.op_type == "And":
        return [cx.emit(T.SelectOp, [a, b, np.array(False)])]
    return [cx.emit(T.SelectOp, [a, np.array(True), b])]


@translation("Where")
def translate_where(cx, node, args):
    return [cx.emit(T.SelectOp, list(args))]


def check_cast(node):
    to = node.attr("to")
    if to not in ONNX_ELEMENT_TYPES:
        return f"casts to {onnx_type_name(to)}, which fusecc does not have"
    return None


@translation("Cast", attrs=("to", "saturate"), check=check_cast)
def translate_cast(cx, node, args):
    element = ONNX_ELEMENT_TYPES[node.attr("to")]
    x = cx.value(args[0])
    if x.type.element_type is element:
        return [x]
    return [cx.emit(T.CastOp, [x], result_type=x.type.with_element_type(element))]


@translation("Identity")
def translate_identity(cx, node, args):
    return [args[0]]


@translation("Dropout", attrs=("seed",), constant_inputs=(1, 2))
def translate_dropout(cx, node, args):
    """Inference: the input unchanged, and a mask of all true."""
    training = cx.constant(args[2] if len(args) > 2 else None, "training_mode")
    if training is not None and bool(training):
        raise cx.fail("training_mode is true; only inference is supported")
    return [args[0], np.ones(shape_of(args[0]), np.bool_)]
