"""Elementwise and injective groups compute what the reference computes, on both targets."""

from __future__ import annotations

import pytest
from harness import ELEMENTWISE, HALF, TARGETS, check_lowering, kernels, parse

from fusecc.dialects import loop

BROADCAST_CHAIN = """
func.func @main(%x: tensor<8x48xf32>, %b: tensor<48xf32>, %c: tensor<8x1xf32>) -> tensor<8x48xf32> {
  %r = fusion.group %x, %b, %c {kind = "elementwise"} : (tensor<8x48xf32>, tensor<48xf32>, tensor<8x1xf32>) -> tensor<8x48xf32> {
  ^bb0(%a: tensor<8x48xf32>, %bb: tensor<48xf32>, %cc: tensor<8x1xf32>):
    %0 = tensor.add %a, %bb : (tensor<8x48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
    %1 = tensor.mul %0, %cc : (tensor<8x48xf32>, tensor<8x1xf32>) -> tensor<8x48xf32>
    %2 = tensor.gelu %1 {approximate = "tanh"} : (tensor<8x48xf32>) -> tensor<8x48xf32>
    %3 = tensor.silu %2 : (tensor<8x48xf32>) -> tensor<8x48xf32>
    %4 = tensor.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
    %5 = tensor.max %3, %4 : (tensor<8x48xf32>, tensor<f32>) -> tensor<8x48xf32>
    fusion.yield %5 : tensor<8x48xf32>
  }
  func.return %r : tensor<8x48xf32>
}
"""

LAYOUT = """
func.func @main(%x: tensor<4x6xf32>, %y: tensor<6x4xf32>) -> (tensor<6x4xf32>, tensor<2x3x4xf32>) {
  %r:2 = fusion.group %x, %y {kind = "injective"} : (tensor<4x6xf32>, tensor<6x4xf32>) -> (tensor<6x4xf32>, tensor<2x3x4xf32>) {
  ^bb0(%a: tensor<4x6xf32>, %b: tensor<6x4xf32>):
    %0 = tensor.transpose %a {perm = [1, 0]} : (tensor<4x6xf32>) -> tensor<6x4xf32>
    %1 = tensor.concat %0, %b {axis = 0} : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<12x4xf32>
    %2 = tensor.slice %1 {start = [11, 0], stop = [0, 4], step = [-2, 1]} : (tensor<12x4xf32>) -> tensor<6x4xf32>
    %3 = tensor.reshape %2 : (tensor<6x4xf32>) -> tensor<2x3x4xf32>
    %4 = tensor.constant {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
    %5 = tensor.broadcast_to %4 : (tensor<4xf32>) -> tensor<2x3x4xf32>
    %6 = tensor.sub %3, %5 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
    fusion.yield %2, %6 : tensor<6x4xf32>, tensor<2x3x4xf32>
  }
  func.return %r#0, %r#1 : tensor<6x4xf32>, tensor<2x3x4xf32>
}
"""

MIXED_TYPES = """
func.func @main(%x: tensor<5x7xf16>, %n: tensor<5x7xi32>, %m: tensor<7xi32>) -> (tensor<5x7xf16>, tensor<5x7xi32>, tensor<5x7xi1>, tensor<5x7xi32>) {
  %r:4 = fusion.group %x, %n, %m {kind = "elementwise"} : (tensor<5x7xf16>, tensor<5x7xi32>, tensor<7xi32>) -> (tensor<5x7xf16>, tensor<5x7xi32>, tensor<5x7xi1>, tensor<5x7xi32>) {
  ^bb0(%a: tensor<5x7xf16>, %i: tensor<5x7xi32>, %j: tensor<7xi32>):
    %0 = tensor.exp %a : (tensor<5x7xf16>) -> tensor<5x7xf16>
    %1 = tensor.cast %i : (tensor<5x7xi32>) -> tensor<5x7xf16>
    %2 = tensor.add %0, %1 : (tensor<5x7xf16>, tensor<5x7xf16>) -> tensor<5x7xf16>
    %3 = tensor.mul %i, %j : (tensor<5x7xi32>, tensor<7xi32>) -> tensor<5x7xi32>
    %4 = tensor.abs %3 : (tensor<5x7xi32>) -> tensor<5x7xi32>
    %5 = tensor.cmp %i, %j {predicate = "gt"} : (tensor<5x7xi32>, tensor<7xi32>) -> tensor<5x7xi1>
    %6 = tensor.select %5, %4, %i : (tensor<5x7xi1>, tensor<5x7xi32>, tensor<5x7xi32>) -> tensor<5x7xi32>
    %7 = tensor.constant {value = dense<[0, 1, 2, 3, -1, -2, 7]> : tensor<7xi32>} : () -> tensor<7xi32>
    %8 = tensor.pow %i, %7 : (tensor<5x7xi32>, tensor<7xi32>) -> tensor<5x7xi32>
    %9 = tensor.div %8, %j : (tensor<5x7xi32>, tensor<7xi32>) -> tensor<5x7xi32>
    fusion.yield %2, %6, %5, %9 : tensor<5x7xf16>, tensor<5x7xi32>, tensor<5x7xi1>, tensor<5x7xi32>
  }
  func.return %r#0, %r#1, %r#2, %r#3 : tensor<5x7xf16>, tensor<5x7xi32>, tensor<5x7xi1>, tensor<5x7xi32>
}
"""

SHAPES_AND_SCALARS = """
func.func @main(%x: tensor<3x5xf32>, %s: tensor<f32>) -> (tensor<3x5xf32>, tensor<5xf32>, tensor<f32>) {
  %r:3 = fusion.group %x, %s {kind = "elementwise"} : (tensor<3x5xf32>, tensor<f32>) -> (tensor<3x5xf32>, tensor<5xf32>, tensor<f32>) {
  ^bb0(%a: tensor<3x5xf32>, %t: tensor<f32>):
    %0 = tensor.mul %a, %t : (tensor<3x5xf32>, tensor<f32>) -> tensor<3x5xf32>
    %1 = tensor.slice %0 {start = [1, 0], stop = [2, 5]} : (tensor<3x5xf32>) -> tensor<1x5xf32>
    %2 = tensor.reshape %1 : (tensor<1x5xf32>) -> tensor<5xf32>
    %3 = tensor.neg %t : (tensor<f32>) -> tensor<f32>
    fusion.yield %0, %2, %3 : tensor<3x5xf32>, tensor<5xf32>, tensor<f32>
  }
  func.return %r#0, %r#1, %r#2 : tensor<3x5xf32>, tensor<5xf32>, tensor<f32>
}
"""


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("program", [BROADCAST_CHAIN, LAYOUT, SHAPES_AND_SCALARS], ids=["broadcast", "layout", "shapes"])
def test_elementwise_groups_match_the_reference(program, target):
    check_lowering(parse(program), target, ELEMENTWISE)


@pytest.mark.parametrize("target", TARGETS)
def test_f16_and_integer_groups(target):
    """Integers and booleans are exact; f16 intermediates stay in f32 inside a
    kernel where the reference rounds each op to f16, so f16 results agree
    to an f16 ulp."""
    check_lowering(parse(MIXED_TYPES), target, HALF)


def test_outputs_of_different_shapes_are_parts_of_one_kernel():
    lowered = check_lowering(parse(SHAPES_AND_SCALARS), "h200", ELEMENTWISE)
    (kernel,) = kernels(lowered)
    # three shapes: a dispatch on the block index between three thread loops
    assert len([op for op in kernel.walk() if isinstance(op, loop.ParallelOp) and op.maps_threads]) == 3


@pytest.mark.parametrize(
    "tiles",
    ["tile{target=h200 threads=64 block=256}", "tile{target=h200 threads=32}", "tile{target=cpu block=16}", "tile{target=cpu block=20}"],
)
def test_tile_overrides_keep_results(tiles):
    """Several elements per thread, partial blocks, CPU chunks with and without a tail."""
    target = "cpu" if "cpu" in tiles else "h200"
    lowered = check_lowering(parse(BROADCAST_CHAIN), target, ELEMENTWISE, extra=tiles)
    (kernel,) = kernels(lowered)
    loops = {tuple(op.mapping): op.upper for op in kernel.walk() if isinstance(op, loop.ParallelOp)}
    if tiles.endswith("threads=64 block=256}"):
        assert loops == {("block.x",): [2], ("thread.x",): [64]}  # 384 elements, 4 per thread
    if tiles.endswith("block=20}"):
        assert loops == {("worker",): [24], ("vector",): [20]}  # 8 rows x 3 chunks of 20 (of 48)


def test_gpu_elementwise_kernel_structure():
    (kernel,) = kernels(check_lowering(parse(BROADCAST_CHAIN), "h200", ELEMENTWISE))
    grid, block = kernel.launch_dims()
    assert grid == (2, 1, 1) and block == (256, 1, 1)  # 384 elements, one per thread
    assert kernel.attr("kind") == "elementwise"


def test_cpu_elementwise_kernel_is_worker_over_rows_vector_over_the_last_axis():
    (kernel,) = kernels(check_lowering(parse(BROADCAST_CHAIN), "cpu", ELEMENTWISE))
    outer = next(op for op in kernel.body if isinstance(op, loop.ParallelOp))
    assert outer.mapping == ["worker"] and outer.upper == [8]
    inner = [op for op in outer.walk(include_self=False) if isinstance(op, loop.ParallelOp)]
    assert [(op.mapping, op.upper) for op in inner] == [(["vector"], [48])]
    assert not any(isinstance(op, (loop.ForOp, loop.ParallelOp)) for op in inner[0].walk(include_self=False))
