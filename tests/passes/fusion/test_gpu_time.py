"""The GPU side of the cost model (passes/fusion/gpu_time.py): occupancy and
waves by the CUDA occupancy calculator's rules for sm_90 (65536 registers,
228 KB of shared memory, 2048 threads and 32 blocks per SM; registers per
warp in units of 256; 1 KB reserved per block), latency hiding, the tail of
a partial wave, shared-memory wavefronts times conflict ways, and the
tensor-core and TF32 rates. Every expected figure is worked out by hand."""

from __future__ import annotations

import math

import pytest

from fusecc.passes.backends.hardware import A100, H200, occupancy, resident_blocks
from fusecc.passes.fusion.gpu_time import GpuLaunch, GpuWork, gpu_kernel_time, roofline_seconds


@pytest.mark.parametrize(
    "threads,registers,shared,blocks_per_sm,why",
    [
        (256, 32, 0, 8, "threads: 2048 / 256; registers allow 65536 / (8 warps x 1024) = 8 too"),
        (128, 64, 0, 8, "registers: 65536 / (4 warps x 2048)"),
        (128, 33, 0, 12, "registers: 33 x 32 = 1056 rounds up to 1280 per warp; 65536 / 5120 = 12.8"),
        (64, 16, 48 * 1024, 4, "shared memory: 233472 / (49152 + 1024) = 4.65"),
        (32, 16, 0, 32, "block slots: 32 per SM (threads would allow 64)"),
        (1024, 64, 0, 1, "registers: 32 warps x 2048 = 65536"),
        (1024, 65, 0, 0, "registers: 65 x 32 rounds up to 2304 per warp; 32 warps need 73728 > 65536"),
    ],
)
def test_resident_blocks_follow_the_occupancy_calculator(threads, registers, shared, blocks_per_sm, why):
    assert resident_blocks(H200, threads, registers, shared) == blocks_per_sm, why


def test_occupancy_and_waves():
    assert occupancy(H200, 128, 33, 0, 12 * 132) == (12 * 4 / 64, 1.0)  # 75%, one full wave
    assert occupancy(H200, 128, 64, 0, 96) == (0.5, 96 / (8 * 132))
    assert occupancy(H200, 1024, 65, 0, 10) == (0.0, math.inf)
    # The A100 has 108 SMs and 164 KB: the same block gives a different wave.
    assert occupancy(A100, 64, 16, 48 * 1024, 324) == (3 * 2 / 64, 1.0)  # 167936 / 50176 = 3.3 blocks of 2 warps


def compute_bound(blocks: int, threads: int = 128) -> float:
    """The compute time of `blocks` blocks of equal FMA work (no memory)."""
    work = GpuWork(dram_bytes=0, fma_flops=1e6 * blocks)
    return gpu_kernel_time(GpuLaunch(blocks, threads, 32, 0, 16), work, H200).compute_seconds


def test_a_partial_wave_costs_a_whole_one():
    # 132 blocks: every SM runs one; 133: one SM runs two, so the kernel
    # takes twice as long for 1/132 more work.
    assert compute_bound(133) == pytest.approx(2 * compute_bound(132))
    # Fewer blocks than SMs leave SMs idle: 66 blocks take as long as 132.
    assert compute_bound(66) == pytest.approx(compute_bound(132))
    # With four warps per SM every scheduler issues: the FMA peak.
    assert compute_bound(132) == pytest.approx(132e6 / H200.peak_flops)


def test_too_few_warps_leave_schedulers_idle():
    # One warp per block, one block per SM: a quarter of the issue slots.
    assert compute_bound(132, threads=32) == pytest.approx(4 * compute_bound(132, threads=128))


def test_latency_hiding_limits_the_bandwidth_of_a_small_launch():
    work = GpuWork(dram_bytes=64e6)
    full = gpu_kernel_time(GpuLaunch(132 * 8, 256, 32, 0, 16), work, H200)
    # 132 SMs x 64 warps x 32 lanes x 16 B = 4.3 MB in flight > 4.8 TB/s x 600 ns = 2.88 MB.
    assert full.achieved_bandwidth == H200.memory_bandwidth
    assert full.memory_seconds == pytest.approx(64e6 / 4.8e12)
    small = gpu_kernel_time(GpuLaunch(24, 128, 32, 0, 16), work, H200)
    # 24 SMs x 4 warps x 32 lanes x 16 B = 49152 B in flight / 600 ns = 81.9 GB/s.
    assert small.achieved_bandwidth == pytest.approx(24 * 4 * 32 * 16 / 600e-9)
    assert small.memory_seconds == pytest.approx(64e6 / small.achieved_bandwidth)
    assert small.bound == "memory"


def test_shared_memory_time_scales_with_the_conflict_ways():
    launch = GpuLaunch(132, 128, 32, 8192, 16)
    requests = 132 * 1.98e6  # one wavefront per SM per clock: 1 ms of shared memory at 1.98 GHz
    clean = gpu_kernel_time(launch, GpuWork(0, fma_flops=1e3, shared_requests=requests), H200)
    assert clean.shared_seconds == pytest.approx(1e-3)
    assert clean.bound == "shared"
    conflicted = gpu_kernel_time(launch, GpuWork(0, fma_flops=1e3, shared_requests=requests, conflict_ways=2.19), H200)
    assert conflicted.shared_seconds == pytest.approx(2.19e-3)
    assert conflicted.seconds == pytest.approx(H200.launch_overhead + 2.19e-3)


def test_tensor_core_and_tf32_rates():
    gemm = 2.0 * 4096**3
    f32 = GpuWork(dram_bytes=3 * 4096 * 4096 * 4, fma_flops=gemm)
    bf16 = GpuWork(dram_bytes=3 * 4096 * 4096 * 2, tensor_flops=gemm, tensor_peak=H200.peak_tensor_flops)
    tf32 = GpuWork(dram_bytes=3 * 4096 * 4096 * 4, tensor_flops=gemm, tensor_peak=H200.peak_tf32_flops)
    assert roofline_seconds(f32, H200) == pytest.approx(gemm / 67e12)
    assert roofline_seconds(bf16, H200) == pytest.approx(gemm / 989e12)
    assert roofline_seconds(tf32, H200) == pytest.approx(gemm / 494e12)
    # A small GEMM's roofline bound is its bytes: 48 MB at 4.8 TB/s.
    small = GpuWork(dram_bytes=48e6, tensor_flops=2.0 * 1024**3, tensor_peak=H200.peak_tensor_flops)
    assert roofline_seconds(small, H200) == pytest.approx(1e-5)
    launch = GpuLaunch(1024, 256, 128, 64 * 1024, 64)
    ratio = H200.peak_tensor_flops / H200.peak_tf32_flops  # 989 / 494
    assert gpu_kernel_time(launch, tf32, H200).compute_seconds == pytest.approx(ratio * gpu_kernel_time(launch, bf16, H200).compute_seconds)


def _only_op(text: str):
    from fusecc.compiler.parser import parse_module

    module = parse_module(text, "unit.ir")
    return next(op for op in module.walk() if op.name in ("tensor.matmul", "tensor.attention"))


def _matmul(element: str) -> str:
    return (
        f"func.func @f(%a: tensor<512x1024x{element}>, %b: tensor<1024x1024x{element}>) -> tensor<512x1024x{element}> {{\n"
        f"  %0 = tensor.matmul %a, %b : (tensor<512x1024x{element}>, tensor<1024x1024x{element}>) -> tensor<512x1024x{element}>\n"
        f"  func.return %0 : tensor<512x1024x{element}>\n}}\n"
    )


@pytest.mark.parametrize(
    "element,tf32,unit,peak",
    [("f16", False, "tensor", 989e12), ("bf16", False, "tensor", 989e12), ("f32", False, "fma", 67e12), ("f32", True, "tf32", 494e12)],
)
def test_a_matmul_is_timed_on_the_unit_its_template_uses(element, tf32, unit, peak):
    from fusecc.passes.fusion import cost_model as cm

    op = _only_op(_matmul(element))
    hw = H200.with_tf32(tf32)
    assert cm.contraction_unit(op, hw) == unit
    cost = cm.estimate_ops([op], hw)
    flops = 2.0 * 512 * 1024 * 1024
    assert cost.roofline_seconds == pytest.approx(max(flops / peak, cost.bytes_moved / 4.8e12))
    assert (cost.work.tensor_unit if cost.work.tensor_flops else "fma") == unit


def test_tf32_needs_the_flag_and_a_gpu_and_attention_stays_on_fma():
    from fusecc.passes.backends.hardware import CPU
    from fusecc.passes.fusion import cost_model as cm

    assert not H200.tf32_matmuls and H200.with_tf32().tf32_matmuls and H200.with_tf32(False) is H200
    assert not CPU.with_tf32().tf32_matmuls  # no TF32 unit
    attention = _only_op(
        "func.func @f(%q: tensor<8x128x64xf16>) -> tensor<8x128x64xf16> {\n"
        "  %0 = tensor.attention %q, %q, %q : (tensor<8x128x64xf16>, tensor<8x128x64xf16>, tensor<8x128x64xf16>) -> tensor<8x128x64xf16>\n"
        "  func.return %0 : tensor<8x128x64xf16>\n}\n"
    )
    assert cm.contraction_unit(attention, H200) == "tensor"  # attention_mma: f16 q, k, v, heads of 64
    assert cm.op_flops(attention, H200)[0] == 2.0 * 8 * 128 * 128 * (64 + 64)


@pytest.mark.parametrize(
    "q,k,v,element",
    [
        ((8, 128, 64), (8, 128, 64), (8, 128, 64), "f16"),
        ((8, 128, 64), (8, 128, 64), (8, 128, 64), "bf16"),
        ((8, 128, 64), (8, 128, 64), (8, 128, 64), "f32"),
        ((8, 128, 256), (8, 128, 256), (8, 128, 64), "f16"),
        ((2, 16, 128), (2, 32, 128), (2, 32, 128), "f16"),
    ],
)
def test_the_cost_model_and_the_templates_agree_on_tensor_cores(q, k, v, element):
    from fusecc.passes.fusion import cost_model as cm
    from fusecc.passes.lowering.attention import AttentionProblem
    from fusecc.passes.lowering.attention_mma import attention_mma_kind
    from fusecc.passes.tiling.contraction_shapes import AttentionShape

    def ty(shape):
        return f"tensor<{'x'.join(map(str, shape))}x{element}>"

    out = (*q[:-1], v[-1])
    op = _only_op(
        f"func.func @f(%q: {ty(q)}, %k: {ty(k)}, %v: {ty(v)}) -> {ty(out)} {{\n"
        f"  %0 = tensor.attention %q, %k, %v : ({ty(q)}, {ty(k)}, {ty(v)}) -> {ty(out)}\n"
        f"  func.return %0 : {ty(out)}\n}}\n"
    )
    for hw in (H200, A100):
        template = attention_mma_kind(AttentionProblem.of_op(op), hw)
        assert (cm.contraction_unit(op, hw) == "tensor") == (template is not None)


def test_a_second_launch_costs_a_second_launch_overhead():
    one = gpu_kernel_time(GpuLaunch(132, 128, 32, 0, 16), GpuWork(1e6), H200)
    two = gpu_kernel_time(GpuLaunch(132, 128, 32, 0, 16, launches=2), GpuWork(1e6), H200)
    assert two.seconds - one.seconds == pytest.approx(H200.launch_overhead)


def test_split_k_and_split_kv_are_timed_with_their_second_launch():
    """Decoding shapes: the templates split K (matmul) or the keys
    (attention) and add a second kernel; the cost model counts its blocks,
    its launch and the partial results' traffic."""
    from fusecc.passes.fusion import cost_model as cm

    matmul = _only_op(
        "func.func @f(%x: tensor<1x2816xf32>, %w: tensor<2816x1024xf32>) -> tensor<1x1024xf32> {\n"
        "  %0 = tensor.matmul %x, %w : (tensor<1x2816xf32>, tensor<2816x1024xf32>) -> tensor<1x1024xf32>\n"
        "  func.return %0 : tensor<1x1024xf32>\n}\n"
    )
    attention = _only_op(
        "func.func @f(%q: tensor<8x1x128xf32>, %k: tensor<8x4096x128xf32>) -> tensor<8x1x128xf32> {\n"
        "  %0 = tensor.attention %q, %k, %k : (tensor<8x1x128xf32>, tensor<8x4096x128xf32>, tensor<8x4096x128xf32>) -> tensor<8x1x128xf32>\n"
        "  func.return %0 : tensor<8x1x128xf32>\n}\n"
    )
    for op in (matmul, attention):
        cost = cm.estimate_ops([op], H200)
        assert cost.launch.launches == 2 and cost.launch.blocks >= H200.sm_count
        assert cost.work.dram_bytes == cost.bytes_moved and cost.work.partial_bytes > 0  # the partial results
        assert cost.gpu.combine_seconds > 0  # read back by the second kernel, after the first
        assert cost.roofline_seconds == roofline_seconds(GpuWork(cost.bytes_moved, fma_flops=cost.work.fma_flops), H200)  # the op's own bound
        assert cost.gpu.launch_seconds == 2 * H200.launch_overhead


def test_a_split_launch_reads_its_partials_back_after_the_first_kernel():
    """The second kernel of split-K/split-KV starts when the first ends
    (stream order): its read-back adds to the kernel time, never overlaps;
    the partial writes are the first kernel's traffic; neither enters the
    roofline bound."""
    launch = GpuLaunch(264, 256, 64, 0, 64, launches=2)
    plain = gpu_kernel_time(launch, GpuWork(10e6, fma_flops=1e9), H200)
    split = gpu_kernel_time(launch, GpuWork(10e6, fma_flops=1e9, partial_bytes=48e6), H200)
    assert split.combine_seconds == pytest.approx(48e6 / H200.memory_bandwidth)
    assert split.memory_seconds == pytest.approx(58e6 / split.achieved_bandwidth)
    assert split.kernel_seconds == pytest.approx(max(split.memory_seconds, split.compute_seconds, split.shared_seconds) + split.combine_seconds)
    assert split.kernel_seconds > plain.kernel_seconds
    assert roofline_seconds(GpuWork(10e6, fma_flops=1e9, partial_bytes=48e6), H200) == roofline_seconds(GpuWork(10e6, fma_flops=1e9), H200)


@pytest.mark.parametrize(
    "m, k, n",
    [(128, 768, 2304), (128, 3072, 768), (128, 768, 768), (4096, 4096, 4096), (1, 2816, 1024), (512, 1024, 1024), (3, 17, 1000)],
    ids=["qkv", "ffn-down-split-k", "out-proj", "4096", "decode-split-k", "512", "tiny"],
)
def test_the_tile_chooser_times_a_matmul_as_the_cost_model_does(m, k, n):
    """The tiler may not import the cost model, so `gpu_matmul_seconds`
    repeats its arithmetic for the FMA template: the two agree (the chooser
    adds the second launch of split-K, and rounds each K range up to whole
    BK steps)."""
    from fusecc.compiler.types import f32
    from fusecc.passes.fusion import cost_model as cm
    from fusecc.passes.tiling.contraction_shapes import MatmulShape
    from fusecc.passes.tiling.gpu_matmul_tiles import choose_gpu_matmul_tiles, gpu_matmul_seconds

    op = _only_op(
        f"func.func @f(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n"
        f"  %0 = tensor.matmul %x, %w : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>\n"
        f"  func.return %0 : tensor<{m}x{n}xf32>\n}}\n"
    )
    tiles = choose_gpu_matmul_tiles(MatmulShape.of_op(op), H200)
    chooser = gpu_matmul_seconds(1, m, n, k, tiles, f32, H200) - (H200.launch_overhead if tiles.split_k > 1 else 0.0)
    assert chooser == pytest.approx(cm.estimate_ops([op], H200).gpu.kernel_seconds, rel=0.05)
