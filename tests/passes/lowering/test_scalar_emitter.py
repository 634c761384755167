"""The scalar emitter computes group values per element, exactly as the reference does."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler import attributes as A
from fusecc.compiler import parse_module, print_op, verify
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.types import MemRefType
from fusecc.dialects import builtin, loop
from fusecc.passes.lowering.scalar_emitter import LoweringError, ScalarEmitter
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import evaluate

LAYOUT_CHAIN = """
func.func @main(%x: tensor<4x6xf32>, %b: tensor<6xf32>, %y: tensor<6x4xf32>) -> tensor<6x4xf32> {
  %r = fusion.group %x, %b, %y {kind = "elementwise"} : (tensor<4x6xf32>, tensor<6xf32>, tensor<6x4xf32>) -> tensor<6x4xf32> {
  ^bb0(%a: tensor<4x6xf32>, %c: tensor<6xf32>, %d: tensor<6x4xf32>):
    %0 = tensor.add %a, %c : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
    %1 = tensor.gelu %0 : (tensor<4x6xf32>) -> tensor<4x6xf32>
    %2 = tensor.transpose %1 {perm = [1, 0]} : (tensor<4x6xf32>) -> tensor<6x4xf32>
    %3 = tensor.concat %2, %d {axis = 0} : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<12x4xf32>
    %4 = tensor.slice %3 {start = [3, 0], stop = [9, 4]} : (tensor<12x4xf32>) -> tensor<6x4xf32>
    %5 = tensor.reshape %4 : (tensor<6x4xf32>) -> tensor<24xf32>
    %6 = tensor.reshape %5 : (tensor<24xf32>) -> tensor<6x4xf32>
    %7 = tensor.mul %6, %6 : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>
    %8 = tensor.constant {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
    %9 = tensor.sub %7, %8 : (tensor<6x4xf32>, tensor<4xf32>) -> tensor<6x4xf32>
    fusion.yield %9 : tensor<6x4xf32>
  }
  func.return %r : tensor<6x4xf32>
}
"""


def memref_of(value):
    return MemRefType(value.type.shape, value.type.element_type)


def lower_elementwise_group(module, mapping):
    """A minimal elementwise kernel: one parallel loop nest over the output."""
    group = next(op for op in module.walk() if op.name == "fusion.group")
    input_types = [memref_of(v) for v in group.operands]
    output_types = [memref_of(r) for r in group.results]
    kernel = loop.KernelOp.build("k0", input_types + output_types)
    b = Builder(InsertionPoint.at_end(kernel.body))
    nest = b.insert(loop.ParallelOp.build(group.result.type.shape, mapping))
    b.set_insertion_point(InsertionPoint.at_end(nest.body))
    emitter = ScalarEmitter(b, dict(zip(group.body.args, kernel.body.args)))
    idx = list(nest.body.args)
    emitter.store(emitter.at(group.yield_op.operands[0], idx), kernel.body.args[-1], idx)
    b.create(loop.YieldOp)
    InsertionPoint.at_end(kernel.body).insert(loop.ReturnOp())
    schedule = loop.ScheduleOp.build("main", input_types, output_types, ["x", "b", "y"], ["result0"])
    sb = Builder(InsertionPoint.at_end(schedule.body))
    sb.create(loop.LaunchOp, list(schedule.body.args), {"kernel": A.SymbolRefAttr("k0")})
    sb.create(loop.ReturnOp)
    lowered = builtin.ModuleOp.build([kernel, schedule])
    verify(lowered)
    return parse_module(print_op(lowered))  # and it round-trips


@pytest.mark.parametrize("mapping", [["worker", "vector"], ["sequential", "sequential"]])
def test_layout_chain_matches_reference_exactly(mapping):
    module = parse_module(LAYOUT_CHAIN)
    verify(module)
    lowered = lower_elementwise_group(module, mapping)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(s, dtype=np.float32) for s in [(4, 6), (6,), (6, 4)]]
    (out,) = run_schedule(lowered, "main", inputs)
    (expected,) = evaluate(module, "main", inputs)
    np.testing.assert_array_equal(out, expected)


def test_ops_that_need_a_template_are_refused_by_name():
    module = parse_module(
        """
func.func @main(%x: tensor<4x6xf32>) -> tensor<4xf32> {
  %r = fusion.group %x {kind = "reduction"} : (tensor<4x6xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4x6xf32>):
    %0 = tensor.reduce_sum %a {axes = [1]} : (tensor<4x6xf32>) -> tensor<4xf32>
    fusion.yield %0 : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
"""
    )
    with pytest.raises(LoweringError, match="tensor.reduce_sum"):
        lower_elementwise_group(module, ["worker"])
