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
