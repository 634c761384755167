"""decompose: rewrite composite ops into primitive tensor ops.

`decompose` rewrites all of softmax, layernorm, rmsnorm, gelu, silu,
sigmoid and attention; `decompose{ops=softmax,layernorm}` only those named.
The output follows the reference interpreter's formulas operation by
operation, so for f32 it gives the reference's numbers bit for bit (the one
exception is noted under attention). The shapes are fixed so that later
passes can rely on them:

- Arithmetic is in f32, like the reference: a non-f32 operand is first
  `tensor.cast` to f32 and the result cast back to the op's type.
- Scalars (epsilon, 0.5, 1.0, √2, the scale) are rank-0 splat constants,
  `tensor.constant {value = dense<C> : tensor<f32>}`, broadcast by the
  binary op that uses them.
- Reductions run over one axis with `keepdims = true`; the axis is written
  non-negative.

With `r` the input's last axis and `a` softmax's axis:

    softmax(x)       m = reduce_max(x, [a]); e = exp(x - m); e / reduce_sum(e, [a])
    layernorm(x,g,b) μ = reduce_mean(x, [r]); c = x - μ; v = reduce_mean(c * c, [r])
                     c / sqrt(v + eps) * g + b
    rmsnorm(x, g)    x / sqrt(reduce_mean(x * x, [r]) + eps) * g
    sigmoid(x)       reciprocal(1 + exp(neg(x)))
    silu(x)          x * sigmoid(x)                        (sigmoid decomposed as above)
    gelu(x)          (0.5 * x) * (1 + erf(x / √2))
    gelu(x, "tanh")  (0.5 * x) * (1 + tanh(√(2/π) * (x + 0.044715 * x * x * x)))
    attention        s = matmul(q, k) {transpose_b = true} * scale [+ mask] [+ causal]
                     matmul(softmax(s) over the last axis, v)

The causal mask is one constant `[S, T]` tensor added to the scores: -inf
above the diagonal and -0.0 elsewhere (-0.0, not 0.0, because x + -0.0 is
x exactly, -0.0 included). The reference instead *selects* -inf there, so
the two differ only where a masked score is NaN or +inf (the sum is NaN,
not -inf); with finite inputs they agree bit for bit. The mask has S*T
elements, printed in hex above 64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext, PipelineError
from fusecc.compiler.types import TensorType, f32
from fusecc.dialects import tensor as T
from fusecc.runtime.reference import GELU_TANH_COEFF


class Emitter:
    """Builds the replacement of one op, before it and at its location."""

    def __init__(self, op: Operation):
        self.builder = Builder(InsertionPoint.before(op), op.location)

    def __call__(self, op_class, *operands: Value, result_type=None, **attributes) -> Value:
        result_types = None if result_type is None else [result_type]
        return self.builder.create(op_class, list(operands), attributes or None, result_types).result

    def scalar(self, value: float) -> Value:
        return self(T.ConstantOp, value=A.DenseElementsAttr(np.float32(value), TensorType((), f32)))

    def constant(self, array: np.ndarray) -> Value:
        return self(T.ConstantOp, value=A.DenseElementsAttr(array, TensorType(array.shape, f32)))

    def to_f32(self, value: Value) -> Value:
        t = value.type
        return value if t.element_type is f32 else self(T.CastOp, value, result_type=t.with_element_type(f32))

    def back_to(self, value: Value, wanted: TensorType) -> Value:
        return value if value.type is wanted else self(T.CastOp, value, result_type=wanted)


# --------------------------------------------------------------------------- the formulas


def softmax(e: Emitter, x: Value, axis: int) -> Value:
    m = e(T.ReduceMaxOp, x, axes=[axis], keepdims=True)
    ex = e(T.ExpOp, e(T.SubOp, x, m))
    return e(T.DivOp, ex, e(T.ReduceSumOp, ex, axes=[axis], keepdims=True))


def sigmoid(e: Emitter, x: Value) -> Value:
    return e(T.ReciprocalOp, e(T.AddOp, e.scalar(1.0), e(T.ExpOp, e(T.NegOp, x))))


def gelu(e: Emitter, x: Value, approximate: str) -> Value:
    half_x = e(T.MulOp, e.scalar(0.5), x)
    if approximate == "tanh":
        cube = e(T.MulOp, e(T.MulOp, e(T.MulOp, e.scalar(0.044715), x), x), x)
        inner = e(T.MulOp, e.scalar(GELU_TANH_COEFF), e(T.AddOp, x, cube))
        return e(T.MulOp, half_x, e(T.AddOp, e.scalar(1.0), e(T.TanhOp, inner)))
    erf = e(T.ErfOp, e(T.DivOp, x, e.scalar(math.sqrt(2.0))))
    return e(T.MulOp, half_x, e(T.AddOp, e.scalar(1.0), erf))


def decompose_softmax(e: Emitter, op: Operation) -> Value:
    x = e.to_f32(op.input)
    return softmax(e, x, T.normalize_axis(op.attr("axis"), x.type.rank))


def decompose_layernorm(e: Emitter, op: Operation) -> Value:
    x, gamma, beta = (e.to_f32(v) for v in op.operands)
    last = x.type.rank - 1
    mean = e(T.ReduceMeanOp, x, axes=[last], keepdims=True)
    centred = e(T.SubOp, x, mean)
    var = e(T.ReduceMeanOp, e(T.MulOp, centred, centred), axes=[last], keepdims=True)
    normed = e(T.DivOp, centred, e(T.SqrtOp, e(T.AddOp, var, e.scalar(op.attr("epsilon")))))
    return e(T.AddOp, e(T.MulOp, normed, gamma), beta)


def decompose_rmsnorm(e: Emitter, op: Operation) -> Value:
    x, gamma = (e.to_f32(v) for v in op.operands)
    mean_square = e(T.ReduceMeanOp, e(T.MulOp, x, x), axes=[x.type.rank - 1], keepdims=True)
    rms = e(T.SqrtOp, e(T.AddOp, mean_square, e.scalar(op.attr("epsilon"))))
    return e(T.MulOp, e(T.DivOp, x, rms), gamma)


def decompose_gelu(e: Emitter, op: Operation) -> Value:
    return gelu(e, e.to_f32(op.input), op.attr("approximate"))


def decompose_sigmoid(e: Emitter, op: Operation) -> Value:
    return sigmoid(e, e.to_f32(op.input))


def decompose_silu(e: Emitter, op: Operation) -> Value:
    x = e.to_f32(op.input)
    return e(T.MulOp, x, sigmoid(e, x))


def causal_mask(rows: int, cols: int) -> np.ndarray:
    return np.where(np.triu(np.ones((rows, cols), bool), k=1), np.float32(-np.inf), np.float32(-0.0))


def decompose_attention(e: Emitter, op: Operation) -> Value:
    q, k, v = (e.to_f32(x) for x in (op.query, op.key, op.value))
    scores = e(T.MulOp, e(T.MatmulOp, q, k, transpose_b=True), e.scalar(op.effective_scale()))
    if op.mask is not None:
        scores = e(T.AddOp, scores, e.to_f32(op.mask))
    rows, cols = scores.type.shape[-2:]
    if op.attr("causal") and cols > 1:
        scores = e(T.AddOp, scores, e.constant(causal_mask(rows, cols)))
    return e(T.MatmulOp, softmax(e, scores, scores.type.rank - 1), v)


DECOMPOSITIONS = {
    "softmax": decompose_softmax,
    "layernorm": decompose_layernorm,
    "rmsnorm": decompose_rmsnorm,
    "gelu": decompose_gelu,
    "silu": decompose_silu,
    "sigmoid": decompose_sigmoid,
    "attention": decompose_attention,
}


# --------------------------------------------------------------------------- the pass


@dataclass(frozen=True)
class Decompose(Pass):
    name = "decompose"
    summary = "Rewrite composite ops (softmax, norms, gelu, silu, sigmoid, attention) into primitive tensor ops"

    ops: tuple[str, ...] = ()  # short names (softmax) or op names (tensor.softmax); empty: all

    def __post_init__(self):
        unknown = [n for n in self.ops if n.removeprefix("tensor.") not in DECOMPOSITIONS]
        if unknown:
            raise PipelineError(f"decompose cannot decompose {', '.join(unknown)}; it knows {', '.join(DECOMPOSITIONS)}")

    def selected(self) -> dict[str, object]:
        names = [n.removeprefix("tensor.") for n in self.ops] or list(DECOMPOSITIONS)
        return {"tensor." + n: DECOMPOSITIONS[n] for n in names}

    def run(self, op: Operation, context: PassContext) -> None:
        rules = self.selected()
        count = 0
        for target in op.walk(include_self=False):
            rule = rules.get(target.name)
            if rule is None:
                continue
            e = Emitter(target)
            result = e.back_to(rule(e, target), target.result.type)
            target.result.replace_all_uses_with(result)
            target.erase()
            count += 1
        context.statistics["decompose.ops"] = context.statistics.get("decompose.ops", 0) + count
