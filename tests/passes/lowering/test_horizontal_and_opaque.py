"""Horizontal groups run their independent parts in one kernel; opaque
singletons (anything left over, matmul and attention included) lower with
a simple correct kernel; unfused programs lower op by op."""

from __future__ import annotations

import pytest
from harness import REDUCTION, TARGETS, check_lowering, kernels, launches, parse

from fusecc.dialects import loop

HORIZONTAL = """
func.func @main(%x: tensor<8x48xf32>, %y: tensor<6x40xf32>, %g: tensor<48xf32>, %b: tensor<48xf32>, %g2: tensor<40xf32>, %z: tensor<5x7xf32>)
    -> (tensor<8x48xf32>, tensor<6x40xf32>, tensor<5x7xf32>, tensor<5x7xf32>, tensor<7xf32>) {
  %r:5 = fusion.group %x, %y, %g, %b, %g2, %z {kind = "horizontal"} : (tensor<8x48xf32>, tensor<6x40xf32>, tensor<48xf32>, tensor<48xf32>, tensor<40xf32>, tensor<5x7xf32>)
      -> (tensor<8x48xf32>, tensor<6x40xf32>, tensor<5x7xf32>, tensor<5x7xf32>, tensor<7xf32>) {
  ^bb0(%a: tensor<8x48xf32>, %c: tensor<6x40xf32>, %gg: tensor<48xf32>, %bb: tensor<48xf32>, %gg2: tensor<40xf32>, %zz: tensor<5x7xf32>):
    %l = tensor.layernorm %a, %gg, %bb : (tensor<8x48xf32>, tensor<48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
    %n = tensor.rmsnorm %c, %gg2 : (tensor<6x40xf32>, tensor<40xf32>) -> tensor<6x40xf32>
    %e = tensor.exp %zz : (tensor<5x7xf32>) -> tensor<5x7xf32>
    %s = tensor.reduce_sum %zz {axes = [0]} : (tensor<5x7xf32>) -> tensor<7xf32>
    fusion.yield %l, %n, %e, %zz, %s : tensor<8x48xf32>, tensor<6x40xf32>, tensor<5x7xf32>, tensor<5x7xf32>, tensor<7xf32>
  }
  func.return %r#0, %r#1, %r#2, %r#3, %r#4 : tensor<8x48xf32>, tensor<6x40xf32>, tensor<5x7xf32>, tensor<5x7xf32>, tensor<7xf32>
}
"""

# One part reads another row's sum (staged, so launched on its own), one is a matmul.
HORIZONTAL_WITH_LEFTOVERS = """
func.func @main(%x: tensor<6x6xf32>, %a: tensor<3x4xf32>, %w: tensor<4x5xf32>, %y: tensor<2x8xf32>) -> (tensor<6x6xf32>, tensor<3x5xf32>, tensor<2x8xf32>) {
  %r:3 = fusion.group %x, %a, %w, %y {kind = "horizontal"} : (tensor<6x6xf32>, tensor<3x4xf32>, tensor<4x5xf32>, tensor<2x8xf32>) -> (tensor<6x6xf32>, tensor<3x5xf32>, tensor<2x8xf32>) {
  ^bb0(%ix: tensor<6x6xf32>, %ia: tensor<3x4xf32>, %iw: tensor<4x5xf32>, %iy: tensor<2x8xf32>):
    %s = tensor.reduce_sum %ix {axes = [1]} : (tensor<6x6xf32>) -> tensor<6xf32>
    %d = tensor.sub %ix, %s : (tensor<6x6xf32>, tensor<6xf32>) -> tensor<6x6xf32>
    %q = tensor.softmax %d : (tensor<6x6xf32>) -> tensor<6x6xf32>
    %m = tensor.matmul %ia, %iw : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
    %t = tensor.tanh %iy : (tensor<2x8xf32>) -> tensor<2x8xf32>
    fusion.yield %q, %m, %t : tensor<6x6xf32>, tensor<3x5xf32>, tensor<2x8xf32>
  }
  func.return %r#0, %r#1, %r#2 : tensor<6x6xf32>, tensor<3x5xf32>, tensor<2x8xf32>
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_horizontal_group_is_one_kernel(target):
    lowered = check_lowering(parse(HORIZONTAL), target, REDUCTION)
    (kernel,) = kernels(lowered)
    outer = next(op for op in kernel.body if isinstance(op, loop.ParallelOp))
    # five components (the passthrough output is its own), each a part
    dispatch = [op for op in outer.walk() if isinstance(op, loop.IfOp) and op.parent_op is not None and not _inside_part(op)]
    assert len(dispatch) == 4
    if target == "h200":
        threads = {tuple(op.upper) for op in kernel.walk() if isinstance(op, loop.ParallelOp) and op.maps_threads}
        assert threads == {(256,)}  # one thread count for every part


def _inside_part(op):
    parent = op.parent_op
    while parent is not None:
        if isinstance(parent, loop.ParallelOp) and not (parent.maps_blocks or parent.mapping == ["worker"]):
            return True
        parent = parent.parent_op
    return False


def test_horizontal_parts_that_need_their_own_kernels():
    lowered = check_lowering(parse(HORIZONTAL_WITH_LEFTOVERS), "h200")
    assert launches(lowered)[0] == "fused_0_horizontal"


MATMUL_AND_ATTENTION = """
func.func @main(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>, %v: tensor<5xf32>, %q: tensor<2x3x8xf32>, %k: tensor<2x5x8xf32>, %vv: tensor<2x5x4xf32>, %mask: tensor<3x5xf32>)
    -> (tensor<2x3x5xf32>, tensor<2x3xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %m = fusion.group %a, %b {kind = "opaque"} : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32> {
  ^bb0(%ia: tensor<2x3x4xf32>, %ib: tensor<4x5xf32>):
    %0 = tensor.matmul %ia, %ib : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
    fusion.yield %0 : tensor<2x3x5xf32>
  }
  %mv = fusion.group %m, %v {kind = "opaque"} : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3xf32> {
  ^bb0(%im: tensor<2x3x5xf32>, %iv: tensor<5xf32>):
    %0 = tensor.matmul %im, %iv : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3xf32>
    fusion.yield %0 : tensor<2x3xf32>
  }
  %at = fusion.group %q, %k, %vv, %mask {kind = "opaque"} : (tensor<2x3x8xf32>, tensor<2x5x8xf32>, tensor<2x5x4xf32>, tensor<3x5xf32>) -> tensor<2x3x4xf32> {
  ^bb0(%iq: tensor<2x3x8xf32>, %ik: tensor<2x5x8xf32>, %iv: tensor<2x5x4xf32>, %imask: tensor<3x5xf32>):
    %0 = tensor.attention %iq, %ik, %iv, %imask {scale = 0.25} : (tensor<2x3x8xf32>, tensor<2x5x8xf32>, tensor<2x5x4xf32>, tensor<3x5xf32>) -> tensor<2x3x4xf32>
    fusion.yield %0 : tensor<2x3x4xf32>
  }
  %ca = fusion.group %k, %q, %vv {kind = "opaque"} : (tensor<2x5x8xf32>, tensor<2x3x8xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32> {
  ^bb0(%ik: tensor<2x5x8xf32>, %iq: tensor<2x3x8xf32>, %iv: tensor<2x5x4xf32>):
    %0 = tensor.matmul %iq, %ik {transpose_b = true} : (tensor<2x3x8xf32>, tensor<2x5x8xf32>) -> tensor<2x3x5xf32>
    %1 = tensor.attention %iq, %ik, %iv {causal = true} : (tensor<2x3x8xf32>, tensor<2x5x8xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
    fusion.yield %1 : tensor<2x3x4xf32>
  }
  func.return %m, %mv, %at, %ca : tensor<2x3x5xf32>, tensor<2x3xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_opaque_matmul_and_attention_have_a_simple_correct_kernel(target):
    check_lowering(parse(MATMUL_AND_ATTENTION), target, REDUCTION)


UNFUSED = """
func.func @main(%x: tensor<4x6xf32>, %y: tensor<6x4xf32>, %n: tensor<4x6xi32>) -> (tensor<4x4xf32>, tensor<6xf32>, tensor<4x6xf32>, tensor<2x12xi32>, tensor<4x6xf32>) {
  %0 = tensor.transpose %y {perm = [1, 0]} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %1 = tensor.add %x, %0 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %2 = tensor.softmax %1 {axis = 0} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %3 = tensor.matmul %2, %y : (tensor<4x6xf32>, tensor<6x4xf32>) -> tensor<4x4xf32>
  %4 = tensor.reduce_mean %2 {axes = [0]} : (tensor<4x6xf32>) -> tensor<6xf32>
  %5 = tensor.concat %x, %2 {axis = 1} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  %6 = tensor.slice %5 {start = [0, 3], stop = [4, 9]} : (tensor<4x12xf32>) -> tensor<4x6xf32>
  %7 = tensor.reshape %n : (tensor<4x6xi32>) -> tensor<2x12xi32>
  %8 = tensor.broadcast_to %4 : (tensor<6xf32>) -> tensor<4x6xf32>
  func.return %3, %4, %6, %7, %8 : tensor<4x4xf32>, tensor<6xf32>, tensor<4x6xf32>, tensor<2x12xi32>, tensor<4x6xf32>
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_unfused_programs_lower_op_by_op(target):
    check_lowering(parse(UNFUSED), target, REDUCTION)


UNFUSED_NO_MATMUL = """
func.func @main(%x: tensor<4x6xf32>, %y: tensor<6x4xf32>, %n: tensor<4x6xi32>) -> (tensor<6xf32>, tensor<4x6xf32>, tensor<2x12xi32>, tensor<4x6xf32>) {
  %0 = tensor.transpose %y {perm = [1, 0]} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %1 = tensor.add %x, %0 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %2 = tensor.softmax %1 : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %4 = tensor.reduce_mean %2 {axes = [0]} : (tensor<4x6xf32>) -> tensor<6xf32>
  %5 = tensor.concat %x, %2 {axis = 1} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  %6 = tensor.slice %5 {start = [0, 3], stop = [4, 9]} : (tensor<4x12xf32>) -> tensor<4x6xf32>
  %7 = tensor.reshape %n : (tensor<4x6xi32>) -> tensor<2x12xi32>
  %8 = tensor.broadcast_to %4 : (tensor<6xf32>) -> tensor<4x6xf32>
  func.return %4, %6, %7, %8 : tensor<6xf32>, tensor<4x6xf32>, tensor<2x12xi32>, tensor<4x6xf32>
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_unfused_layout_and_reduction_ops_lower_op_by_op(target):
    """Every op a singleton group of its fusion class; the reshape of an input is a view and a copy."""
    lowered = check_lowering(parse(UNFUSED_NO_MATMUL), target, REDUCTION)
    kinds = [lowered.lookup(name).attr("kind") for name in launches(lowered)]
    assert kinds == ["injective", "elementwise", "reduction", "reduction", "injective", "injective", "injective"]
    schedule = lowered.lookup("main")
    (copy,) = [op for op in schedule.body if isinstance(op, loop.CopyOp)]
    assert isinstance(copy.source.defining_op, loop.ViewOp) and copy.target is schedule.output_args[2]
