"""A matmul's tiles for the hardware's kind: the GPU chooser
(`gpu_matmul_tiles.py`) or the CPU one (`cpu_matmul_tiles.py`), and how
often those tiles read each operand (`reload_factors`)."""

from __future__ import annotations

from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.tiling.contraction_shapes import MatmulShape
from fusecc.passes.tiling.cpu_matmul_tiles import CpuMatmulTiles, choose_cpu_matmul_tiles
from fusecc.passes.tiling.gpu_matmul_tiles import GpuMatmulTiles, choose_gpu_matmul_tiles
from fusecc.passes.tiling.shapes import ceil_div


def choose_matmul_tiles(problem: MatmulShape, hardware: Hardware, block=None, k: int | None = None, threads: int | None = None) -> GpuMatmulTiles | CpuMatmulTiles:
    """The tiles for `hardware`'s kind (a CPU takes only `block`)."""
    if hardware.is_gpu:
        return choose_gpu_matmul_tiles(problem, hardware, block, k, threads)
    return choose_cpu_matmul_tiles(problem, hardware, block)


def reload_factors(problem: MatmulShape, tiles: GpuMatmulTiles | CpuMatmulTiles) -> tuple[int, int]:
    """How many times the kernel reads each element of A and of B: A once
    per column tile (a block's BN, or a CPU register tile's NR columns), B
    once per row tile (BM, or MR rows). A prologue on an operand runs that
    often."""
    if isinstance(tiles, GpuMatmulTiles):
        return ceil_div(problem.n, tiles.block_n), ceil_div(problem.m, tiles.block_m)
    return ceil_div(problem.n, tiles.micro_n), ceil_div(problem.m, tiles.micro_m)
