"""The greedy pattern driver: rewrites to a fixed point, erases dead pure
ops, revisits what a change touched, and refuses patterns that ping-pong."""

from __future__ import annotations

import pytest

from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.rewriter import PatternRewriter, RewritePattern, apply_patterns_greedily, replace_with_new
from fusecc.compiler.verifier import verify
from fusecc.dialects import tensor as T

PROGRAM = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = tensor.neg %0 : (tensor<4xf32>) -> tensor<4xf32>
  %2 = tensor.neg %1 : (tensor<4xf32>) -> tensor<4xf32>
  %3 = tensor.neg %2 : (tensor<4xf32>) -> tensor<4xf32>
  %unused = tensor.exp %3 : (tensor<4xf32>) -> tensor<4xf32>
  %4 = tensor.abs %3 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %4 : tensor<4xf32>
}
"""


class DoubleNegation(RewritePattern):
    op_names = ("tensor.neg",)

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> bool:
        inner = op.input.defining_op
        if not isinstance(inner, T.NegOp):
            return False
        rewriter.replace_op(op, [inner.input])
        return True


class AbsToRelu(RewritePattern):
    """Any-op pattern (no op_names) that creates a new op."""

    def match_and_rewrite(self, op, rewriter) -> bool:
        if op.name != "tensor.abs":
            return False
        replace_with_new(rewriter, op, T.ReluOp, [op.input])
        return True


def test_rewrites_reach_a_fixed_point_and_drop_dead_ops():
    module = parse_module(PROGRAM)
    assert apply_patterns_greedily(module, [DoubleNegation(), AbsToRelu()])
    verify(module)
    body = print_op(module)
    assert "tensor.neg" not in body and "tensor.exp" not in body
    assert "%0 = tensor.relu %x" in body and "func.return %0" in body
    assert not apply_patterns_greedily(module, [DoubleNegation(), AbsToRelu()])  # nothing left to do


def test_new_ops_keep_the_location_of_what_they_replace():
    module = parse_module(PROGRAM, "p.ir")
    apply_patterns_greedily(module, [AbsToRelu()])
    relu = next(op for op in module.walk() if op.name == "tensor.relu")
    assert (relu.location.line, relu.location.col) == (7, 3)


class Flip(RewritePattern):
    op_names = ("tensor.relu", "tensor.abs")

    def match_and_rewrite(self, op, rewriter) -> bool:
        replace_with_new(rewriter, op, T.AbsOp if op.name == "tensor.relu" else T.ReluOp, [op.input])
        return True


def test_patterns_that_undo_each_other_are_stopped():
    module = parse_module(PROGRAM)
    with pytest.raises(RuntimeError, match="did not converge"):
        apply_patterns_greedily(module, [Flip()], max_rewrites=100)
