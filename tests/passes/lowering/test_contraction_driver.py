"""Matmul and attention groups through the driver: `tile`, `lower-to-loops`
and `plan-memory` on whole programs, both targets, against the reference."""

from __future__ import annotations

import pytest
from harness import PROGRAM, TARGETS, check_lowering, parse

# Small tiles (the tile pass's options) so that the interpreter stays quick
# and every shape overhangs its tiles.
TILES = {"h200": "tile{target=h200 block=8x8 k=4 threads=32}", "cpu": "tile{target=cpu block=4x16}"}

# x @ w1 + b1 -> gelu (one matmul group), then unfused ops the driver wraps:
# a matmul with a transposed operand and a batched attention with a mask.
PROGRAM_TEXT = """
func.func @main(%x: tensor<2x5x8xf32>, %w1: tensor<8x12xf32>, %b1: tensor<12xf32>, %w2: tensor<8x12xf32>, %mask: tensor<5x5xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x12xf32>) {
  %h = fusion.group %x, %w1, %b1 {kind = "matmul"} : (tensor<2x5x8xf32>, tensor<8x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32> {
  ^bb0(%a: tensor<2x5x8xf32>, %w: tensor<8x12xf32>, %b: tensor<12xf32>):
    %0 = tensor.matmul %a, %w : (tensor<2x5x8xf32>, tensor<8x12xf32>) -> tensor<2x5x12xf32>
    %1 = tensor.add %0, %b : (tensor<2x5x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
    %2 = tensor.gelu %1 {approximate = "tanh"} : (tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
    fusion.yield %2 : tensor<2x5x12xf32>
  }
  %y = tensor.matmul %h, %w2 {transpose_b = true} : (tensor<2x5x12xf32>, tensor<8x12xf32>) -> tensor<2x5x8xf32>
  %q = tensor.reshape %y : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %qh = tensor.transpose %q {perm = [0, 2, 1, 3]} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %o = tensor.attention %qh, %qh, %qh, %mask {causal = true} : (tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>, tensor<5x5xf32>) -> tensor<2x2x5x4xf32>
  %ot = tensor.transpose %o {perm = [0, 2, 1, 3]} : (tensor<2x2x5x4xf32>) -> tensor<2x5x2x4xf32>
  %out = tensor.reshape %ot : (tensor<2x5x2x4xf32>) -> tensor<2x5x8xf32>
  func.return %out, %h : tensor<2x5x8xf32>, tensor<2x5x12xf32>
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_a_program_of_contractions_lowers_to_the_reference(target):
    lowered = check_lowering(parse(PROGRAM_TEXT), target, PROGRAM, extra=TILES[target])
    kinds = [op.attr("kind") for op in lowered.walk() if op.name == "loop.kernel"]
    assert kinds.count("matmul") == 2 and kinds.count("attention") == 1
