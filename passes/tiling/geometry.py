"""Kernel geometry: how a group's work is cut into blocks and threads (GPU)
or worker iterations (CPU), and the limits a choice must respect.

`choose_geometry(kind, ops, output_shapes, hardware, overrides)` is the one
place that decides it, for a materialised group (the `tile` pass) and for a
candidate group alike (the fusion cost model, through `resources.py`); the
lowering templates read the same choices back from the group. Matmul and
attention tiles are `matmul_tiles.py`'s and `attention_tiles.py`'s. The `tile.*` attribute names the
`tile` pass writes are here too (see `tile.py` for their meaning).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fusecc.compiler import attributes as A
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.tiling.attention_tiles import choose_attention_tiles
from fusecc.passes.tiling.contraction_shapes import AttentionShape, MatmulShape
from fusecc.passes.tiling.matmul_tiles import choose_matmul_tiles
from fusecc.passes.tiling.shapes import ceil_div, next_pow2, product

THREADS = "tile.threads"
BLOCK = "tile.block"
K = "tile.k"
ROWS_PER_BLOCK = "tile.rows_per_block"
SPLIT = "tile.split"
REGISTERS = "tile.registers"
SHARED_MEMORY = "tile.shared_memory"
TILE_ATTRIBUTES = (THREADS, BLOCK, K, ROWS_PER_BLOCK, SPLIT, REGISTERS, SHARED_MEMORY)


@dataclass(frozen=True)
class TileConfig:
    threads: int = 1
    block: tuple[int, ...] = ()
    k: int = 0
    rows_per_block: int = 1
    split: int = 1
    registers_per_thread: int = 0
    shared_memory_bytes: int = 0
    statistics: int = 0  # sums and maxima a row kernel reduces (for the estimates; not an attribute)

    @property
    def threads_per_row(self) -> int:
        return self.threads // self.rows_per_block

    def attributes(self) -> dict[str, A.Attribute]:
        out: dict[str, A.Attribute] = {}
        if self.threads > 1:
            out[THREADS] = A.IntegerAttr(self.threads)
        if self.block:
            out[BLOCK] = A.from_python(list(self.block))
        if self.k:
            out[K] = A.IntegerAttr(self.k)
        if self.rows_per_block > 1:
            out[ROWS_PER_BLOCK] = A.IntegerAttr(self.rows_per_block)
        if self.split > 1:
            out[SPLIT] = A.IntegerAttr(self.split)
        out[REGISTERS] = A.IntegerAttr(self.registers_per_thread)
        out[SHARED_MEMORY] = A.IntegerAttr(self.shared_memory_bytes)
        return out


@dataclass(frozen=True)
class Overrides:
    """Tile sizes forced by the user; None leaves the choice to the tiler."""

    threads: int | None = None
    block: tuple[int, ...] | None = None
    k: int | None = None
    rows_per_block: int | None = None
    split: int | None = None



# --------------------------------------------------------------------------- choices per kind


def choose_geometry(kind: str, ops, output_shapes, hw: Hardware, overrides: Overrides | None = None) -> TileConfig:
    """How a kernel of `kind` made of `ops` (program order) computing
    outputs of `output_shapes` is cut into blocks and threads (or worker
    iterations): a TileConfig without the estimates. `choose_tiles` asks it
    for a group, the fusion cost model for a candidate group."""
    o = overrides or Overrides()
    if kind == "matmul":
        return _matmul(ops, hw, o)
    if kind == "attention":
        return _attention(ops, hw, o)
    if kind == "horizontal":
        return TileConfig(threads=o.threads or 256) if hw.is_gpu else TileConfig()
    if any(op.name in STAT_SHAPES for op in ops):
        analysis = row_analysis(ops)
        geometry = analysis_geometry(analysis) if analysis is not None else None
        return replace(rows_config(hw, geometry or (1, 1, 1), o), statistics=len(analysis.stats) if analysis is not None else 0)
    shape = max(output_shapes, key=product, default=())
    threads, block = elementwise_block(hw, shape, o.threads)
    if o.block is not None and len(o.block) == 1:
        block = o.block
    return TileConfig(threads=threads, block=block)


def elements_per_thread(config: TileConfig, hw: Hardware) -> int:
    """Elements a GPU thread of an elementwise kernel computes (one unrolled loop)."""
    return max(1, config.block[0] // config.threads) if hw.is_gpu and len(config.block) == 1 and config.threads > 1 else 1


# Elements a GPU thread of an elementwise kernel computes once the grid is
# full (eight blocks per SM): fewer, longer-lived threads.
ELEMENTS_PER_THREAD = 4


def elementwise_block(hw: Hardware, shape: tuple[int, ...], threads: int | None = None) -> tuple[int, tuple[int, ...]]:
    """(threads, block) for an elementwise loop over `shape`."""
    n = product(shape)
    if hw.is_gpu:
        t = threads or (256 if n >= 256 else max(hw.warp_size, next_pow2(n)))
        per_thread = ELEMENTS_PER_THREAD if n >= 8 * t * hw.sm_count else 1
        return t, (t * per_thread,)
    last = shape[-1] if shape else 1
    return 1, (_cpu_chunk(last),)


def _cpu_chunk(last: int) -> int:
    """The vector chunk of the last axis per worker iteration: the whole axis,
    or for long axes a multiple of 16 that divides it (no tail), so that
    long rows still spread over the cores."""
    if last <= 4096:
        return last
    for chunk in range(4096, 1023, -16):
        if last % chunk == 0:
            return chunk
    return last


def analysis_geometry(analysis) -> tuple[int, int, int] | None:
    """(rows, row length, stats reduced together) of a `RowStats` (or of the
    lowering's `reduction_analysis.Analysis`, which has the same shape)."""
    rows = analysis.row_shape()
    if rows is None:
        return None
    length = max(product(s.reduced_shape) for s in analysis.stats)
    together = max(len(level) for level in analysis.levels)
    return product(rows), length, together


def rows_config(hw: Hardware, geometry: tuple[int, int, int], o: Overrides) -> TileConfig:
    """Tiles of a row reduction of `rows` rows of `length` elements, reducing
    `together` stats at once: about 8 elements per thread and row, rows
    packed into blocks of up to 256 threads, and rows split over several
    blocks (workers) when there are too few rows to fill the machine and
    they are long. Its shared memory is `reduction_shared_memory`."""
    rows, length, together = geometry
    if not hw.is_gpu:
        split = o.split or (min(ceil_div(length, 16384), 4 * hw.sm_count) if rows < 2 * hw.sm_count and length >= 65536 else 1)
        return TileConfig(split=max(1, split))
    per_row = min(256, next_pow2(ceil_div(length, 8)))
    threads = o.threads or min(256, max(hw.warp_size, per_row * next_pow2(rows)))
    split = o.split
    if split is None:
        split = 1
        if rows < hw.sm_count and length >= 64 * threads:
            split = max(2, min(64, ceil_div(2 * hw.sm_count, rows), ceil_div(length, 16 * threads)))
    if split > 1:
        rows_per_block = 1
    else:
        rows_per_block = o.rows_per_block or max(1, threads // min(per_row, threads))
    config = TileConfig(threads=threads, rows_per_block=rows_per_block, split=split)
    return replace(config, shared_memory_bytes=reduction_shared_memory(config, together, hw))


def reduction_shared_memory(config: TileConfig, together: int, hw: Hardware) -> int:
    """One partial per warp and stat when a row spans several warps."""
    if config.threads_per_row <= hw.warp_size:
        return 0
    return together * (config.threads // hw.warp_size) * 4


def _contraction(ops, name: str):
    return next(op for op in ops if op.name == name)


def _matmul(ops, hw: Hardware, o: Overrides) -> TileConfig:
    """The matmul template's tiles (`matmul_tiles.choose_matmul_tiles`)."""
    problem = MatmulShape.of_op(_contraction(ops, "tensor.matmul"), inside=ops)  # a concat among them cuts K: no split-K
    block = o.block if o.block is not None and len(o.block) == 2 else None
    tiles = choose_matmul_tiles(problem, hw, block, o.k, o.threads)
    if not hw.is_gpu:
        return TileConfig(block=(tiles.block_m, tiles.block_n))
    return TileConfig(threads=tiles.threads, block=(tiles.block_m, tiles.block_n), k=tiles.block_k)


def _attention(ops, hw: Hardware, o: Overrides) -> TileConfig:
    """The attention template's tiles (`attention_tiles.choose_attention_tiles`)."""
    problem = AttentionShape.of_op(_contraction(ops, "tensor.attention"))
    block = o.block if o.block is not None and len(o.block) == 2 else None
    tiles = choose_attention_tiles(problem, hw, block, o.threads, o.split)
    return TileConfig(threads=tiles.threads if hw.is_gpu else 1, block=(tiles.block_q, tiles.block_t), split=tiles.splits)


# --------------------------------------------------------------------------- row computations

# The statistics a row computation reduces, per op: (kept shape, reduced
# shape) of each, in the order the lowering computes them
# (`lowering/reduction_analysis.py` adds each one's formula; a test checks
# the two agree). A stat waits for the stats its operands wait for, and an
# op's second stat for its first (softmax's sum needs its max).


def _without(shape, axes) -> tuple[int, ...]:
    return tuple(d for a, d in enumerate(shape) if a not in set(axes))


def _reduce_stats(op):
    shape, axes = op.operands[0].type.shape, op.normalized_axes
    return [(_without(shape, axes), tuple(shape[a] for a in axes))]


def _softmax_stats(op):
    shape = op.operands[0].type.shape
    axis = op.attr("axis") % len(shape)
    return 2 * [(_without(shape, [axis]), (shape[axis],))]


def _norm_stats(op):
    shape = op.operands[0].type.shape
    return (2 if op.name == "tensor.layernorm" else 1) * [(tuple(shape[:-1]), tuple(shape[-1:]))]


def _matmul_stats(op):
    a = op.operands[0].type.shape
    k = a[-2] if op.attr("transpose_a") and len(a) >= 2 else a[-1]
    return [(tuple(op.results[0].type.shape), (k,))]


def _attention_stats(op):
    out, length = tuple(op.results[0].type.shape), op.operands[1].type.shape[-2]
    return 2 * [(out[:-1], (length,))] + [(out, (length,))]  # max, sum, the weighted sum


STAT_SHAPES = {
    "tensor.reduce_sum": _reduce_stats,
    "tensor.reduce_mean": _reduce_stats,
    "tensor.reduce_max": _reduce_stats,
    "tensor.reduce_min": _reduce_stats,
    "tensor.softmax": _softmax_stats,
    "tensor.layernorm": _norm_stats,
    "tensor.rmsnorm": _norm_stats,
    "tensor.matmul": _matmul_stats,
    "tensor.attention": _attention_stats,
}


@dataclass(frozen=True)
class RowStat:
    kept_shape: tuple[int, ...]
    reduced_shape: tuple[int, ...]
    level: int


@dataclass
class RowStats:
    levels: list[list[RowStat]]  # levels[0] holds the stats that wait for no other

    @property
    def stats(self) -> list[RowStat]:
        return [s for level in self.levels for s in level]

    def row_shape(self) -> tuple[int, ...] | None:
        """The kept shape every stat shares (the rows of a fused row kernel), or None."""
        shapes = {s.kept_shape for s in self.stats}
        return shapes.pop() if len(shapes) == 1 else None


def row_analysis(ops) -> RowStats | None:
    """The stats and their levels of a group body, or None if it is not a
    row computation (an op outside the tensor dialect)."""
    depth: dict = {}  # value -> number of stat levels it waits for
    stats: list[RowStat] = []
    for op in ops:
        base = max((depth.get(v, 0) for v in op.operands), default=0)
        rule = STAT_SHAPES.get(op.name)
        if rule is None:
            if not op.name.startswith("tensor."):
                return None
            shapes = []
        else:
            shapes = rule(op)
        stats.extend(RowStat(kept, reduced, base + i) for i, (kept, reduced) in enumerate(shapes))
        for r in op.results:
            depth[r] = base + len(shapes)
    levels: list[list[RowStat]] = [[] for _ in range(max((s.level for s in stats), default=-1) + 1)]
    for s in stats:
        levels[s.level].append(s)
    return RowStats(levels)


# --------------------------------------------------------------------------- limits


def limit_problem(hw: Hardware, config: TileConfig) -> str | None:
    if not hw.is_gpu:
        if config.threads != 1:
            return f"uses {config.threads} threads per block, but the {hw.name} target runs one thread per worker"
        return None
    t = config.threads
    if t > hw.max_threads_per_block or t % hw.warp_size:
        return f"uses {t} threads per block; the {hw.name} needs a multiple of {hw.warp_size} up to {hw.max_threads_per_block}"
    if config.rows_per_block < 1 or t % config.rows_per_block or not _is_pow2(t // config.rows_per_block):
        return f"puts {config.rows_per_block} rows in a block of {t} threads; threads per row must be a power of two"
    if config.split < 1:
        return f"splits rows into {config.split} chunks"
    if config.shared_memory_bytes > hw.shared_memory_per_block:
        return f"needs {config.shared_memory_bytes} bytes of shared memory; the {hw.name} allows {hw.shared_memory_per_block} per block"
    if config.registers_per_thread > hw.registers_per_thread:
        return f"needs about {config.registers_per_thread} registers per thread; the {hw.name} has {hw.registers_per_thread}"
    if config.registers_per_thread * t > hw.registers_per_sm:
        return f"needs about {config.registers_per_thread * t} registers per block; the {hw.name} has {hw.registers_per_sm} per SM"
    if config.block and any(b <= 0 for b in config.block):
        return f"has an empty block {list(config.block)}"
    return None


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


__all__ = [
    "BLOCK",
    "ELEMENTS_PER_THREAD",
    "K",
    "Overrides",
    "REGISTERS",
    "ROWS_PER_BLOCK",
    "RowStats",
    "SHARED_MEMORY",
    "SPLIT",
    "STAT_SHAPES",
    "THREADS",
    "TILE_ATTRIBUTES",
    "TileConfig",
    "analysis_geometry",
    "choose_geometry",
    "elements_per_thread",
    "elementwise_block",
    "limit_problem",
    "row_analysis",
    "rows_config",
]
