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


NESTED_CONCAT = """
func.func @main(%a: tensor<3x5xf32>, %b: tensor<3x2xf32>, %c: tensor<4x7xf32>) -> tensor<7x7xf32> {
  %r = fusion.group %a, %b, %c {kind = "elementwise"} : (tensor<3x5xf32>, tensor<3x2xf32>, tensor<4x7xf32>) -> tensor<7x7xf32> {
  ^bb0(%x: tensor<3x5xf32>, %y: tensor<3x2xf32>, %z: tensor<4x7xf32>):
    %0 = tensor.concat %x, %y {axis = 1} : (tensor<3x5xf32>, tensor<3x2xf32>) -> tensor<3x7xf32>
    %1 = tensor.exp %0 : (tensor<3x7xf32>) -> tensor<3x7xf32>
    %2 = tensor.concat %1, %z {axis = 0} : (tensor<3x7xf32>, tensor<4x7xf32>) -> tensor<7x7xf32>
    %3 = tensor.transpose %2 {perm = [1, 0]} : (tensor<7x7xf32>) -> tensor<7x7xf32>
    fusion.yield %3 : tensor<7x7xf32>
  }
  func.return %r : tensor<7x7xf32>
}
"""


def test_concat_boundaries_follow_concats_elementwise_ops_and_transposes():
    from fusecc.passes.lowering.scalar_emitter import concat_boundaries

    group = next(op for op in parse_module(NESTED_CONCAT).walk() if op.name == "fusion.group")
    result = group.yield_op.operands[0]  # transposed: axis 0 is the inner concat's axis 1
    assert concat_boundaries(result, 0) == {5}
    assert concat_boundaries(result, 1) == {3}
    transpose = result.defining_op
    outer = transpose.input.defining_op
    # a candidate group of the transpose and the outer concat: the inner concat is made outside, read whole
    assert concat_boundaries(result, 1, inside={transpose, outer}) == {3}
    assert concat_boundaries(result, 0, inside={transpose, outer}) == set()


def test_concat_boundaries_follow_exactly_the_ops_with_a_scalar_formula():
    """tiling/shapes.concat_boundaries (which the tile chooser asks too, below
    the lowering) follows the Elementwise ops; the emitter follows the ops
    of SCALAR_FORMULAS: the same set, or the cuts would not be the spans."""
    import fusecc.dialects  # noqa: F401  (every op registered)
    from fusecc.compiler.op_definitions import OP_REGISTRY
    from fusecc.compiler.traits import Elementwise
    from fusecc.passes.lowering.scalar_formulas import SCALAR_FORMULAS

    assert {name for name, op in OP_REGISTRY.items() if Elementwise in op.traits} == set(SCALAR_FORMULAS)


def test_a_concat_at_an_index_of_known_range_reads_its_piece_without_a_branch():
    from fusecc.passes.lowering.scalar_emitter import IndexMath

    module = parse_module(NESTED_CONCAT)
    group = next(op for op in module.walk() if op.name == "fusion.group")
    kernel = loop.KernelOp.build("k0", [memref_of(v) for v in group.operands])
    b = Builder(InsertionPoint.at_end(kernel.body))
    nest = b.insert(loop.ParallelOp.build([2, 3], ["sequential", "sequential"]))
    b.set_insertion_point(InsertionPoint.at_end(nest.body))
    im = IndexMath(b)
    emitter = ScalarEmitter(b, dict(zip(group.body.args, kernel.body.args)), im)
    i, j = nest.body.args
    column = im.add(j, im.const(5))  # known to be in [5, 8) below: %y's columns 0..2
    assert im.add(column, im.const(-5)) is j  # (j + 5) - 5 folds back to j
    im.assume(j, 0, 3)
    assert im.range_of(column) == (5, 8)
    row = im.assume(im.add(i, im.const(3)), 3, 5)  # rows 3, 4: %z
    emitter.at(group.yield_op.operands[0], [column, im.const(1)])  # %1[1, j+5] = exp(%y[1, j])
    emitter.at(group.yield_op.operands[0], [im.const(2), row])  # %z[i, 2]
    ops = [op.name for op in nest.walk()]
    assert "loop.if" not in ops
    loads = [op for op in nest.walk() if op.name == "loop.load"]
    assert [l.buffer for l in loads] == [kernel.body.args[1], kernel.body.args[2]]
    # Without a known range the piece is chosen per element, as before.
    emitter.at(group.yield_op.operands[0], [im.add(i, im.const(4)), im.const(0)])
    assert "loop.if" in [op.name for op in nest.walk()]
