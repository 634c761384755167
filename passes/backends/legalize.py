"""legalize: make every target-sensitive rule of the loop level explicit.

After this pass a backend renders each `arith`/`math` op in its most direct
form (`sdiv`, `fptosi`, C `/` and casts) and makes no semantic decision of
its own: docs/legalize.md lists the rules, the behaviour chosen for each and
the legal form. The loop interpreter gives the same bits before and after.

  1. bf16/f16: arithmetic on narrow floats computes in f32 and rounds once
     (`arith.cast` to the narrow type is the rounding op); casts between a
     narrow float and anything but f32 go through f32.
  2. i1 arithmetic becomes and/or/xor.
  3. Integer division and remainder never see a divisor of 0 or -1.
  4. float -> int casts saturate (NaN gives 0) by explicit selects; the
     cast that remains only sees values in range. x -> i1 is `x != 0`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.compiler.rewriter import is_trivially_dead
from fusecc.compiler.types import ScalarType, bf16, f16, f32, i1, round_to_bf16
from fusecc.dialects import arith, loop
from fusecc.passes.backends.hardware import pass_hardware

NARROW_FLOATS = (bf16, f16)
# ops that hold narrow floats without computing on them
CARRIES_NARROW = {"arith.constant", "arith.cast", "arith.select"}
# i1 arithmetic as logic (docs/legalize.md, rule 2); None: the constant false
I1_LOGIC = {
    "arith.add": arith.OrOp,
    "arith.max": arith.OrOp,
    "arith.mul": arith.AndOp,
    "arith.min": arith.AndOp,
    "arith.div": arith.AndOp,
    "arith.sub": arith.XorOp,
    "arith.rem": None,
}


def is_narrow(t) -> bool:
    return t is bf16 or t is f16


class Rewriter:
    """Builds the replacement of one op, just before it."""

    def __init__(self, op: Operation):
        self.b = Builder(InsertionPoint.before(op), op.location)

    def const(self, value, t: ScalarType) -> Value:
        return self.b.insert(arith.ConstantOp.of(value, t, self.b.location)).result

    def op(self, op_class, *operands, **attributes) -> Value:
        return self.b.create(op_class, list(operands), attributes or None).result

    def cmp(self, a: Value, b: Value, predicate: str) -> Value:
        return self.op(arith.CmpOp, a, b, predicate=predicate)

    def select(self, c: Value, a: Value, b: Value) -> Value:
        return self.op(arith.SelectOp, c, a, b)

    def cast(self, x: Value, t: ScalarType) -> Value:
        """A cast to `t`, itself legalized."""
        if x.type is t:
            return x
        return legal_cast(self, x, t)

    def like(self, op: Operation, operands: list[Value], result_type: ScalarType) -> Value:
        """`op` again, on other operands."""
        return self.b.create(type(op), operands, dict(op.attributes) or None, [result_type]).result


# --------------------------------------------------------------------------- rules


def promote_narrow(r: Rewriter, op: Operation) -> Value:
    """Rule 1: compute in f32, round once to the result's type."""
    wide = [r.cast(v, f32) if is_narrow(v.type) else v for v in op.operands]
    result_type = op.result.type
    value = r.like(op, wide, f32 if is_narrow(result_type) else result_type)
    return r.cast(value, result_type) if is_narrow(result_type) else value


def i1_logic(r: Rewriter, op: Operation) -> Value:
    """Rule 2."""
    if op.name == "arith.neg":
        return op.operands[0]
    logic = I1_LOGIC[op.name]
    if logic is None:
        return r.const(False, i1)
    return r.op(logic, *op.operands)


def safe_division(r: Rewriter, op: Operation) -> Value | None:
    """Rule 3: x / 0 = 0, x % 0 = 0, x / -1 = -x (wrapping), x % -1 = 0."""
    a, b = op.operands
    t = a.type
    if is_safe_divisor(b):
        return None
    zero, one = r.const(0, t), r.const(1, t)
    is_zero = r.cmp(b, zero, "eq")
    is_minus_one = r.cmp(b, r.const(-1, t), "eq")
    bad = r.op(arith.OrOp, is_zero, is_minus_one)
    quotient = r.like(op, [a, r.select(bad, one, b)], t)
    if op.name == "arith.rem":
        return r.select(bad, zero, quotient)
    negated = r.op(arith.SubOp, zero, a)
    return r.select(is_zero, zero, r.select(is_minus_one, negated, quotient))


def legal_cast(r: Rewriter, x: Value, t: ScalarType) -> Value:
    """Rules 1 and 4 for `arith.cast x -> t`."""
    source = x.type
    folded = folded_float_cast(x, t)
    if folded is not None:
        return r.const(folded, t)
    if is_narrow(source) and t is not f32:  # widening to f32 is exact
        return r.cast(r.cast(x, f32), t)
    if is_narrow(t) and source is not f32:
        return r.cast(r.cast(x, f32), t)
    if is_narrow(t):
        inner = x.defining_op
        if isinstance(inner, arith.CastOp) and inner.input.type is t:  # round trip: exact
            return inner.input
    if t is i1 and source is not i1:
        return r.cmp(x, r.const(0, source), "ne")
    if source.is_float and not t.is_float:
        return saturating_cast(r, x, t)
    return r.b.create(arith.CastOp, [x], result_types=[t]).result


def folded_float_cast(x: Value, t: ScalarType) -> float | None:
    """A cast of a constant to a float type, done here as the interpreter
    does it (through f32, then rounded to t), so that no rounding of a
    constant is left for run time."""
    k = constant_value(x)
    if k is None or not t.is_float or x.type is i1:
        return None
    value = np.float32(k)
    if t is bf16:
        return float(round_to_bf16(np.array([value], dtype=np.float32))[0])
    return float(t.numpy_dtype.type(value))


def saturating_cast(r: Rewriter, x: Value, t: ScalarType) -> Value:
    """Rule 4: truncate toward zero; NaN -> 0, >= 2^(w-1) -> max, < -2^(w-1) -> min."""
    source = x.type
    limit = 1 << (t.bitwidth - 1)
    is_nan = r.cmp(x, x, "ne")
    too_high = r.cmp(x, r.const(float(limit), source), "ge")
    too_low = r.cmp(x, r.const(-float(limit), source), "lt")
    outside = r.op(arith.OrOp, r.op(arith.OrOp, is_nan, too_high), too_low)
    inside = r.select(outside, r.const(0.0, source), x)
    truncated = r.b.create(arith.CastOp, [inside], result_types=[t]).result
    clamped = r.select(too_low, r.const(-limit, t), truncated)
    clamped = r.select(too_high, r.const(limit - 1, t), clamped)
    return r.select(is_nan, r.const(0, t), clamped)


def is_safe_divisor(v: Value) -> bool:
    """Never 0 or -1: a constant other than those, or a value this pass
    guarded: select(x == 0 or x == -1, 1, x)."""
    k = constant_value(v)
    if k is not None:
        return k not in (0, -1)
    op = v.defining_op
    if not isinstance(op, arith.SelectOp) or constant_value(op.true_value) != 1:
        return False
    x = op.false_value
    return is_or_of(op.condition, [(x, 0, "eq"), (x, -1, "eq")])


def is_in_range(v: Value, bits: int) -> bool:
    """A value this pass clamped for a cast to a `bits`-wide integer:
    select(x != x or x >= 2^(bits-1) or x < -2^(bits-1), 0.0, x)."""
    op = v.defining_op
    if not isinstance(op, arith.SelectOp) or constant_value(op.true_value) != 0:
        return False
    x, limit = op.false_value, float(1 << (bits - 1))
    return is_or_of(op.condition, [(x, x, "ne"), (x, limit, "ge"), (x, -limit, "lt")])


def is_or_of(condition: Value, comparisons: list) -> bool:
    """`condition` is the left-nested `arith.or` of exactly these
    comparisons (lhs, rhs value or constant, predicate), in order."""
    for lhs, rhs, predicate in reversed(comparisons[1:]):
        op = condition.defining_op
        if not isinstance(op, arith.OrOp) or not is_comparison(op.rhs, lhs, rhs, predicate):
            return False
        condition = op.lhs
    return is_comparison(condition, *comparisons[0])


def is_comparison(v: Value, lhs: Value, rhs, predicate: str) -> bool:
    op = v.defining_op
    if not isinstance(op, arith.CmpOp) or op.lhs is not lhs or op.predicate != predicate:
        return False
    return op.rhs is rhs if isinstance(rhs, Value) else constant_value(op.rhs) == rhs


def constant_value(v: Value):
    op = v.defining_op
    if isinstance(op, arith.ConstantOp):
        return op.attr("value").value
    return None


def cast_needs_rewrite(op: Operation) -> bool:
    source, t = op.input.type, op.result.type
    if folded_float_cast(op.input, t) is not None:
        return True
    if is_narrow(source) or is_narrow(t):
        if source is not f32 and t is not f32:  # goes through f32
            return True
        inner = op.input.defining_op  # a round trip through f32 folds away
        return is_narrow(t) and isinstance(inner, arith.CastOp) and inner.input.type is t
    if t is i1:
        return source is not i1
    return source.is_float and not t.is_float and not is_in_range(op.input, t.bitwidth)


def legalize_op(op: Operation) -> Value | None:
    """The legal replacement of `op`'s result, or None when it is legal."""
    name = op.name
    if not (name.startswith("arith.") or name.startswith("math.")) or name == "arith.constant":
        return None
    if name == "arith.cast":
        if op.input.type is op.result.type:
            return op.input
        return legal_cast(Rewriter(op), op.input, op.result.type) if cast_needs_rewrite(op) else None
    operand_types = [v.type for v in op.operands]
    if name not in CARRIES_NARROW and any(is_narrow(t) for t in operand_types + [op.result.type]):
        return promote_narrow(Rewriter(op), op)
    if operand_types and operand_types[-1] is i1 and (name in I1_LOGIC or name == "arith.neg"):
        return i1_logic(Rewriter(op), op)
    if name in ("arith.div", "arith.rem") and operand_types[0].is_integer:
        return safe_division(Rewriter(op), op)
    return None


def legalize_kernel(kernel: Operation) -> int:
    """Legalizes every op of `kernel` (once: replacements are built legal);
    returns how many ops were rewritten."""
    rewritten = 0
    for op in kernel.walk(include_self=False):
        replacement = legalize_op(op)
        if replacement is None:
            continue
        if replacement.name_hint is None:  # the C and LLVM keep the source's names
            replacement.name_hint = op.result.name_hint
        op.result.replace_all_uses_with(replacement)
        op.erase()
        rewritten += 1
    for op in reversed(kernel.walk(include_self=False)):  # what folded casts left unused
        if isinstance(op, (arith.CastOp, arith.ConstantOp)) and is_trivially_dead(op):
            op.erase()
    return rewritten


@dataclass(frozen=True)
class Legalize(Pass):
    name = "legalize"
    summary = "Make the loop level's target-sensitive rules explicit ops (docs/legalize.md)"
    anchor = "builtin.module"

    target: str = ""

    def run(self, module: Operation, context: PassContext) -> None:
        pass_hardware(self, module, context)  # the rules are the same for every known target
        rewritten = sum(legalize_kernel(op) for op in module.body if isinstance(op, loop.KernelOp))
        context.statistics["legalize.rewritten"] = context.statistics.get("legalize.rewritten", 0) + rewritten


__all__ = ["Legalize", "legalize_kernel", "legalize_op"]
