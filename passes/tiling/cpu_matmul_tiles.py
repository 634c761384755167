"""The CPU matmul template's tiles: the MC×NC output block of one worker
iteration and the MR×NR register tile (`choose_cpu_matmul_tiles`,
`cpu_register_tile`), and the vector lanes they need
(`cpu_matmul_resources`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.tiling.contraction_shapes import KernelResources, MatmulShape
from fusecc.passes.tiling.shapes import ceil_div


@dataclass(frozen=True)
class CpuMatmulTiles:
    block_m: int  # MC×NC: the output tile of one worker iteration (cache blocking)
    block_n: int
    micro_m: int  # MR×NR: the register block; NR is a vector loop
    micro_n: int
    pack_b: bool = False  # a first kernel copies B into contiguous K×NR panels
    pack_a: bool = False  # and A into K×MR panels (the MR values of one k in one cache line)


# The CPU register tile: MR rows × NR_VECTORS vectors of B's row. Per k the
# kernel loads NR_VECTORS vectors of B, broadcasts MR values of A (memory
# operands of the FMAs) and issues MR·NR_VECTORS FMAs into as many
# accumulators: 8×2 keeps 16 of the 32 zmm registers accumulating with
# 10 loads per 16 FMAs, so the two FMA pipes, not the two load ports, set
# the pace (16×1 needs 17 loads per 16 FMAs). Measured on one core of the
# CI machine (128×384×1536 with bias+GELU, B packed, thread CPU time):
# 8×2 126-142 GFLOP/s, 16×1 122-132, 4×4 126-141, 12×2 97-104 (12 rows
# leave ragged row blocks at M = 128), OpenBLAS sgemm without the epilogue
# 123-131.
CPU_MICRO_ROWS = 8
CPU_MICRO_VECTORS = 2

# A CPU register tile's contraction loop (the matmul's K loop; attention's
# q·kᵀ loop over d and p·V loop over keys) is unrolled this many times
# (`loop.for {unroll}`): one step is 16 FMAs, 10 loads and 4 scalar loop
# instructions, some of which issue on the two ports the 512-bit FMAs need.
# Measured (1 thread, thread CPU time, caches flushed per call, 2
# alternations, 2026-12-02): 1024×768×3072 + bias + GELU 143 → 152-165
# GFLOP/s unrolled 4 times, 156-157 8 times; 1024×3072×768 154-160 →
# 164-167; BERT-base-L2 B=8 S=128 whole (`fusecc profile --threads 1`)
# 196-207 → 182-183 ms (8 times: 192-194); its attention alone 5.3-5.6 →
# 5.1 ms, at B=1 S=384 3.9-4.0 → 3.7-3.9 ms. The FMAs of each accumulator
# stay in order: the same numbers.
CPU_K_UNROLL = 4


def cpu_register_tile(hardware: Hardware, m: int | None = None) -> tuple[int, int]:
    """(MR, NR) of `hardware`'s vector unit: NR = CPU_MICRO_VECTORS vectors,
    MR rows as many as its registers hold besides the NR_VECTORS loaded
    vectors of B and one broadcast of A, at most CPU_MICRO_ROWS: 8×32 with
    AVX-512 (16 of 32 zmm accumulate), 6×16 with AVX2 (12 of 16 ymm, the
    BLIS Haswell kernel; 8×16 needs 19 and spills in the K loop).

    Where the registers cap MR below CPU_MICRO_ROWS (AVX2), `m` rows take
    the most rows down to CPU_MIN_ACCUMULATORS accumulators that divide
    them: a ragged last tile guards every row of every tile (`Span.guard`),
    which LLVM turns into branches and A values kept on the stack (M = 128,
    1 core, thread CPU time: 6×16 guarded ~62 GFLOP/s, 4×16 ~84; 6×16 at
    M = 132, no guard, ~88)."""
    nr = CPU_MICRO_VECTORS * hardware.warp_size
    rows = max(1, min(CPU_MICRO_ROWS, (hardware.vector_registers - CPU_MICRO_VECTORS - 1) // CPU_MICRO_VECTORS))
    if isinstance(m, int) and m > 0 and rows < CPU_MICRO_ROWS and m % rows:
        least = max(1, ceil_div(CPU_MIN_ACCUMULATORS, CPU_MICRO_VECTORS))
        rows = next((r for r in range(rows, least - 1, -1) if m % r == 0), rows)
    return rows, nr


# Independent accumulators that keep both FMA pipes busy through the FMA's
# 4-cycle latency: 2 pipes × 4 cycles.
CPU_MIN_ACCUMULATORS = 8


# MC×NC, the output block of one worker iteration. B's K×NR panels are read
# once per row block of MC rows, and in a model B comes from memory (the
# weights of all layers do not stay in cache): 128 rows read a transformer
# layer's B once at 128 tokens. Measured, 1 thread, thread CPU time,
# 64×256 → 128×128: BERT-base-L2 B=1 S=128 38.0 → 32.3 ms, B=8 257 → 237,
# S=384 111 → 101; MiniLM-L3 S=384 46.0 → 44.1, B=1 and B=8 at S=128
# within noise. NC is then evened out over the cores (`balanced_block_n`).
CPU_BLOCK = (128, 128)

# The widest NC `balanced_block_n` weighs, in multiples of CPU_BLOCK's.
MAX_BLOCK_N_FACTOR = 4
# Worker iterations above which a launch is taken as even enough over the
# cores (the busiest core's share over the mean is at most 1 + cores/this).
MANY_WORKER_BLOCKS = 256


def choose_cpu_matmul_tiles(problem: MatmulShape, hardware: Hardware, block=None) -> CpuMatmulTiles:
    """MC×NC = CPU_BLOCK (an A block that stays in L2 while B streams through in
    K×NR panels) unless `block` says otherwise, cut to the problem in whole
    register tiles, NC evened out over the cores (`balanced_block_n`); the
    register tile is `cpu_register_tile`'s (8 × 32
    floats with AVX-512, 6 × 16 with AVX2), fewer rows when M is shorter. Whether A and B
    are packed into panels first is the lowering's choice
    (`matmul.with_packing`): it changes neither the tiles nor their cost here."""
    # an empty M (0 rows) still gets a 1-row tile
    micro_rows, nr = cpu_register_tile(hardware, problem.m)
    mr = max(1, min(micro_rows, problem.m))
    mc, nc = block if block is not None else CPU_BLOCK
    mc = max(mr, min(mc, problem.m + mr - 1) // mr * mr)
    if block is None:
        nc = balanced_block_n(problem.batch_size, problem.m, problem.n, mc, mr, nr, hardware.sm_count)
    nc = max(nr, min(nc, problem.n + nr - 1) // nr * nr)
    return CpuMatmulTiles(mc, nc, mr, nr)


@functools.lru_cache(maxsize=1024)
def balanced_block_n(batch: int, m: int, n: int, mc: int, mr: int, nr: int, cores: int) -> int:
    """NC, in whole NR panels: of CPU_BLOCK's NC and the other widths up to
    MAX_BLOCK_N_FACTOR times it, the one whose busiest core does the least
    work (`busiest_core_tiles`: the runtime hands each core one contiguous
    run of the batch × row block × column block worker iterations), then
    the one closest to CPU_BLOCK's, then the wider.

    Only N is cut finer: every row block of MC rows reads all of B, which
    comes from memory in a model, while a column block re-reads only the
    MC×K block of A, which stays in L2 (a block's register tiles read it
    once per panel whatever NC is). One sequence of 128 tokens against
    N = 384 is 3 blocks of 128 columns, 2 on one core and 1 on the other;
    4 of 96 split 2 and 2."""
    default = CPU_BLOCK[1]
    widest = min(MAX_BLOCK_N_FACTOR * default, ceil_div(n, nr) * nr)
    candidates = range(nr, max(nr, widest) + 1, nr)
    return min(candidates, key=lambda nc: (busiest_core_tiles(batch, m, n, mc, nc, mr, nr, cores), abs(nc - default), -nc))


def busiest_core_tiles(batch: int, m: int, n: int, mc: int, nc: int, mr: int, nr: int, cores: int) -> float:
    """The register tiles (MR×NR, a ragged one counted whole) of the core
    with the most: the worker iterations (batch, row block, column block;
    the column fastest, as the lowering delinearises them) in `cores`
    contiguous runs whose lengths differ by at most one, as the runtime's
    pool splits a launch. Past MANY_WORKER_BLOCKS iterations, the mean."""
    row_tiles = [ceil_div(min(mc, m - start), mr) for start in range(0, m, mc)] or [0]
    panels = [ceil_div(min(nc, n - start), nr) for start in range(0, n, nc)] or [0]
    extent = batch * len(row_tiles) * len(panels)
    if extent == 0:
        return 0.0
    if extent > MANY_WORKER_BLOCKS:
        return batch * sum(row_tiles) * sum(panels) / cores
    work = [row_tiles[p // len(panels) % len(row_tiles)] * panels[p % len(panels)] for p in range(extent)]
    parts = max(1, min(cores, extent))
    return float(max(sum(work[extent * k // parts:extent * (k + 1) // parts]) for k in range(parts)))


def cpu_matmul_resources(tiles: CpuMatmulTiles) -> KernelResources:
    """On the CPU, registers are vector lanes: the MR×NR accumulators and a
    vector of B's row; the tiles only stream through the caches."""
    return KernelResources(1, tiles.micro_m * tiles.micro_n + tiles.micro_n, 0)
