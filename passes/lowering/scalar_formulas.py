"""The loop level's scalar semantics of each elementwise tensor op.

`SCALAR_FORMULAS` maps a tensor op name to the `arith`/`math` (and, for
integer `pow`, `loop`) ops that compute one element from scalar operands:
the one place that says what each elementwise op computes at the loop level.
The composite elementwise ops (gelu, sigmoid, silu) are their tensor-level
formula (`dialects/tensor/formulas.py`) built through `FormulaScalars`.
Every backend reaches them through the lowering.
"""

from __future__ import annotations

from typing import Callable

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import ScalarType, f32, i1, index
from fusecc.dialects import arith, loop, math as m
from fusecc.dialects.tensor import formulas



class Scalars:
    """Scalar op helpers on a builder (floats are f32 unless told)."""

    def __init__(self, builder: Builder):
        self.b = builder

    def const(self, value, t: ScalarType = f32) -> Value:
        return self.b.create(arith.ConstantOp, [], {"value": _number_attr(value, t)}).result

    def op(self, op_class, *operands, **attrs) -> Value:
        return self.b.create(op_class, list(operands), attrs or None).result

    def add(self, a, b):
        return self.op(arith.AddOp, a, b)

    def sub(self, a, b):
        return self.op(arith.SubOp, a, b)

    def mul(self, a, b):
        return self.op(arith.MulOp, a, b)

    def div(self, a, b):
        return self.op(arith.DivOp, a, b)

    def fma(self, a, b, c):
        """a·b + c: floats with one rounding (math.fma), integers exactly."""
        if not a.type.is_float:
            return self.add(self.mul(a, b), c)
        return self.op(m.FmaOp, a, b, c)

    def max(self, a, b):
        return self.op(arith.MaxOp, a, b)

    def min(self, a, b):
        return self.op(arith.MinOp, a, b)

    def maximum(self, a, b):
        """IEEE 754-2019 `maximum` (docs/semantics.md): a NaN on either side
        is the result, +0.0 > -0.0. `arith.max` is C's fmaxf, which drops a
        NaN and may return either zero, so floats are compares and selects
        that every backend renders exactly (they vectorise)."""
        if not a.type.is_float:
            return self.max(a, b)
        return self._ordered("gt", a, b, self.add(a, b))

    def minimum(self, a, b):
        """IEEE 754-2019 `minimum`: a NaN on either side is the result,
        -0.0 < +0.0."""
        if not a.type.is_float:
            return self.min(a, b)
        negated_sum = self.op(arith.NegOp, self.add(self.op(arith.NegOp, a), self.op(arith.NegOp, b)))
        return self._ordered("lt", a, b, negated_sum)

    def _ordered(self, wins: str, a, b, tie):
        """`a` where it wins or equals a non-zero `b`, `b` where `b` wins,
        else `tie`: a NaN (a sum with a NaN is NaN) or two zeros, whose sum
        is -0.0 only when both are (-(-a + -b) is +0.0 only when both are +0.0)."""
        a_wins = self.op(arith.CmpOp, a, b, predicate=wins)
        b_wins = self.op(arith.CmpOp, b, a, predicate=wins)
        equal_nonzero = self.op(arith.AndOp, self.op(arith.CmpOp, a, b, predicate="eq"), self.op(arith.CmpOp, a, self.const(0, a.type), predicate="ne"))
        keep_a = self.op(arith.OrOp, a_wins, equal_nonzero)
        return self.op(arith.SelectOp, keep_a, a, self.op(arith.SelectOp, b_wins, b, tie))

    def exp(self, x):
        return self.op(m.ExpOp, x)

    def tanh(self, x):
        return self.op(m.TanhOp, x)

    def cast(self, x, t: ScalarType):
        return self.b.create(arith.CastOp, [x], result_types=[t]).result


def _number_attr(value, t: ScalarType) -> A.Attribute:
    if t is i1:
        return A.BoolAttr(bool(value))
    if t.is_float:
        return A.FloatAttr(float(value), t)
    return A.IntegerAttr(int(value), t)


class FormulaScalars:
    """The arithmetic interface of the composite formulas
    (`dialects/tensor/formulas.py`) on scalar loop IR: gelu, sigmoid and
    silu reach every backend through this one definition."""

    def __init__(self, s: Scalars):
        self.s = s
        self.add, self.sub, self.mul, self.div, self.exp, self.tanh = s.add, s.sub, s.mul, s.div, s.exp, s.tanh

    def const(self, value, like: Value) -> Value:
        return self.s.const(value, like.type)

    def neg(self, x):
        return self.s.op(arith.NegOp, x)

    def erf(self, x):
        return self.s.op(m.ErfOp, x)

    def sqrt(self, x):
        return self.s.op(m.SqrtOp, x)

    def reciprocal(self, x):
        return self.s.div(self.s.const(1.0, x.type), x)


def _abs(s: Scalars, x: Value, op: Operation) -> Value:
    if x.type.is_float:
        return s.op(m.AbsOp, x)
    negative = s.op(arith.CmpOp, x, s.const(0, x.type), predicate="lt")
    return s.op(arith.SelectOp, negative, s.op(arith.NegOp, x), x)


def _cast(s: Scalars, x: Value, op: Operation) -> Value:
    """To the result's storage type (rounding as the reference does), then
    to its compute type, since consumers compute floats in f32."""
    storage = op.result.type.element_type
    value = x if x.type is storage else s.cast(x, storage)
    compute = _compute_type(storage)
    return value if value.type is compute else s.cast(value, compute)


def _relu(s: Scalars, x: Value, op: Operation) -> Value:
    """maximum(x, 0) (docs/semantics.md): 0 where x <= 0 (-0.0 gives +0.0),
    else x (NaN compares false and stays)."""
    zero = s.const(0, x.type)
    return s.op(arith.SelectOp, s.op(arith.CmpOp, x, zero, predicate="le"), zero, x)


# tensor op name -> builds the scalar result from scalar operands. The one
# place that says what each elementwise op computes at the loop level.
SCALAR_FORMULAS: dict[str, Callable[..., Value]] = {
    "tensor.add": lambda s, op, a, b: s.add(a, b),
    "tensor.sub": lambda s, op, a, b: s.sub(a, b),
    "tensor.mul": lambda s, op, a, b: s.mul(a, b),
    "tensor.div": lambda s, op, a, b: s.div(a, b) if a.type.is_float else _int_div(s, a, b),
    "tensor.max": lambda s, op, a, b: s.maximum(a, b),
    "tensor.min": lambda s, op, a, b: s.minimum(a, b),
    "tensor.pow": lambda s, op, a, b: s.op(m.PowOp, a, b) if a.type.is_float else _int_pow(s, a, b),
    "tensor.neg": lambda s, op, x: s.op(arith.NegOp, x),
    "tensor.abs": lambda s, op, x: _abs(s, x, op),
    "tensor.exp": lambda s, op, x: s.exp(x),
    "tensor.log": lambda s, op, x: s.op(m.LogOp, x),
    "tensor.sqrt": lambda s, op, x: s.op(m.SqrtOp, x),
    "tensor.rsqrt": lambda s, op, x: s.op(m.RsqrtOp, x),
    "tensor.tanh": lambda s, op, x: s.tanh(x),
    "tensor.erf": lambda s, op, x: s.op(m.ErfOp, x),
    "tensor.reciprocal": lambda s, op, x: FormulaScalars(s).reciprocal(x),
    "tensor.relu": lambda s, op, x: _relu(s, x, op),
    "tensor.sigmoid": lambda s, op, x: formulas.sigmoid(FormulaScalars(s), x),
    "tensor.silu": lambda s, op, x: formulas.silu(FormulaScalars(s), x),
    "tensor.gelu": lambda s, op, x: formulas.gelu(FormulaScalars(s), x, op.attr("approximate")),
    "tensor.cast": lambda s, op, x: _cast(s, x, op),
    "tensor.cmp": lambda s, op, a, b: s.op(arith.CmpOp, a, b, predicate=op.attr("predicate")),
    "tensor.select": lambda s, op, c, a, b: s.op(arith.SelectOp, c, a, b),
}


def _int_div(s: Scalars, a: Value, b: Value) -> Value:
    """C division, except that x / 0 is 0 as in the reference (no trap)."""
    zero = s.const(0, a.type)
    by_zero = s.op(arith.CmpOp, b, zero, predicate="eq")
    safe = s.op(arith.SelectOp, by_zero, s.const(1, a.type), b)
    return s.op(arith.SelectOp, by_zero, zero, s.div(a, safe))


def _int_pow(s: Scalars, a: Value, b: Value) -> Value:
    """a**b on integers as the reference computes it: by squaring for b >= 0
    (one step per bit of the type, squaring only while bits remain), and
    C-like trunc(1 / a**-b) for b < 0."""
    t = a.type
    zero, one, two = s.const(0, t), s.const(1, t), s.const(2, t)

    def cmp(x, y, predicate):
        return s.op(arith.CmpOp, x, y, predicate=predicate)

    def select(c, x, y):
        return s.op(arith.SelectOp, c, x, y)

    negative = cmp(b, zero, "lt")
    steps = [s.const(v, index) for v in (0, t.bitwidth - 1, 1)]
    squaring = s.b.insert(loop.ForOp.build(*steps, [one, a, select(negative, zero, b)]))
    saved = s.b.insertion_point
    s.b.set_insertion_point(InsertionPoint.at_end(squaring.body))
    _, result, base, e = squaring.body.args
    odd = cmp(s.op(arith.RemOp, e, two), zero, "ne")
    rest = s.div(e, two)
    more = s.b.insert(loop.IfOp.build(cmp(rest, zero, "gt"), [t]))
    s.b.set_insertion_point(InsertionPoint.at_end(more.then_block))
    s.b.create(loop.YieldOp, [s.mul(base, base)])
    s.b.set_insertion_point(InsertionPoint.at_end(more.else_block))
    s.b.create(loop.YieldOp, [base])
    s.b.set_insertion_point(InsertionPoint.at_end(squaring.body))
    s.b.create(loop.YieldOp, [select(odd, s.mul(result, base), result), more.results[0], rest])
    s.b.set_insertion_point(saved)
    minus_one = s.op(arith.NegOp, one)
    even = cmp(s.op(arith.RemOp, b, two), zero, "eq")
    inverse = select(cmp(a, one, "eq"), one, select(cmp(a, minus_one, "eq"), select(even, one, minus_one), zero))
    return select(negative, inverse, squaring.results[0])


# Float ops that compute in f32 whatever their storage type (as the reference does).
def _compute_type(t: ScalarType) -> ScalarType:
    return f32 if t.is_float else t
