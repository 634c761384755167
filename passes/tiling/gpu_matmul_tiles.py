"""The GPU matmul template's tiles: the block tile, BK, threads, stages and
split-K (`choose_gpu_matmul_tiles`), the time the model gives them
(`gpu_matmul_seconds`, with the shared-memory traffic it counts) and the
registers and shared memory they need (`gpu_matmul_resources`).

The full-wave rule and the gain a smaller tile must show
(`full_wave_first`, `SMALLER_TILE_GAIN`) are shared with the GPU
attention chooser (`attention_tiles.py`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from fusecc.compiler.types import ScalarType, f32
from fusecc.passes.backends.hardware import SCHEDULERS_PER_SM, Hardware, resident_blocks
from fusecc.passes.tiling.contraction_shapes import BASE_REGISTERS, KernelResources, MatmulShape, resource_problem
from fusecc.passes.tiling.shapes import ceil_div, compute_type, next_pow2


@dataclass(frozen=True)
class GpuMatmulTiles:
    block_m: int  # BM×BN: the output tile of one block
    block_n: int
    block_k: int  # BK: the contraction step staged in shared memory
    threads: int
    stages: int = 1  # shared-memory buffers per operand: 2 double-buffers the K loop (cp.async, sm_80+)
    split_k: int = 1  # ranges of K summed by separate blocks, then added in order (lowering/matmul_split_k.py)

    @property
    def micro_tile(self) -> tuple[int, int]:
        """TM×TN outputs per thread: as square as divides the block tile
        (64×64 over 256 threads: 4×4; 128×128 over 256: 8×8)."""
        per_thread = self.block_m * self.block_n // self.threads
        tm = 1
        while (2 * tm) ** 2 <= per_thread and self.block_m % (2 * tm) == 0 and per_thread % (2 * tm) == 0:
            tm *= 2
        return tm, per_thread // tm


# The GPU block tiles, fullest first: (BM, BN, threads). The TM×TN outputs
# per thread (`GpuMatmulTiles.micro_tile`) shrink with the tile but stay at
# 2×4 or more: with vector loads (float2/float4 of A's column and B's row
# of one k) that is at most one shared load per four FMAs. The small tiles
# give up warps per block (two, one) for that; they exist to fill the SMs.
# 32×32 comes twice: over two warps (4×4 per thread: two float4 loads per
# 16 FMAs, the rate the H200's shared memory keeps up with) and over four
# (2×4: more warps, but shared memory sets the pace); the chooser weighs both.
GPU_MATMUL_TILES = (
    (128, 128, 256),  # 8×8 per thread
    (128, 64, 256),  # 4×8
    (64, 64, 128),  # 4×8
    (64, 32, 128),  # 4×4
    (32, 32, 64),  # 4×4
    (32, 32, 128),  # 2×4
    (32, 16, 64),  # 2×4
    (16, 16, 32),  # 2×4
)
# Shared tiles of an operand staged with k fastest in memory have rows of
# BM + PAD (or BN + PAD) words: a warp then stores 8 k × 4 rows into 32
# distinct banks (PAD ≡ 4 mod 8 keeps every row 16-byte aligned for vector loads).
SHARED_ROW_PAD = 4
ASYNC_COPY_MIN_ARCH = 80  # cp.async: sm_80 and newer
SHARED_WAVEFRONT_WORDS = 32  # one wavefront: a 4-byte word from each of the 32 banks
WORD_BYTES = 4  # tiles are staged in f32 (fusion/gpu_kernels.py WORD)


def shared_wavefronts_per_k(tiles: "GpuMatmulTiles", warp: int = 32) -> int:
    """Wavefronts one warp's fragment loads of one k cost (the tiles are
    conflict-free, so a load costs its distinct words over 32): the warp's
    lanes (tx, ty) of the BN/TN × BM/TM thread grid read ⌈32 / (BN/TN)⌉
    distinct A vectors and min(32, BN/TN) distinct B vectors per load (the
    others are broadcasts). 4×4 over 8 columns of lanes: one each (16 and 32
    words); 8×8 over 16 columns: B's float4s are 64 words, two wavefronts."""
    tm, tn = tiles.micro_tile
    wm, wn = (4 if x % 4 == 0 else 2 if x % 2 == 0 else 1 for x in (tm, tn))  # matmul_gpu.vector_width
    lanes = min(warp, tiles.threads)
    columns = tiles.block_n // tn
    a_words = min(ceil_div(lanes, columns), tiles.block_m // tm) * wm
    b_words = min(lanes, columns) * wn
    return (tm // wm) * ceil_div(a_words, SHARED_WAVEFRONT_WORDS) + (tn // wn) * ceil_div(b_words, SHARED_WAVEFRONT_WORDS)


def staging_requests_per_step(tiles: "GpuMatmulTiles") -> int:
    """Shared-memory stores per thread and BK step: its share of the BM×BK
    and BK×BN tiles, one word each (a warp's 32 words: one wavefront)."""
    return ceil_div((tiles.block_m + tiles.block_n) * tiles.block_k, tiles.threads)


def shared_traffic_per_block(tiles: "GpuMatmulTiles", k: int, warp: int = 32) -> tuple[int, int]:
    """(warp-level shared-memory instructions, their wavefronts) of one
    block of the FMA template over its ⌈K / split⌉ (the counters measure
    the same wavefronts on the CPU harness, a test checks it): per warp and
    BK step its fragment loads (TM/W + TN/V vectors per k,
    `shared_wavefronts_per_k`) and its staging stores (one word each);
    double-buffered, the first tile staged before the loop and, where it
    fits in A's tile, the output tile through shared memory (each thread
    stores its TM×TN micro-tile as vectors, a warp's vector of W words a
    lane costs W wavefronts, and reads back ⌈BM·BN / threads⌉ words)."""
    warps = ceil_div(tiles.threads, warp)
    steps = ceil_div(ceil_div(k, tiles.split_k), tiles.block_k)
    tm, tn = tiles.micro_tile
    wm, wn = (4 if x % 4 == 0 else 2 if x % 2 == 0 else 1 for x in (tm, tn))  # matmul_gpu.vector_width
    staging = staging_requests_per_step(tiles)
    instructions = steps * (tiles.block_k * (tm // wm + tn // wn) + staging)
    wavefronts = steps * (tiles.block_k * shared_wavefronts_per_k(tiles, warp) + staging)
    if tiles.stages > 1 and steps:
        instructions, wavefronts = instructions + staging, wavefronts + staging
        # matmul_gpu.output_row: the output tile staged in A's tile where it fits (BN ≤ stages·BK)
        if tn % 2 == 0 and tiles.threads >= warp and tiles.block_n <= tiles.stages * tiles.block_k:
            reads = ceil_div(tiles.block_m * tiles.block_n, tiles.threads)
            instructions += tm * (tn // wn) + reads
            wavefronts += tm * tn + reads
    return warps * instructions, warps * wavefronts


def gpu_matmul_seconds(batch: int, m: int, n: int, k: int, tiles: GpuMatmulTiles, element: ScalarType, hardware: Hardware) -> float:
    """The modelled time of the FMA template with `tiles` (split-K
    included), as the cost model times it (fusion/gpu_time.py, which the
    tiler may not import; a test checks that the two agree): the busiest
    SM's ⌈blocks / SMs⌉ blocks at its share of the issue rate (each of its
    four schedulers issues one warp instruction a clock: an FMA, or a
    shared load, store or cp.async in its place), slowed where its resident
    warps are fewer than its schedulers, or at one wavefront per clock of
    its shared memory, whichever is slower; or the
    operands' bytes at the DRAM bandwidth the staged tiles in flight
    sustain (Little's law); with split-K, plus the second
    kernel after it: a launch, and the partial sums read back."""
    blocks = batch * ceil_div(m, tiles.block_m) * ceil_div(n, tiles.block_n) * tiles.split_k
    if blocks == 0:
        return 0.0
    sms = hardware.sm_count
    per_sm = ceil_div(blocks, sms)
    used = gpu_matmul_resources(tiles, element)
    resident = max(1, resident_blocks(hardware, used.threads, used.registers_per_thread, used.shared_bytes))
    warps_per_block = ceil_div(tiles.threads, hardware.warp_size)
    issue = min(1.0, min(per_sm, resident) * warps_per_block / SCHEDULERS_PER_SM)
    steps = ceil_div(ceil_div(k, tiles.split_k), tiles.block_k)
    fma_rate = hardware.peak_flops / 2 / sms  # FMAs per second of one SM
    instructions, wavefronts = shared_traffic_per_block(tiles, k, hardware.warp_size)
    compute = per_sm * tiles.block_m * tiles.block_n * steps * tiles.block_k / fma_rate / issue
    if hardware.clock_hz:  # the shared-memory instructions take issue slots the FMAs then lack
        compute += per_sm * instructions / (SCHEDULERS_PER_SM * hardware.clock_hz) / issue
    shared = per_sm * wavefronts / hardware.clock_hz if hardware.clock_hz else 0.0
    partials = batch * tiles.split_k * m * n * f32.byte_size if tiles.split_k > 1 else 0
    # Little's law: the bytes in flight (each thread's share of a staged tile) sustain the bandwidth
    in_flight = min(blocks, sms) * min(per_sm, resident) * warps_per_block * hardware.warp_size * (tiles.block_m + tiles.block_n) * tiles.block_k * WORD_BYTES / tiles.threads
    bandwidth = min(hardware.memory_bandwidth, in_flight / hardware.memory_latency) if hardware.memory_latency > 0 else hardware.memory_bandwidth
    memory = max((batch * (m * k + k * n + m * n) * compute_type(element).byte_size + partials) / bandwidth, hardware.memory_latency)
    seconds = max(compute, shared, memory)
    if partials:
        seconds += hardware.launch_overhead + max(partials / hardware.memory_bandwidth, hardware.memory_latency)
    return seconds


@functools.lru_cache(maxsize=1024)
def _best_gpu_tiles(batch: int, m: int, n: int, k: int, element: ScalarType, hardware: Hardware, splittable: bool = True) -> GpuMatmulTiles:
    """`choose_gpu_matmul_tiles`'s own choice (memoised: the fusion planner
    asks about the same shapes many times); K unsplit unless `splittable`."""
    fitting = []
    stages = gpu_matmul_stages(hardware)
    bk = default_block_k(k)
    for bm, bn, t in GPU_MATMUL_TILES:
        if bm > max(16, next_pow2(m)) or bn > max(16, next_pow2(n)):
            continue
        tiles = GpuMatmulTiles(bm, bn, bk, t, stages)
        if resource_problem(gpu_matmul_resources(tiles, element), hardware, "matmul") is not None:
            continue
        fitting += [replace(tiles, split_k=s) for s in (split_k_choices(k, bk) if splittable else [1])]
    if not fitting:
        last = GPU_MATMUL_TILES[-1]
        return GpuMatmulTiles(last[0], last[1], bk, last[2], stages)
    # Grids that give every SM a block (`full_wave_first`), of those the
    # fastest by the model, the fuller tile and fewer K ranges unless
    # another is SMALLER_TILE_GAIN faster (the model leaves out that smaller
    # tiles reload their operands more often).
    candidates = full_wave_first(fitting, lambda t: batch * ceil_div(m, t.block_m) * ceil_div(n, t.block_n) * t.split_k, hardware)
    best, best_seconds = candidates[0], gpu_matmul_seconds(batch, m, n, k, candidates[0], element, hardware)
    for tiles in candidates[1:]:
        seconds = gpu_matmul_seconds(batch, m, n, k, tiles, element, hardware)
        if seconds < (1 - SMALLER_TILE_GAIN) * best_seconds:
            best, best_seconds = tiles, seconds
    return best


SMALLER_TILE_GAIN = 0.05


def full_wave_first(candidates: list, grid_blocks, hardware: Hardware) -> list:
    """The GPU choosers' first cut (matmul and attention tiles): of
    `candidates`, those whose grid (`grid_blocks(candidate)`, split-K and
    split-KV blocks included) gives every SM at least one block, if any do,
    else all of them. Issue 13.3 asks every matmul and attention launch for
    a full wave on the SMs, or a split where it pays: a grid short of the
    SMs leaves their FMA pipes and shared memory idle whatever its tiles."""
    filling = [c for c in candidates if grid_blocks(c) >= hardware.sm_count]
    return filling or candidates


def gpu_matmul_stages(hardware: Hardware) -> int:
    """2 (double-buffered K loop, cp.async) on sm_80 and newer, else 1."""
    arch = hardware.arch
    return 2 if arch.startswith("sm_") and arch[3:].isdigit() and int(arch[3:]) >= ASYNC_COPY_MIN_ARCH else 1


def default_block_k(k: int) -> int:
    """BK: 32 (fewer barriers per K), less for a shorter K (at least 8)."""
    return min(32, max(8, next_pow2(k)))


def choose_gpu_matmul_tiles(problem: MatmulShape, hardware: Hardware, block=None, k: int | None = None, threads: int | None = None) -> GpuMatmulTiles:
    """The block tile for `problem`: of the tiles in `GPU_MATMUL_TILES` whose
    registers and shared memory fit (`gpu_matmul_resources`) and that the
    matrix fills (BM ≤ M, BN ≤ N, rounded up to a power of two), each with K
    in one range or, where the template can (`MatmulShape.k_splittable`),
    split (`split_k_choices`), the one the model finds
    fastest (`gpu_matmul_seconds`), among those whose grid gives every SM at
    least one block (a full wave) if any do; a smaller tile or more K
    ranges only where that is SMALLER_TILE_GAIN faster.

    So fuller tiles (more reuse of each staged element, more accumulators
    per thread) win until their grid leaves SMs idle or its last wave
    ragged: 4096×4096 takes 128×128 tiles on an H200, the encoder's
    128×2304 QKV and 128×3072 FFN-up 32×32 over two warps (4×4 per thread:
    shared memory keeps up with the FMAs), its 128×768 output projection
    16×16 in one-warp blocks (384), its FFN-down (K = 3072) 32×32 with K
    in 11 ranges (1056 blocks, 8 per SM: the second kernel's launch costs
    less than the idle SMs of an unsplit grid). BK = 32, less for a shorter
    K (`default_block_k`); two stages on sm_80+ (`gpu_matmul_stages`).
    `block`, `k`, `threads` force those choices; K's split is then the
    fastest for the forced tile (`best_split_k`), so the cost model, the
    tiler and the template, asking with the tiler's tile, agree."""
    element = problem.result.type.element_type
    splittable = problem.k_splittable
    chosen = _best_gpu_tiles(problem.batch_size, problem.m, problem.n, problem.k, element, hardware, splittable)
    if block is None and k is None and threads is None:
        return chosen
    if block is None:
        bm, bn, default_threads = chosen.block_m, chosen.block_n, chosen.threads
    else:
        bm, bn = block
        default_threads = next((t for m, n, t in GPU_MATMUL_TILES if (m, n) == (bm, bn)), max(hardware.warp_size, min(256, bm * bn // 16)))
    tiles = GpuMatmulTiles(bm, bn, k or default_block_k(problem.k), threads or default_threads, gpu_matmul_stages(hardware))
    if (tiles.block_m, tiles.block_n, tiles.block_k, tiles.threads) == (chosen.block_m, chosen.block_n, chosen.block_k, chosen.threads):
        return chosen
    return replace(tiles, split_k=best_split_k(problem.batch_size, problem.m, problem.n, problem.k, tiles, element, hardware) if splittable else 1)


# Split-K pays where the grid leaves SMs idle and each range of K stays long:
# at least this many BK steps per split, so the partial sums' round trip
# (M·N·4 bytes out and back per split) stays small against the operand reads.
SPLIT_K_MIN_STEPS = 8


def split_k_choices(k: int, bk: int) -> list[int]:
    """The K ranges the FMA template may sum separately: 1, and each count
    that leaves every range SPLIT_K_MIN_STEPS BK steps or more (whole BK
    steps each, none empty: `split_k_ranges`)."""
    most = k // (SPLIT_K_MIN_STEPS * bk)
    return sorted({1} | {split_k_ranges(k, bk, s) for s in range(2, most + 1)})


def split_k_ranges(k: int, bk: int, splits: int) -> int:
    """The ranges `splits` becomes once each is whole BK steps (none empty)."""
    return ceil_div(k, ceil_div(ceil_div(k, splits), bk) * bk)


def best_split_k(batch: int, m: int, n: int, k: int, tiles: GpuMatmulTiles, element: ScalarType, hardware: Hardware) -> int:
    """For a forced tile: the K ranges the model finds fastest (fewer on a
    SMALLER_TILE_GAIN tie), preferring those that give every SM a block."""
    options = [replace(tiles, split_k=s) for s in split_k_choices(k, tiles.block_k)]
    best, best_seconds = None, 0.0
    for option in full_wave_first(options, lambda t: batch * ceil_div(m, t.block_m) * ceil_div(n, t.block_n) * t.split_k, hardware):
        seconds = gpu_matmul_seconds(batch, m, n, k, option, element, hardware)
        if best is None or seconds < (1 - SMALLER_TILE_GAIN) * best_seconds:
            best, best_seconds = option, seconds
    return best.split_k


def matmul_padded_operands(shape: MatmulShape) -> tuple[bool, bool]:
    """Whether the shared tile of A, of B has padded rows: an operand with k
    fastest in memory (A unless transposed, B if transposed) is staged a
    warp's 8 k × 4 rows at a time, which without padding would hit one bank."""
    return (not shape.op.attr("transpose_a"), bool(shape.op.attr("transpose_b")))


def gpu_matmul_resources(tiles: GpuMatmulTiles, element: ScalarType, padded: tuple[bool, bool] = (True, True)) -> KernelResources:
    """Registers: the TM×TN accumulators, a TM and a TN fragment, the base;
    double-buffered, a 64-bit source address per cp.async a thread issues
    per tile (ptxas keeps them across the K loop: docs/cuda-performance.md).
    Shared memory: per stage one BK×BM and one BK×BN tile of the
    accumulator type, rows `SHARED_ROW_PAD` longer where `padded`
    (`matmul_padded_operands`; both by default: the most it can be)."""
    words = max(1, compute_type(element).byte_size // 4)
    tm, tn = tiles.micro_tile
    registers = (tm * tn + tm + tn) * words + BASE_REGISTERS
    if tiles.stages > 1:
        registers += 2 * ceil_div((tiles.block_m + tiles.block_n) * tiles.block_k, tiles.threads)
    rows = tiles.block_m + tiles.block_n + SHARED_ROW_PAD * sum(padded)
    shared = tiles.stages * rows * tiles.block_k * compute_type(element).byte_size
    return KernelResources(tiles.threads, registers, shared)
