"""Matmul and attention geometry: problem shapes, tile choices, resources.

The tiler (`tile.py`), the fusion cost model and the lowering templates
(`lowering/matmul.py`, `lowering/attention.py`) all ask here, so the tiles
a template builds are the tiles the cost model judged and the tiler wrote:

* `MatmulShape`, `AttentionShape`: a contraction in canonical form (the
  templates' `MatmulProblem` and `AttentionProblem` add the indexing);
* `choose_matmul_tiles`, `choose_attention_tiles` (GPU and CPU twins):
  the templates' tile sizes, which `block`/`k`/`threads` may force;
* `gpu_matmul_resources`, `gpu_attention_resources` and the CPU twins: the
  registers and shared memory those tiles need (`resource_problem` says
  which hardware limit they break).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields, replace

from fusecc.compiler.dims import hinted, hinted_shape
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import ScalarType, broadcast_shapes, f32
from fusecc.passes.backends.hardware import SCHEDULERS_PER_SM, Hardware, resident_blocks
from fusecc.passes.tiling.shapes import ceil_div, compute_type, concat_boundaries, next_pow2

# The most specialised copies of the inner loops one kernel gets for the
# pieces of its concatenated operands (ranges along M x N x K); the cost model
# merges at most this many sibling matmuls (cost_model.sibling_merge_refusal).
MAX_SPECIALISED_COPIES = 16



@dataclass(frozen=True)
class MatmulShape:
    """One matmul in canonical form: [batch] × (M×K) · (K×N): what its tiles
    and costs depend on (the lowering's `MatmulProblem` adds the indexing)."""

    op: Operation  # the tensor.matmul
    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    # The group's ops where the operands' producers are not yet a group's
    # region (a candidate group of the cost model): `concat_boundaries`' `inside`.
    inside: frozenset | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of_op(cls, op: Operation, inside=None) -> "MatmulShape":
        a, b = cls._logical(op.lhs.type.shape, op.attr("transpose_a")), cls._logical(op.rhs.type.shape, op.attr("transpose_b"))
        m = a[-2] if len(a) >= 2 else 1
        n = b[-1] if len(b) >= 2 else 1
        batch = broadcast_shapes(a[:-2], b[:-2])
        return cls(op, tuple(batch), m, n, a[-1], frozenset(inside) if inside is not None else None)

    @staticmethod
    def _logical(shape, transposed: bool) -> tuple[int, ...]:
        return (*shape[:-2], shape[-1], shape[-2]) if transposed else tuple(shape)

    @property
    def lhs(self) -> Value:
        return self.op.lhs

    @property
    def rhs(self) -> Value:
        return self.op.rhs

    @property
    def result(self) -> Value:
        return self.op.result

    @property
    def batch_size(self) -> int:
        return math.prod(self.batch)

    @property
    def accumulator(self) -> ScalarType:
        return compute_type(self.result.type.element_type)

    def piece_bounds(self) -> dict[str, tuple[int, ...]]:
        """Per axis of the product ("m", "n", "k"): 0, the offsets where a
        concatenated operand changes pieces (`concat_boundaries`), the extent.
        Sibling matmuls merged on concatenated weights cut N; at most
        MAX_SPECIALISED_COPIES combinations of ranges are specialised (N
        first, then K, then M), the other axes keep one range."""
        cuts: dict[str, set[int]] = {"m": set(), "n": set(), "k": set()}
        for operand, transposed, (row, col) in ((self.lhs, self.op.attr("transpose_a"), "mk"), (self.rhs, self.op.attr("transpose_b"), "kn")):
            rank = operand.type.rank
            if rank == 1:
                cuts["k"] |= concat_boundaries(operand, 0, self.inside)
                continue
            row_axis, col_axis = (rank - 1, rank - 2) if transposed else (rank - 2, rank - 1)
            cuts[row] |= concat_boundaries(operand, row_axis, self.inside)
            cuts[col] |= concat_boundaries(operand, col_axis, self.inside)
        extents = {"m": self.m, "n": self.n, "k": self.k}
        bounds, copies = {}, 1
        for axis in "nkm":
            inner = sorted(cuts[axis])
            if copies * (len(inner) + 1) > MAX_SPECIALISED_COPIES:
                inner = []
            copies *= len(inner) + 1
            bounds[axis] = (0, *inner, extents[axis])
        return bounds

    @property
    def k_splittable(self) -> bool:
        """Can the GPU FMA template sum K in separate ranges (split-K)? Only
        where it reads K as one range: it does not cut the pieces of an
        operand concatenated along K (`piece_bounds`). The one predicate the
        tile chooser, the cost model (through it) and the lowering ask, so
        such a matmul is tiled and costed as it runs: unsplit."""
        return len(self.piece_bounds()["k"]) == 2


@dataclass(frozen=True)
class AttentionShape:
    """One attention in canonical form: [batch] × S queries, T keys, depth D,
    value depth Dv (the lowering's `AttentionProblem` adds the indexing)."""

    op: Operation  # the tensor.attention
    batch: tuple[int, ...]
    s: int
    t: int
    d: int
    dv: int

    @classmethod
    def of_op(cls, op: Operation) -> "AttentionShape":
        q, k, v = (x.type.shape for x in (op.query, op.key, op.value))
        batch = broadcast_shapes(q[:-2], k[:-2], v[:-2])
        return cls(op, tuple(batch), q[-2], k[-2], q[-1], v[-1])

    @property
    def batch_size(self) -> int:
        return math.prod(self.batch)

    @property
    def mask(self) -> Value | None:
        return self.op.mask

    @property
    def scale(self) -> float:
        return self.op.effective_scale()

    @property
    def causal(self) -> bool:
        return bool(self.op.attr("causal"))


def at_hints(problem):
    """A matmul or attention problem with its dynamic sizes at the
    --shape-hint sizes (compiler/dims.py): what a cost or a choice that
    compares sizes sees of a group with `?` dims."""
    changes = {}
    for field in fields(problem):
        value = getattr(problem, field.name)
        if isinstance(value, tuple) and not all(type(d) is int for d in value):
            changes[field.name] = hinted_shape(value)
        elif hasattr(value, "free_symbols"):
            changes[field.name] = hinted(value)
    return replace(problem, **changes) if changes else problem


# --------------------------------------------------------------------------- matmul tiles


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


@dataclass(frozen=True)
class CpuMatmulTiles:
    block_m: int  # MC×NC: the output tile of one worker iteration (cache blocking)
    block_n: int
    micro_m: int  # MR×NR: the register block; NR is a vector loop
    micro_n: int
    pack_b: bool = False  # a first kernel copies B into contiguous K×NR panels
    pack_a: bool = False  # and A into K×MR panels (the MR values of one k in one cache line)


@dataclass(frozen=True)
class KernelResources:
    """Estimated per-block needs of a kernel (the tiler, the cost model and the templates ask);
    on the CPU, registers are vector lanes and shared memory the tiles a
    worker keeps in cache."""

    threads: int
    registers_per_thread: int
    shared_bytes: int


# Registers a thread needs besides its tile values: indices, addresses, loop
# counters, the guard and staging temporaries (ptxas reports ~20-30 for such kernels).
BASE_REGISTERS = 32


def resource_problem(resources: KernelResources, hardware: Hardware, what: str) -> str | None:
    """The first limit of `hardware` that `resources` break, as a sentence, or None."""
    if not 0 < resources.threads <= hardware.max_threads_per_block:
        return f"{what} tiles need {resources.threads} threads per block; {hardware.name} allows 1..{hardware.max_threads_per_block}"
    if resources.registers_per_thread > hardware.registers_per_thread:
        return f"{what} tiles need ~{resources.registers_per_thread} registers per thread; {hardware.name} has {hardware.registers_per_thread}"
    if resources.registers_per_thread * resources.threads > hardware.registers_per_sm:
        return f"{what} tiles need ~{resources.registers_per_thread * resources.threads} registers per block; {hardware.name} has {hardware.registers_per_sm} per SM"
    if resources.shared_bytes > hardware.shared_memory_per_block:
        return f"{what} tiles need {resources.shared_bytes} bytes of shared memory; {hardware.name} allows {hardware.shared_memory_per_block} per block"
    return None


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
# within noise. 128 columns also split N = 384/768 into equal blocks for 2 cores.
CPU_BLOCK = (128, 128)


def choose_cpu_matmul_tiles(problem: MatmulShape, hardware: Hardware, block=None) -> CpuMatmulTiles:
    """MC×NC = CPU_BLOCK (an A block that stays in L2 while B streams through in
    K×NR panels) unless `block` says otherwise, cut to the problem in whole
    register tiles; the register tile is `cpu_register_tile`'s (8 × 32
    floats with AVX-512, 6 × 16 with AVX2), fewer rows when M is shorter. Whether A and B
    are packed into panels first is the lowering's choice
    (`matmul.with_packing`): it changes neither the tiles nor their cost here."""
    # an empty M (0 rows) still gets a 1-row tile
    micro_rows, nr = cpu_register_tile(hardware, problem.m)
    mr = max(1, min(micro_rows, problem.m))
    mc, nc = block if block is not None else CPU_BLOCK
    mc = max(mr, min(mc, problem.m + mr - 1) // mr * mr)
    nc = max(nr, min(nc, problem.n + nr - 1) // nr * nr)
    return CpuMatmulTiles(mc, nc, mr, nr)


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


def cpu_matmul_resources(tiles: CpuMatmulTiles) -> KernelResources:
    """On the CPU, registers are vector lanes: the MR×NR accumulators and a
    vector of B's row; the tiles only stream through the caches."""
    return KernelResources(1, tiles.micro_m * tiles.micro_n + tiles.micro_n, 0)



# --------------------------------------------------------------------------- attention tiles


@dataclass(frozen=True)
class AttentionTiles:
    block_q: int  # BQ: query rows per block (GPU) or per worker iteration (CPU)
    block_t: int  # BT: keys per tile
    threads: int = 1  # GPU threads per block: BQ / R row groups × TPR lanes each
    splits: int = 1  # GPU split-KV: key ranges run by separate blocks, then combined
    stages: int = 1  # GPU K/V tile buffers: 2 double-buffers the key loop (cp.async, sm_80+)

    @property
    def threads_per_row(self) -> int:
        """TPR: the consecutive lanes that share a group of query rows (GPU),
        each taking the keys and output columns lane, lane + TPR, ...: eight,
        so that the lanes of a row write one whole 32-byte sector."""
        return min(ATTENTION_LANES_PER_ROW, self.block_t)

    @property
    def rows_per_thread(self) -> int:
        """R: the query rows a thread computes (register blocking: each key
        and value it loads from shared memory serves R rows)."""
        return max(1, self.block_q * self.threads_per_row // max(1, self.threads))


ATTENTION_LANES_PER_ROW = 8

# The GPU block tiles (BQ, threads), fullest first; TPR = 8 lanes per row
# group, so R = BQ·8 / threads rows per thread: 4, 2, 4, 2, 2, 1. At least
# two, so that with float4 loads a thread makes at most one shared load per
# four FMAs (`attention_shared_requests`), except the last, taken only
# where all queries fit one tile (decoding: 2 rows a thread would leave a
# one-warp block, a quarter of the SM's schedulers).
GPU_ATTENTION_TILES = ((64, 128), (32, 128), (32, 64), (16, 64), (8, 32), (8, 64))


def attention_vector_widths(tiles: AttentionTiles, problem: AttentionShape) -> tuple[int, int, int]:
    """Elements per shared load of the GPU template's main loops: (q and k
    rows along d, probabilities along the keys, values along Dv). Four where
    the rows allow an aligned float4 (D a multiple of 4; a thread's
    ⌈Dv/TPR⌉ output columns in whole groups of 4 or 2: the v tile's columns
    are stored permuted so that they are consecutive, `attention_v_column`)."""
    tpr = tiles.threads_per_row
    d_width = 4 if problem.d % 4 == 0 else 1
    p_width = 4 if tiles.block_t % 4 == 0 else 1
    outputs = problem.dv // tpr
    v_width = next((x for x in (4, 2) if problem.dv % (tpr * x) == 0 and outputs % x == 0), 1)
    return d_width, p_width, v_width


def attention_v_column(c: int, tpr: int, width: int) -> int:
    """Where column `c` of V goes in the shared v tile: in chunks of TPR·width
    columns, lane l's columns l, l + TPR, ... (the ones it accumulates)
    become `width` consecutive words at l·width, one aligned vector load."""
    chunk = tpr * width
    return (c // chunk) * chunk + (c % tpr) * width + (c % chunk) // tpr


def attention_shared_requests(tiles: AttentionTiles, problem: AttentionShape) -> tuple[float, float]:
    """(warp-level shared-memory loads, FMA instructions) per warp and key
    tile of the GPU template: per W_d values of d (float4: W_d = 4), R query
    vectors (broadcast to the row group) and BT/TPR key vectors for
    R·BT/TPR·W_d score FMAs; per W_p keys, R probability vectors, and per
    key ⌈Dv/TPR⌉/W_v value vectors for R·⌈Dv/TPR⌉ output FMAs each
    (`attention_vector_widths`)."""
    tpr, r = tiles.threads_per_row, tiles.rows_per_thread
    d_width, p_width, v_width = attention_vector_widths(tiles, problem)
    scores, outputs = ceil_div(tiles.block_t, tpr), ceil_div(problem.dv, tpr)
    loads = ceil_div(problem.d, d_width) * (r + scores) + ceil_div(tiles.block_t, p_width) * r + tiles.block_t * ceil_div(outputs, v_width)
    fmas = problem.d * r * scores + tiles.block_t * r * outputs
    return loads, fmas


def key_tiles_per_split(problem: AttentionShape, tiles: AttentionTiles) -> int:
    """BT-key tiles each of the `splits` key ranges covers (the last may have fewer)."""
    return ceil_div(ceil_div(problem.t, tiles.block_t), tiles.splits)


def attention_seconds(problem: AttentionShape, tiles: AttentionTiles, hardware: Hardware) -> float:
    """The modelled time of the busiest SM, like `gpu_matmul_seconds` for
    matmuls: its ⌈blocks / SMs⌉ blocks' FMAs at its share of the FMA rate,
    slowed by the issue slots of its shared loads and stores or, where
    shared memory cannot keep up (`fma_per_shared_word` FMAs per
    wavefront), by that, and where its resident warps are fewer than its
    four schedulers; with split-KV, plus the combining kernel (a launch, and the
    partial results written and read back)."""
    blocks = attention_blocks(problem, tiles)
    if blocks == 0:  # an empty result: the lowering launches nothing (fuzz seed 145)
        return 0.0
    per_sm = ceil_div(blocks, hardware.sm_count)
    loads, fmas = attention_shared_requests(tiles, problem)
    # its shared stores per key tile: probabilities, and the K and V tiles
    stores = tiles.rows_per_thread * ceil_div(tiles.block_t, tiles.threads_per_row) + ceil_div(tiles.block_t * (problem.d + problem.dv), tiles.threads)
    # issue slots (FMAs and shared instructions, one wavefront each), or shared memory's wavefronts
    shared_factor = max(1.0 + (loads + stores) / fmas, hardware.fma_per_shared_word * (loads + stores) / fmas) if fmas else 1.0
    used = gpu_attention_resources(tiles, problem)
    resident = max(1, resident_blocks(hardware, used.threads, used.registers_per_thread, used.shared_bytes))
    warps = min(per_sm, resident) * ceil_div(tiles.threads, hardware.warp_size)
    block_fmas = tiles.block_q * key_tiles_per_split(problem, tiles) * tiles.block_t * (problem.d + problem.dv)
    fma_rate = hardware.peak_flops / 2 / hardware.sm_count
    seconds = per_sm * block_fmas * shared_factor / min(1.0, warps / SCHEDULERS_PER_SM) / fma_rate
    if tiles.splits > 1:
        partials = 2 * tiles.splits * problem.batch_size * problem.s * (problem.dv + 2) * f32.byte_size
        seconds += hardware.launch_overhead + partials / hardware.memory_bandwidth
    return seconds


SPLIT_KV_CHOICES = (1, 2, 4, 8, 16, 32)


def choose_gpu_attention_tiles(problem: AttentionShape, hardware: Hardware, block=None, threads: int | None = None, splits: int | None = None) -> AttentionTiles:
    """BQ query rows × BT keys: BT = 64 or the key count rounded up to a
    power of two (at least 8); of the (BQ, threads) in `GPU_ATTENTION_TILES`
    that the queries fill and whose registers and shared memory fit
    (`gpu_attention_resources`), each with the keys split into 1, 2, 4, ...
    ranges of at least one tile (split-KV), first those whose grid
    (`attention_blocks`) gives every SM a block, if any do
    (`full_wave_first`, the matmul chooser's rule: issue 13.3's full wave),
    then the one `attention_seconds` finds fastest, or one within
    SMALLER_TILE_GAIN of it that keeps more SMs busy (`sm_balance`), then
    the fuller and less split. The full wave comes first because issue
    13.3 asks every attention launch for one, not because the model shows
    a gain: BERT-base attention (12 heads × 128 queries) takes 8-row
    one-warp tiles (192 blocks) over 16-row two-warp ones (96 blocks),
    which the model finds 5% faster (its time is the busiest SM's, which
    runs the same rows and warps either way; the 8-row tiles stage each
    K/V tile twice). A GPU run decides. A long sequence takes
    64-row tiles whose 4 rows per thread load 3 float4s per 32 FMAs, and
    few query tiles over many keys (decoding) split the keys. `block`,
    `threads` and `splits` force those choices (a forced split counts in
    the grid). When nothing fits, the smallest tile is returned: the cost
    model refuses the fusion and the template the tile."""
    bt = min(64, max(8, next_pow2(problem.t)))
    if block is not None:
        bq, bt = block
        default = next((t for q, t in GPU_ATTENTION_TILES if q == bq), max(hardware.warp_size, bq * min(ATTENTION_LANES_PER_ROW, bt)))
        tiles = AttentionTiles(bq, bt, threads or default, splits or 1)
        return replace(tiles, stages=attention_stages(tiles, problem, hardware))
    fitting = []
    for bq, t in GPU_ATTENTION_TILES:
        if bq > max(8, next_pow2(problem.s)) or bq * ATTENTION_LANES_PER_ROW < 2 * t and problem.s > bq:
            continue
        if resource_problem(gpu_attention_resources(AttentionTiles(bq, bt, t), problem), hardware, "attention") is not None:
            continue
        key_tiles = ceil_div(problem.t, bt)
        for n in SPLIT_KV_CHOICES:
            if n == 1 or n <= key_tiles and splits is None:
                tiles = AttentionTiles(bq, bt, t, n)
                fitting.append(replace(tiles, stages=attention_stages(tiles, problem, hardware)))
    if not fitting:
        bq, t = GPU_ATTENTION_TILES[-1]
        chosen = AttentionTiles(bq, bt, t)
    else:
        # grids that give every SM a block (as for matmuls); of those the
        # fastest, or within SMALLER_TILE_GAIN of it one that keeps more SMs busy
        candidates = full_wave_first(fitting, lambda tiles: attention_blocks(problem, replace(tiles, splits=splits or tiles.splits)), hardware)
        fastest = min(attention_seconds(problem, tiles, hardware) for tiles in candidates)
        close = [tiles for tiles in candidates if attention_seconds(problem, tiles, hardware) <= fastest / (1 - SMALLER_TILE_GAIN)]
        chosen = min(close, key=lambda tiles: (-sm_balance(problem, tiles, hardware), attention_seconds(problem, tiles, hardware)))
    return AttentionTiles(chosen.block_q, chosen.block_t, threads or chosen.threads, splits or chosen.splits, chosen.stages)


def attention_stages(tiles: AttentionTiles, problem: AttentionShape, hardware: Hardware) -> int:
    """K/V buffers of the GPU template: 2 (the next key tile copied by
    cp.async while this one is used) on sm_80+ where both fit the block's
    shared memory (not D = 256 on the H200) and the second buffer does not
    cost the busiest SM resident warps it needs (`attention_seconds`:
    decoding at D = 128 runs 2 blocks per SM with one buffer, 1 with two),
    else 1. A function of the tiles, so the chooser and the template agree;
    a problem with `?` dims is weighed at its --shape-hint sizes, as its
    tiles were chosen (`dynamic_attention_tiles`)."""
    if gpu_matmul_stages(hardware) > 1:
        problem = at_hints(problem)
        single, doubled = replace(tiles, stages=1), replace(tiles, stages=2)
        if resource_problem(gpu_attention_resources(doubled, problem), hardware, "attention") is None:
            if attention_seconds(problem, doubled, hardware) <= attention_seconds(problem, single, hardware):
                return 2
    return 1


def sm_balance(problem: AttentionShape, tiles: AttentionTiles, hardware: Hardware) -> float:
    """The share of the SMs' block slots over the waves that the grid fills:
    on a tie of `attention_seconds` (the busiest SM's time), the grid that
    keeps more SMs busy (more shared-memory bandwidth, the same time)."""
    blocks = attention_blocks(problem, tiles)
    return blocks / (max(1, ceil_div(blocks, hardware.sm_count)) * hardware.sm_count)


def attention_blocks(problem: AttentionShape, tiles: AttentionTiles) -> int:
    """The GPU template's grid: batch·heads × query tiles × key ranges."""
    return problem.batch_size * ceil_div(problem.s, tiles.block_q) * tiles.splits


def choose_cpu_attention_tiles(problem: AttentionShape, hardware: Hardware, block=None) -> AttentionTiles:
    """Up to 128 query rows per worker iteration (at least 32) × 128 keys
    (8 vectors; 4 on hosts of narrower vectors), fewer keys for a short
    sequence; rows halved while there are fewer than 4 iterations per core,
    then rows, then keys, halved while the worker's tiles outgrow its cache
    (`cpu_attention_resources`). `block` forces both.

    Each worker iteration packs every key tile it visits (kᵀ is a strided
    scatter), so more rows per iteration pack less per score: MiniLM's
    attention (D = 32, 1 thread, thread CPU time) took 1.6-1.75 ms at
    32×64, 1.3-1.5 at 64×128 and 1.26-1.37 at 128×128 for S = 128, and
    11.6-12.0 / 9.6-9.9 / 8.7-9.2 ms for S = 384; 64×256 was slower."""
    if block is not None:
        return AttentionTiles(*block)
    keys = 8 * hardware.warp_size if hardware.warp_size >= 16 else 4 * hardware.warp_size  # AVX2: not re-tuned
    bq, bt = min(128, max(32, next_pow2(problem.s))), min(keys, next_pow2(problem.t))
    while bq > 32 and problem.batch_size * ceil_div(problem.s, bq) < 4 * hardware.sm_count:
        bq //= 2
    while cpu_attention_resources(AttentionTiles(bq, bt), problem).shared_bytes > hardware.shared_memory_per_block and bt > hardware.warp_size:
        if bq > 4:
            bq //= 2
        else:
            bt //= 2
    return AttentionTiles(bq, bt)


def choose_attention_tiles(problem: AttentionShape, hardware: Hardware, block=None, threads: int | None = None, splits: int | None = None) -> AttentionTiles:
    """The tiles for `hardware`'s kind (a CPU takes only `block`)."""
    if hardware.is_gpu:
        return choose_gpu_attention_tiles(problem, hardware, block, threads, splits)
    return choose_cpu_attention_tiles(problem, hardware, block)


def gpu_attention_resources(tiles: AttentionTiles, problem: AttentionShape) -> KernelResources:
    """Registers: per row of the thread's R, BT/TPR scores, ⌈Dv/TPR⌉ output
    accumulators, m, l and the base; plus the base. Shared memory: the q, k,
    v and probability tiles in f32, rows padded (`attention_row_pads`), the
    k and v tiles once per stage."""
    tpr, r = tiles.threads_per_row, tiles.rows_per_thread
    d_width, p_width, _ = attention_vector_widths(tiles, problem)
    # the accumulators, m, l and the base per row; the vectors of one d step in flight
    registers = r * (ceil_div(tiles.block_t, tpr) + ceil_div(problem.dv, tpr) + 3 + d_width) + BASE_REGISTERS
    bq, bt = tiles.block_q, tiles.block_t
    q_pad, k_pad, p_pad = attention_row_pads(tiles, problem)
    shared = (bq * (problem.d + q_pad) + tiles.stages * bt * (problem.d + k_pad + problem.dv) + bq * (bt + p_pad)) * f32.byte_size
    return KernelResources(tiles.threads, registers, shared)


def attention_row_pads(tiles: AttentionTiles, problem: AttentionShape) -> tuple[int, int, int]:
    """Words of padding after each row of the q, k and probability tiles, so
    that the rows a warp touches at once fall into different banks: the TPR
    lanes of a row group read TPR consecutive k rows at one d (float4: a row
    of an odd number of 16-byte units, so the TPR vectors fall into distinct
    bank quads; scalar: one word apart, +1); a warp stores its 32/TPR
    consecutive rows × TPR probabilities, so a p row is padded to a multiple
    of 32 plus TPR words."""
    tpr = tiles.threads_per_row
    d_width = attention_vector_widths(tiles, problem)[0]
    d_pad = 1 if d_width == 1 else (4 if problem.d // 4 % 2 == 0 else 0)
    return d_pad, d_pad, (tpr - tiles.block_t) % 32


def cpu_attention_resources(tiles: AttentionTiles, problem: AttentionShape) -> KernelResources:
    """On the CPU: a row of BT scores in vector lanes, and the worker's
    q [BQ, D], kᵀ [D, BT], v [BT, Dv] and output [BQ, Dv] tiles in f32."""
    bq, bt = tiles.block_q, tiles.block_t
    return KernelResources(1, bt, (bq * problem.d + problem.d * bt + bt * problem.dv + bq * problem.dv) * f32.byte_size)
