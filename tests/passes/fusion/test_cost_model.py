"""The cost model: its estimates and the decision function (seed 3.3)."""

from __future__ import annotations

import dataclasses

import pytest

from fusecc.passes.backends.hardware import A100, CPU, H200
from fusecc.compiler.parser import parse_module
from fusecc.compiler.types import f32
from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.fuse import fuse_module
from fusecc.passes.tiling.attention_tiles import (
    AttentionTiles,
    choose_cpu_attention_tiles,
    choose_gpu_attention_tiles,
    cpu_attention_resources,
    gpu_attention_resources,
)
from fusecc.passes.tiling.contraction_shapes import AttentionShape, MatmulShape, resource_problem
from fusecc.passes.tiling.gpu_matmul_tiles import choose_gpu_matmul_tiles, gpu_matmul_resources, matmul_padded_operands
from fusecc.passes.tiling.tile import choose_tiles

LINEAR_RELU = """
func.func @f(%x: tensor<128x256xf32>, %w: tensor<256x512xf32>, %b: tensor<512xf32>) -> tensor<128x512xf32> {
  %0 = tensor.matmul %x, %w : (tensor<128x256xf32>, tensor<256x512xf32>) -> tensor<128x512xf32>
  %1 = tensor.add %0, %b : (tensor<128x512xf32>, tensor<512xf32>) -> tensor<128x512xf32>
  %2 = tensor.relu %1 : (tensor<128x512xf32>) -> tensor<128x512xf32>
  func.return %2 : tensor<128x512xf32>
}
"""


def ops_of(text: str):
    module = parse_module(text)
    return module, [op for op in module.functions()[0].body if op.name.startswith("tensor.") and op.name != "tensor.constant"]


def cost(**fields) -> cm.GroupCost:
    base = dict(kind="elementwise", ops=2, bytes_read=4096, bytes_written=4096, flops=2048.0, recomputed_flops=0.0,
                registers_per_thread=32, shared_memory_bytes=0, compute_seconds=1e-8, time_seconds=5e-6)
    base.update(fields)
    return cm.GroupCost(**base)


# --------------------------------------------------------------------------- estimates


def test_matmul_epilogue_group_reads_inputs_once_and_writes_once():
    _, ops = ops_of(LINEAR_RELU)
    fused = cm.estimate_ops(ops, H200)
    assert fused.kind == "matmul"
    assert fused.bytes_read == 4 * (128 * 256 + 256 * 512 + 512)
    assert fused.bytes_written == 4 * 128 * 512
    assert fused.flops == pytest.approx(2 * 128 * 512 * 256 + 2 * 128 * 512)
    singles = [cm.estimate_ops([op], H200) for op in ops]
    # Unfused, the matmul result and the biased result each go out and back.
    assert sum(c.bytes_moved for c in singles) - fused.bytes_moved == 4 * 4 * 128 * 512


def test_matmul_registers_and_shared_memory_are_the_templates():
    _, ops = ops_of(LINEAR_RELU)
    tiles = choose_gpu_matmul_tiles(MatmulShape.of_op(ops[0]), H200)
    # 32x16 tiles would leave SMs idle (128 blocks for 132): 256 one-warp blocks of 16x16
    assert (tiles.block_m, tiles.block_n, tiles.threads) == (16, 16, 32)
    used = gpu_matmul_resources(tiles, f32, matmul_padded_operands(MatmulShape.of_op(ops[0])))  # A's rows padded, B's not
    fused = cm.estimate_ops(ops, H200)
    # The epilogue runs in the registers the 2 + 4 fragments held: the bias
    # pointer (2) and three live values need no more.
    assert (fused.registers_per_thread, fused.shared_memory_bytes) == (used.registers_per_thread, used.shared_bytes)


def test_estimate_group_agrees_with_the_planner_estimate_and_the_tiler():
    module, ops = ops_of(LINEAR_RELU)
    planned = cm.estimate_ops(ops, H200)
    group = fuse_module(module, H200).groups[0]
    assert dataclasses.asdict(cm.estimate_group(group, H200)) == dataclasses.asdict(planned)
    tiles = choose_tiles(group, H200)
    assert (tiles.registers_per_thread, tiles.shared_memory_bytes) == (planned.registers_per_thread, planned.shared_memory_bytes)


def test_a_broadcast_consumer_recomputes_its_producer_per_element():
    _, ops = ops_of("""
func.func @f(%x: tensor<64xf32>, %z: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %0 = tensor.exp %x : (tensor<64xf32>) -> tensor<64xf32>
  %1 = tensor.add %z, %0 : (tensor<32x64xf32>, tensor<64xf32>) -> tensor<32x64xf32>
  func.return %1 : tensor<32x64xf32>
}
""")
    fused = cm.estimate_ops(ops, H200)
    exp_flops = cm.FLOPS_PER_ELEMENT["tensor.exp"]
    assert fused.recomputed_flops == exp_flops * (32 * 64 - 64)
    assert fused.flops == exp_flops * 32 * 64 + 32 * 64


def test_a_reduction_needs_a_partial_per_warp_whatever_its_row_length():
    # The row kernel reads a row again for its epilogue rather than keep it,
    # so neither registers nor shared memory grow with the row.
    def softmax_rows(n):
        _, ops = ops_of(f"""
func.func @f(%x: tensor<4x{n}xf32>) -> tensor<4x{n}xf32> {{
  %m = tensor.reduce_max %x {{axes = [1], keepdims = true}} : (tensor<4x{n}xf32>) -> tensor<4x1xf32>
  %s = tensor.sub %x, %m : (tensor<4x{n}xf32>, tensor<4x1xf32>) -> tensor<4x{n}xf32>
  func.return %s : tensor<4x{n}xf32>
}}
""")
        return cm.estimate_ops(ops, H200)

    short, long = softmax_rows(1024), softmax_rows(65536)
    assert short.shared_memory_bytes == 8 * 4  # 128 threads per row: a partial per warp (of 8) and stat
    assert long.shared_memory_bytes == 8 * 4  # rows split over blocks of 256 threads
    assert short.registers_per_thread == long.registers_per_thread


def test_attention_tiles_shrink_to_fit_the_hardware():
    module, _ = ops_of("""
func.func @f(%q: tensor<256x256xf32>, %k: tensor<256x256xf32>, %v: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %0 = tensor.attention %q, %k, %v : (tensor<256x256xf32>, tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  func.return %0 : tensor<256x256xf32>
}
""")
    attention = module.functions()[0].body.first_op
    problem = AttentionShape.of_op(attention)
    # 64-row tiles of D = 256 need 212 KiB with one K/V buffer: they fit the
    # H200's 227 KiB per block, not the A100's 163 KiB, so the A100 is offered
    # smaller ones only; neither has room for two buffers (no cp.async).
    big = AttentionTiles(64, 64, 128)
    assert resource_problem(gpu_attention_resources(big, problem), H200, "attention") is None
    assert resource_problem(gpu_attention_resources(big, problem), A100, "attention") is not None
    for hw in (H200, A100):
        tiles = choose_gpu_attention_tiles(problem, hw)
        cost = cm.estimate_ops([attention], hw)
        assert cm.check_limits(cost, hw) is None
        pad = (8 - tiles.block_t) % 32
        assert tiles.stages == 1  # two K/V buffers of D = 256 do not fit
        assert cost.shared_memory_bytes == (tiles.block_q * 260 + tiles.block_t * 260 + tiles.block_t * 256 + tiles.block_q * (tiles.block_t + pad)) * 4
    # On the CPU a worker's q, k, v and output tiles shrink to fit its cache.
    wide = AttentionShape(problem.op, (), 256, 256, 4096, 4096)
    on_cpu = choose_cpu_attention_tiles(wide, CPU)
    assert (on_cpu.block_q, on_cpu.block_t) == (4, 16)  # one vector of keys
    assert cpu_attention_resources(on_cpu, wide).shared_bytes <= CPU.shared_memory_per_block


# --------------------------------------------------------------------------- the decision


def test_fusing_two_small_elementwise_kernels_saves_a_launch_and_traffic():
    a, b = cost(), cost()
    merged = cost(ops=4, bytes_read=4096, bytes_written=4096)
    decision = cm.decide([a, b], merged, H200)
    assert decision.fuse
    assert decision.saved_bytes == 8192
    assert decision.saved_seconds > 0
    assert "saves 8.2 KB of memory traffic and 1 launch" in decision.reason


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("registers_per_thread", 312, "est. 312 registers/thread > 255"),
        ("shared_memory_bytes", 300 * 1024, "est. 300.0 KiB shared memory > 227.0 KiB per block"),
        ("ops", 129, "group would have 129 ops > 128 (max ops per group on h200)"),
    ],
)
def test_a_fusion_that_breaks_a_hardware_limit_is_refused_whatever_it_saves(field, value, message):
    merged = cost(bytes_read=0, bytes_written=0, time_seconds=1e-9, **{field: value})
    decision = cm.decide([cost(), cost()], merged, H200)
    assert not decision.fuse
    assert decision.reason == message
    assert decision.limit == message


def test_limits_come_from_the_hardware_description():
    merged = cost(shared_memory_bytes=200 * 1024)
    assert cm.decide([cost(), cost()], merged, H200).fuse  # 227 KiB per block
    assert not cm.decide([cost(), cost()], merged, A100).fuse  # 163 KiB per block
    wide = cost(registers_per_thread=400)
    assert not cm.decide([cost(), cost()], wide, H200).fuse  # 255 per thread
    assert cm.decide([cost(), cost()], wide, CPU).fuse  # 32 zmm x 16 lanes


def test_a_fusion_slower_than_its_parts_is_refused():
    slow = cost(time_seconds=20e-6, recomputed_flops=5e6)
    decision = cm.decide([cost(), cost()], slow, H200)
    assert not decision.fuse
    assert decision.reason.startswith("not profitable: est. 20.0 us fused vs 10.0 us separate")
    assert "(recomputes 5.0 Mflop)" in decision.reason


def test_force_overrides_limits_and_profit_but_says_so():
    decision = cm.decide([cost(), cost()], cost(registers_per_thread=312), H200, forced=True)
    assert decision.fuse
    assert decision.reason == "forced by fusion.force despite est. 312 registers/thread > 255"


def test_sibling_merge_pays_for_small_outputs_and_not_for_large_ones():
    launch = H200.launch_overhead
    assert cm.sibling_merge_saving(3, 0, 0, H200) == pytest.approx(2 * launch)
    assert cm.sibling_merge_saving(2, 1 << 20, 1 << 16, H200) > 0
    assert cm.sibling_merge_saving(2, 1 << 20, 1 << 26, H200) < 0


def test_formatting():
    assert cm.format_bytes(6.3e6) == "6.3 MB"
    assert cm.format_bytes(512) == "512 B"
    assert cm.format_kib(227 * 1024) == "227.0 KiB"
    assert cm.format_time(4e-6) == "4.0 us"
    assert cm.format_time(1.53e-3) == "1.53 ms"
