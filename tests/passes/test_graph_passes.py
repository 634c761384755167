"""Unit tests of the graph passes' interfaces: registration, options, the
`Operation.fold` hook, statistics."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.op_definitions import OperandDef, ResultDef
from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, PipelineError, list_passes, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.compiler.traits import Pure
from fusecc.compiler.types import FunctionType, TensorType, f32
from fusecc.dialects import tensor as T
from fusecc.dialects.builtin import ModuleOp
from fusecc.dialects.func import FuncOp, ReturnOp


def test_registered():
    listing = list_passes()
    for name in ("canonicalize", "cse", "dce", "inline", "decompose"):
        assert f"  {name} " in listing


def test_options():
    manager = parse_pipeline("decompose{ops=softmax,tensor.layernorm},canonicalize{max-fold-elements=8 no-signed-zeros}")
    decompose, canonicalize = manager.entries
    assert decompose.ops == ("softmax", "tensor.layernorm")
    assert canonicalize.max_fold_elements == 8 and canonicalize.no_signed_zeros
    assert str(decompose) == "decompose{ops=softmax,tensor.layernorm}"
    with pytest.raises(PipelineError, match="cannot decompose matmul"):
        parse_pipeline("decompose{ops=matmul}")


class HalveOp(T.TensorOp):
    """A test op that folds itself when its operand is constant. Not
    registered, so that registry-wide checks elsewhere never see it."""

    name = "test.halve"
    traits = frozenset({Pure})
    operand_defs = (OperandDef("input"),)
    result_defs = (ResultDef("result"),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        return [operand_types[0]]

    def fold(self, constant_operands):
        (value,) = constant_operands
        if value is None:
            return None
        return [A.DenseElementsAttr(value.array / 2, value.type)]


def test_fold_hook_is_used_by_canonicalize():
    t = TensorType((2,), f32)
    func = FuncOp.build("main", FunctionType([t], [t, t]))
    b = Builder(InsertionPoint.at_end(func.body))
    four = b.create(T.ConstantOp, [], {"value": A.DenseElementsAttr(np.full(2, 4.0, np.float32), t)}).result
    folded = b.create(HalveOp, [four]).result
    kept = b.create(HalveOp, [func.body.args[0]]).result
    b.create(ReturnOp, [folded, kept], result_types=[])
    module = ModuleOp.build([func])
    run_pipeline(parse_pipeline("canonicalize"), module)
    text = print_op(module)
    assert "dense<2.0> : tensor<2xf32>" in text
    assert text.count("test.halve") == 1


def test_constant_folding_leaves_operands_outside_the_domain_for_run_time():
    """An op whose `evaluate` raises DomainError (a maximum over an empty
    axis) stays, for the reference to report with its location; an empty
    constant is no splat (it has no value to hash or print as one)."""
    module = parse_module(
        """
func.func @main() -> (tensor<3xf32>, tensor<3xf32>) {
  %x = tensor.constant {value = dense<1.0> : tensor<3x0xf32>} : () -> tensor<3x0xf32>
  %0 = tensor.reduce_max %x {axes = [1]} : (tensor<3x0xf32>) -> tensor<3xf32>
  %1 = tensor.reduce_sum %x {axes = [1]} : (tensor<3x0xf32>) -> tensor<3xf32>
  func.return %0, %1 : tensor<3xf32>, tensor<3xf32>
}
"""
    )
    run_pipeline(parse_pipeline("canonicalize,cse"), module)
    text = print_op(module)
    assert "tensor.reduce_max" in text and "tensor.reduce_sum" not in text
    assert "dense<0.0> : tensor<3xf32>" in text


def test_statistics():
    module = parse_module(
        """
        func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
          %0 = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf32>
          %1 = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf32>
          %2 = tensor.add %0, %1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
          %3 = tensor.softmax %2 : (tensor<4xf32>) -> tensor<4xf32>
          %4 = tensor.neg %3 : (tensor<4xf32>) -> tensor<4xf32>
          func.return %3 : tensor<4xf32>
        }
        """
    )
    context = PassContext()
    run_pipeline(parse_pipeline("cse,dce,decompose"), module, context)
    assert context.statistics == {"cse.removed": 1, "dce.removed": 1, "decompose.ops": 1}
