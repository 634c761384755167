"""The attention templates' tiles, GPU and CPU twins: query rows × keys
per block or worker iteration, and on the GPU threads, split-KV and K/V
stages (`choose_attention_tiles`); the time the GPU model gives them
(`attention_seconds`) and the registers and shared memory they need
(`gpu_attention_resources`, `cpu_attention_resources`). The GPU chooser
takes the matmul chooser's full-wave rule (`gpu_matmul_tiles.full_wave_first`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fusecc.compiler.types import f32
from fusecc.passes.backends.hardware import SCHEDULERS_PER_SM, Hardware, resident_blocks
from fusecc.passes.tiling.contraction_shapes import BASE_REGISTERS, AttentionShape, KernelResources, at_hints, resource_problem
from fusecc.passes.tiling.gpu_matmul_tiles import SMALLER_TILE_GAIN, full_wave_first, gpu_matmul_stages
from fusecc.passes.tiling.shapes import ceil_div, next_pow2


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
    """Query rows per worker iteration × 128 keys (8 vectors; 4 on hosts of
    narrower vectors), fewer keys for a short sequence. Rows: without a
    causal mask, all of a head's queries up to CPU_ATTENTION_ROWS (more
    queries: the fewest tiles of at most that, even, a multiple of 8 for
    the template's 8-row register tiles); with one, up to 128 (a power of
    two, at least 32) so that tiles below the diagonal skip keys. Then rows halved while there are fewer than 4
    iterations per core, then rows, then keys, halved while the worker's
    tiles outgrow its cache (`cpu_attention_resources`). `block` forces both.

    Each worker iteration packs kᵀ (a strided scatter) for every key tile it
    visits, so taller iterations pack less per score: MiniLM's attention
    (D = 32, 1 thread, thread CPU time) took 1.6-1.75 ms at 32×64, 1.3-1.5
    at 64×128 and 1.26-1.37 at 128×128 for S = 128, and 11.6-12.0 / 9.6-9.9
    / 8.7-9.2 ms for S = 384; 64×256 was slower. A head's rows in one
    iteration (kᵀ packed once per head; paired runs, 1 thread, thread CPU
    time): 12 heads × 384 × 32 0.92-0.94× the time of 128-row iterations,
    × 384 × 64 0.87-0.90×, × 129 × 64 (one tile of 132 rows, not 128 + 1)
    0.83×, × 512 × 64 0.89× (256 rows: 0.96×)."""
    if block is not None:
        return AttentionTiles(*block)
    keys = 8 * hardware.warp_size if hardware.warp_size >= 16 else 4 * hardware.warp_size  # AVX2: not re-tuned
    bt = min(keys, next_pow2(problem.t))
    if problem.causal:
        bq = min(128, max(32, next_pow2(problem.s)))
    else:
        queries = max(problem.s, 1)  # no queries (S = 0) still get a tile
        bq = max(32, round_up(ceil_div(queries, ceil_div(queries, CPU_ATTENTION_ROWS)), 8))
    while bq > 32 and problem.batch_size * ceil_div(problem.s, bq) < 4 * hardware.sm_count:
        bq = max(32, round_up(bq // 2, 8))
    while cpu_attention_resources(AttentionTiles(bq, bt), problem).shared_bytes > hardware.shared_memory_per_block and bt > hardware.warp_size:
        if bq > 4:
            bq = max(4, round_up(bq // 2, 4))
        else:
            bt //= 2
    return AttentionTiles(bq, bt)


# Query rows per CPU worker iteration without a causal mask (measured: see
# `choose_cpu_attention_tiles`).
CPU_ATTENTION_ROWS = 512


def round_up(n: int, multiple: int) -> int:
    return ceil_div(n, multiple) * multiple


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
