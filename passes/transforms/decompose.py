"""decompose: rewrite composite ops into primitive tensor ops.

`decompose` rewrites all of softmax, layernorm, rmsnorm, gelu, silu,
sigmoid and attention; `decompose{ops=softmax,layernorm}` only those named.
The output is the op's own formula (`dialects/tensor/formulas.py`), built
operation by operation through `Emitter`, which implements the formulas'
arithmetic interface with tensor ops; the reference evaluates the same
formula with numpy, so for f32 the decomposition gives the reference's
numbers bit for bit. The shapes are fixed so that later passes can rely on
them:

- Arithmetic is in f32, like the reference: a non-f32 operand is first
  `tensor.cast` to f32 and the result cast back to the op's type.
- Scalars (epsilon, 0.5, 1.0, √2, the scale, -inf) are rank-0 splat
  constants, `tensor.constant {value = dense<C> : tensor<f32>}`, broadcast
  by the op that uses them.
- Reductions run over one axis with `keepdims = true`; the axis is written
  non-negative.
- attention's causal mask is a `tensor.select` of -inf where an `i1`
  constant `[S, T]` is true (above the diagonal), exactly as the reference
  computes it; printed in hex above 64 elements. With one key nothing lies
  above the diagonal and there is no select.

The formulas, with `r` the input's last axis and `a` softmax's axis:

    softmax(x)       m = reduce_max(x, [a]); e = exp(x - m); e / reduce_sum(e, [a])
    layernorm(x,g,b) μ = reduce_mean(x, [r]); c = x - μ; v = reduce_mean(c * c, [r])
                     c / sqrt(v + eps) * g + b
    rmsnorm(x, g)    x / sqrt(reduce_mean(x * x, [r]) + eps) * g
    sigmoid(x)       reciprocal(1 + exp(neg(x)))
    silu(x)          x * sigmoid(x)                        (sigmoid decomposed as above)
    gelu(x)          (0.5 * x) * (1 + erf(x / √2))
    gelu(x, "tanh")  (0.5 * x) * (1 + tanh(√(2/π) * (x + 0.044715 * x * x * x)))
    attention        s = matmul(q, k) {transpose_b = true} * scale [+ mask]
                     [select(causal, -inf, s)]; matmul(softmax(s) over the last axis, v)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.diagnostics import error
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext, PipelineError
from fusecc.compiler.types import TensorType, f32, i1
from fusecc.dialects import tensor as T
from fusecc.dialects.tensor import formulas


class Emitter:
    """Builds the replacement of one op, before it and at its location: the
    formulas' arithmetic interface (`dialects/tensor/formulas.py`) in tensor ops."""

    def __init__(self, op: Operation):
        self.builder = Builder(InsertionPoint.before(op), op.location)

    def __call__(self, op_class, *operands: Value, result_type=None, **attributes) -> Value:
        result_types = None if result_type is None else [result_type]
        return self.builder.create(op_class, list(operands), attributes or None, result_types).result

    def to_f32(self, value: Value) -> Value:
        t = value.type
        return value if t.element_type is f32 else self(T.CastOp, value, result_type=t.with_element_type(f32))

    def back_to(self, value: Value, wanted: TensorType) -> Value:
        return value if value.type is wanted else self(T.CastOp, value, result_type=wanted)

    # --- the arithmetic interface -------------------------------------------
    def const(self, value: float, like: Value | None = None) -> Value:
        return self(T.ConstantOp, value=A.DenseElementsAttr(np.float32(value), TensorType((), f32)))

    def mask(self, array: np.ndarray) -> Value:
        return self(T.ConstantOp, value=A.DenseElementsAttr(array, TensorType(array.shape, i1)))

    def add(self, a, b):
        return self(T.AddOp, a, b)

    def sub(self, a, b):
        return self(T.SubOp, a, b)

    def mul(self, a, b):
        return self(T.MulOp, a, b)

    def div(self, a, b):
        return self(T.DivOp, a, b)

    def neg(self, x):
        return self(T.NegOp, x)

    def exp(self, x):
        return self(T.ExpOp, x)

    def tanh(self, x):
        return self(T.TanhOp, x)

    def erf(self, x):
        return self(T.ErfOp, x)

    def sqrt(self, x):
        return self(T.SqrtOp, x)

    def reciprocal(self, x):
        return self(T.ReciprocalOp, x)

    def reduce_max(self, x, axis: int):
        return self(T.ReduceMaxOp, x, axes=[axis], keepdims=True)

    def reduce_sum(self, x, axis: int):
        return self(T.ReduceSumOp, x, axes=[axis], keepdims=True)

    def reduce_mean(self, x, axis: int):
        return self(T.ReduceMeanOp, x, axes=[axis], keepdims=True)

    def matmul(self, a, b, transpose_b: bool = False):
        return self(T.MatmulOp, a, b, transpose_b=True) if transpose_b else self(T.MatmulOp, a, b)

    def select(self, condition, a, b):
        return self(T.SelectOp, condition, a, b)


# --------------------------------------------------------------------------- the ops' formulas


def decompose_softmax(e: Emitter, op: Operation) -> Value:
    return formulas.softmax(e, e.to_f32(op.input), op.normalized_axis)


def decompose_layernorm(e: Emitter, op: Operation) -> Value:
    x, gamma, beta = (e.to_f32(v) for v in op.operands)
    return formulas.layernorm(e, x, gamma, beta, op.attr("epsilon"), op.normalized_axis)


def decompose_rmsnorm(e: Emitter, op: Operation) -> Value:
    x, gamma = (e.to_f32(v) for v in op.operands)
    return formulas.rmsnorm(e, x, gamma, op.attr("epsilon"), op.normalized_axis)


def decompose_gelu(e: Emitter, op: Operation) -> Value:
    return formulas.gelu(e, e.to_f32(op.input), op.attr("approximate"))


def decompose_sigmoid(e: Emitter, op: Operation) -> Value:
    return formulas.sigmoid(e, e.to_f32(op.input))


def decompose_silu(e: Emitter, op: Operation) -> Value:
    return formulas.silu(e, e.to_f32(op.input))


def fixed_causal_mask(op: Operation) -> bool:
    """A causal attention's mask is a constant of the scores' last two dims,
    so it decomposes only when they are static (not `?`)."""
    return not op.attr("causal") or all(type(d) is int for d in op.result.type.shape[-2:] + op.key.type.shape[-2:-1])


def decompose_attention(e: Emitter, op: Operation) -> Value:
    if not fixed_causal_mask(op):
        raise error(op.location, "a causal attention over '?' sequence lengths cannot be decomposed: its mask needs the sizes (docs/dynamic-shapes.md)")
    q, k, v = (e.to_f32(x) for x in (op.query, op.key, op.value))
    return op.formula(e, q, k, v, None if op.mask is None else e.to_f32(op.mask))


DECOMPOSITIONS = {
    "softmax": decompose_softmax,
    "layernorm": decompose_layernorm,
    "rmsnorm": decompose_rmsnorm,
    "gelu": decompose_gelu,
    "silu": decompose_silu,
    "sigmoid": decompose_sigmoid,
    "attention": decompose_attention,
}


def decompose_op(op: Operation, rule=None) -> None:
    """Replace `op` by its formula in primitive tensor ops, in place (fusion
    calls it for an attention its template cannot hold)."""
    rule = rule or DECOMPOSITIONS[op.name.removeprefix("tensor.")]
    e = Emitter(op)
    result = e.back_to(rule(e, op), op.result.type)
    op.result.replace_all_uses_with(result)
    op.erase()


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
            if rule is None or (target.name == "tensor.attention" and not fixed_causal_mask(target)):
                continue  # a causal attention over `?` lengths stays whole
            decompose_op(target, rule)
            count += 1
        context.statistics["decompose.ops"] = context.statistics.get("decompose.ops", 0) + count
