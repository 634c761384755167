"""canonicalize: fold constants and simplify tensor ops, to a fixed point.

All of it runs through the greedy driver of `compiler.rewriter`, which also
erases pure ops that become unused.

Where the rules live: every tensor-dialect simplification that rewrites
several ops is a small `RewritePattern` in this module (one table to read,
as in tinygrad); what one op computes is the op's own: its `fold` hook (a
cast, reshape or broadcast_to to its operand's own type is that operand)
and its `evaluate` hook, the numbers the reference interpreter uses too.

Rules (x is any value, c a constant; "splat" means every element equal):

- `op.fold(constants)` first, for any op that defines it.
- constant folding: a pure op whose operands are all constants becomes a
  `tensor.constant` holding `op.evaluate(operand arrays)`.
  Results with more than `max-fold-elements` elements (default 4096) are
  folded only when they are splats (which print as one number), so that
  transposing or scaling a weight never copies it into the IR; a large
  splat result is computed only for elementwise, layout and reduction ops.
  Operands outside the op's domain (`DomainError`, e.g. a maximum over an
  empty axis) leave the op for run time to report.
- identities with a splat constant, exact in IEEE arithmetic:
  `x*1`, `1*x`, `x/1`, `x-0.0`, `x+(-0.0)`, `(-0.0)+x`, and for integers
  also `x+0`, `0+x`, `x-0`. `x+(+0.0)` is *not* exact for floats
  (-0.0 + 0.0 = +0.0, which `1/x` tells apart) and folds only with the
  option `no-signed-zeros` (MLIR's `nsz`). When x is smaller than the
  result (the constant broadcasts it), the op becomes `broadcast_to(x)`.
- `x*0` and `0*x` become a zero constant for integers only: for floats it
  is wrong for NaN, ±inf and the sign of -x.
- `transpose(transpose(x, p), q)` becomes `transpose(x, p∘q)`; an
  identity permutation disappears.
- `reshape(reshape(x))` becomes one reshape; `reshape`, `broadcast_to` and
  `cast` to the operand's own type disappear;
  `broadcast_to(broadcast_to(x))` becomes one broadcast_to.
- `broadcast_to(splat)` becomes a splat constant of the result shape (a
  case of constant folding).

The driver has no sweep count (MLIR's `max-iterations`): it revisits only
ops near a change. `max-rewrites` bounds the rewrites instead (-1: the
driver's default of 50 per op); exceeding it is a compiler bug.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.compiler.rewriter import PatternRewriter, RewritePattern, apply_patterns_greedily
from fusecc.compiler.traits import ConstantLike, Elementwise, Injective, Pure, Reduction
from fusecc.compiler.types import TensorType
from fusecc.dialects.tensor import BroadcastToOp, ConstantOp, DomainError, TransposeOp


# --------------------------------------------------------------------------- constants


def constant_value(value: Value) -> A.DenseElementsAttr | None:
    """The elements of `value` when a constant op defines it."""
    op = value.defining_op
    if op is None or not op.has_trait(ConstantLike):
        return None
    found = op.attributes.get("value")
    return found if isinstance(found, A.DenseElementsAttr) else None


def splat_value(value: Value) -> Any:
    """The one element of a splat constant, or None."""
    attr = constant_value(value)
    if attr is None or not attr.is_splat:
        return None
    return attr.splat_value()


def materialize(rewriter: PatternRewriter, value: A.DenseElementsAttr, location) -> Value:
    return rewriter.create(ConstantOp, [], {"value": value}, location=location).result


def replace_with(rewriter: PatternRewriter, op: Operation, x: Value) -> None:
    """Replace op's single result by x, broadcasting x when it is smaller."""
    wanted = op.result.type
    if x.type is wanted:
        rewriter.replace_op(op, [x])
    else:
        rewriter.replace_op(op, rewriter.create(BroadcastToOp, [x], result_types=[wanted], location=op.location))


# --------------------------------------------------------------------------- folding


def make_folder(max_fold_elements: int):
    """The driver's folder: `Operation.fold`, then the op's `evaluate`."""

    def fold(op: Operation, rewriter: PatternRewriter) -> bool:
        if not op.has_trait(Pure) or op.has_trait(ConstantLike) or op.regions or not op.results:
            return False
        constants = [constant_value(v) for v in op.operands]
        folded = op.fold(constants)
        if folded is not None:
            return apply_fold_result(op, folded, rewriter)
        if not op.operands or any(c is None for c in constants) or not hasattr(op, "evaluate"):
            return False
        if not all(isinstance(t, TensorType) and t.is_static for t in op.result_types):
            return False  # a `?`-sized result has no constant to fold into
        small = all(t.num_elements <= max_fold_elements for t in op.result_types)
        cheap_splat = all(c.is_splat for c in constants) and any(op.has_trait(t) for t in (Elementwise, Injective, Reduction))
        if not (small or cheap_splat):
            return False
        try:
            with np.errstate(all="ignore"):  # NaN and inf are values like any other here
                arrays = op.evaluate([c.array for c in constants])
        except DomainError:
            return False  # left for run time, which reports it with the op's location
        results = [A.DenseElementsAttr(a, t) for a, t in zip(arrays, op.result_types)]
        if not small and not all(r.is_splat for r in results):
            return False
        return apply_fold_result(op, results, rewriter)

    return fold


def apply_fold_result(op: Operation, folded: list, rewriter: PatternRewriter) -> bool:
    """Replace op by `folded`: per result, an existing Value or a
    DenseElementsAttr, of the result's type (the `Operation.fold` contract)."""
    if len(folded) != len(op.results):
        return False
    for item, result in zip(folded, op.results):
        if not isinstance(item, (Value, A.DenseElementsAttr)) or item.type is not result.type:
            return False
    rewriter.replace_op(op, [v if isinstance(v, Value) else materialize(rewriter, v, op.location) for v in folded])
    return True


# --------------------------------------------------------------------------- algebraic identities


def is_float_op(op: Operation) -> bool:
    return op.result.type.element_type.is_float


def is_negative_zero(v) -> bool:
    return v == 0 and math.copysign(1.0, v) < 0


@dataclass
class IdentityOperand(RewritePattern):
    """x+0, x-0, x*1, x/1 (and the commuted forms) become x."""

    no_signed_zeros: bool = False
    op_names = ("tensor.add", "tensor.sub", "tensor.mul", "tensor.div")

    def is_additive_identity(self, op: Operation, c) -> bool:
        if c is None or c != 0:
            return False
        if not is_float_op(op) or self.no_signed_zeros:
            return True
        # x + (-0.0) == x for every x; x + (+0.0) turns -0.0 into +0.0.
        # For sub, x - (+0.0) == x + (-0.0).
        return is_negative_zero(c) if op.name == "tensor.add" else not is_negative_zero(c)

    def kept_operand(self, op: Operation) -> Value | None:
        lhs, rhs = op.operands
        a, b = splat_value(lhs), splat_value(rhs)
        if op.name in ("tensor.add", "tensor.sub") and self.is_additive_identity(op, b):
            return lhs
        if op.name == "tensor.add" and self.is_additive_identity(op, a):
            return rhs
        if op.name in ("tensor.mul", "tensor.div") and b is not None and b == 1:
            return lhs
        if op.name == "tensor.mul" and a is not None and a == 1:
            return rhs
        return None

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        x = self.kept_operand(op)
        if x is None:
            return False
        replace_with(rewriter, op, x)
        return True


class IntegerMulByZero(RewritePattern):
    """x*0 = 0 for integers (not for floats: NaN*0, inf*0 and -x*0)."""

    op_names = ("tensor.mul",)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        if is_float_op(op) or 0 not in (splat_value(op.lhs), splat_value(op.rhs)):
            return False
        zero = A.DenseElementsAttr(np.zeros((), op.result.type.element_type.numpy_dtype), op.result.type)
        rewriter.replace_op(op, [materialize(rewriter, zero, op.location)])
        return True


class ComposeTransposes(RewritePattern):
    """transpose(transpose(x, p), q) = transpose(x, [p[i] for i in q]); identity perms vanish."""

    op_names = ("tensor.transpose",)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        perm = op.attr("perm")
        source = op.input
        inner = source.defining_op
        if isinstance(inner, TransposeOp):
            inner_perm = inner.attr("perm")
            perm = [inner_perm[i] for i in perm]
            source = inner.input
        elif perm != sorted(perm):
            return False
        if perm == list(range(len(perm))):
            rewriter.replace_op(op, [source])
        else:
            rewriter.replace_op(op, rewriter.create(TransposeOp, [source], {"perm": perm}, location=op.location))
        return True


class CollapseLayoutChain(RewritePattern):
    """reshape(reshape(x)) and broadcast_to(broadcast_to(x)) read x directly
    (one to the operand's own type is the ops' `fold`)."""

    op_names = ("tensor.reshape", "tensor.broadcast_to")

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        source = op.operand(0)
        inner = source.defining_op
        if inner is None or inner.name != op.name:
            return False
        if inner.operand(0).type is op.result.type:
            rewriter.replace_op(op, [inner.operand(0)])
        else:
            rewriter.replace_op(op, rewriter.create(type(op), [inner.operand(0)], result_types=[op.result.type], location=op.location))
        return True


# --------------------------------------------------------------------------- the pass


def canonicalization_patterns(no_signed_zeros: bool = False) -> list[RewritePattern]:
    return [IdentityOperand(no_signed_zeros), IntegerMulByZero(), ComposeTransposes(), CollapseLayoutChain()]


@dataclass(frozen=True)
class Canonicalize(Pass):
    name = "canonicalize"
    summary = "Fold constants (each op's evaluate hook) and simplify tensor ops"

    max_fold_elements: int = 4096
    no_signed_zeros: bool = False
    max_rewrites: int = -1

    def run(self, op: Operation, context: PassContext) -> None:
        apply_patterns_greedily(
            op,
            canonicalization_patterns(self.no_signed_zeros),
            folder=make_folder(self.max_fold_elements),
            max_rewrites=None if self.max_rewrites < 0 else self.max_rewrites,
        )
