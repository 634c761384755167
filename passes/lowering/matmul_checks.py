"""Limits a GPU contraction kernel must keep: its tiles fit the hardware
and each other (`check_gpu_tiles`, `check_resources`), its grid the CUDA
limits (`MAX_GRID_YZ`). Shared by the matmul templates and attention."""

from __future__ import annotations

from fusecc.compiler.types import ScalarType
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.lowering.scalar_emitter import LoweringError
from fusecc.passes.tiling.contraction_shapes import KernelResources, resource_problem
from fusecc.passes.tiling.gpu_matmul_tiles import GpuMatmulTiles, gpu_matmul_resources

# The CUDA grid's y and z extents are limited to 65535 blocks.
MAX_GRID_YZ = 65535


def check_gpu_tiles(tiles: GpuMatmulTiles, element: ScalarType, hardware: Hardware, padded: tuple[bool, bool] = (True, True)) -> KernelResources:
    """The tiles fit the hardware (registers ≤ the per-thread maximum, shared
    memory ≤ the per-block limit, threads ≤ the block limit) and each other."""
    tm, tn = tiles.micro_tile
    if tiles.block_m * tiles.block_n % tiles.threads or tiles.block_m % tm or tiles.block_n % tn:
        raise LoweringError(f"{tiles.threads} threads cannot share a {tiles.block_m}x{tiles.block_n} tile in equal rectangles")
    resources = gpu_matmul_resources(tiles, element, padded)
    check_resources(resources, hardware, "matmul")
    return resources


def check_resources(resources: KernelResources, hardware: Hardware, what: str) -> None:
    problem = resource_problem(resources, hardware, what)
    if problem is not None:
        raise LoweringError(problem)
