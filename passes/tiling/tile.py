"""Tile choices per fusion group and target: the `tiled` level.

`choose_tiles(group, hardware, overrides) -> TileConfig` is the one place
that decides how a group's work is cut into GPU blocks/threads or CPU
worker iterations, and estimates what that costs in registers and shared
memory; the `tile` pass writes its choice on each group as discardable
attributes, and the kernel templates read them back (`tile_config`):

  attribute             kinds                  meaning
  tile.threads          all (GPU)              threads per block (a multiple of the warp size)
  tile.block            elementwise/injective  GPU: elements per block (threads x elements per
                                               thread); CPU: the vector chunk of the last axis
                                               one worker iteration computes
                        matmul                 [BM, BN]: the output tile of one block
                        attention              [BQ, BKV]: query rows per block, keys per step
  tile.k                matmul                 BK: the contraction step
  tile.rows_per_block   reduction/opaque       rows one block reduces; threads per row =
                                               threads / rows_per_block (a power of two)
  tile.split            reduction/opaque       chunks per row; > 1 splits each row over that
                                               many blocks (workers), one kernel per stat level
                                               plus one, through a scratch buffer
  tile.registers        all                    estimated registers per thread (GPU)
  tile.shared_memory    all                    estimated shared memory per block, bytes

A group without attributes is tiled on the fly by the lowering. Options of
the pass (`tile{target=h200 block=128x64 k=32 threads=256 split=4}`)
override the choice for every group they apply to (`block` applies to the
kinds whose block has as many entries); a choice that breaks the
hardware's limits is an error located at the group.

Matmul and attention tiles are the templates' (`matmul.choose_gpu_matmul_tiles`,
`attention.choose_gpu_attention_tiles` and their CPU twins). The register and
shared-memory estimates of every kind come from one function, the fusion
cost model's `kernel_resources`, which uses the same geometry
(`choose_geometry`) for the candidate groups it judges: `tile.registers` is
the number the cost model compared with the hardware's limit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import error
from fusecc.passes.backends.hardware import Hardware, hardware
from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.dialects.fusion import GroupOp

from fusecc.passes.lowering.attention import AttentionProblem, choose_attention_tiles
from fusecc.passes.lowering.kernel_builder import ceil_div, next_pow2, product
from fusecc.passes.lowering.matmul import MatmulProblem, choose_matmul_tiles
from fusecc.passes.lowering.reduction_analysis import RULES, analyse_ops
from fusecc.passes.lowering.scalar_emitter import LoweringError

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


def read_attributes(group: Operation) -> Overrides:
    """Tile attributes already on a group (written by `tile` or by hand)."""
    attrs = group.attributes

    def integer(name):
        a = attrs.get(name)
        return a.value if isinstance(a, A.IntegerAttr) else None

    block = attrs.get(BLOCK)
    return Overrides(
        threads=integer(THREADS),
        block=tuple(block.value) if isinstance(block, A.ArrayAttr) else None,
        k=integer(K),
        rows_per_block=integer(ROWS_PER_BLOCK),
        split=integer(SPLIT),
    )


def tile_config(group: GroupOp, hw: Hardware) -> TileConfig:
    """The group's tiles: its attributes where present, the tiler's choice elsewhere."""
    return choose_tiles(group, hw, read_attributes(group))


# --------------------------------------------------------------------------- choices per kind


def choose_tiles(group: GroupOp, hw: Hardware, overrides: Overrides | None = None) -> TileConfig:
    """The tiles of `group` on `hw`, with their register and shared-memory
    estimates. Sizes the user forced (`overrides`) that break the hardware's
    limits are an error at the group; the tiler's own choices fit (ask
    `limit_problem(hw, config)` to judge a config)."""
    # The estimates are the fusion cost model's (`kernel_resources`), which
    # asks this module and the templates for the geometry of candidate
    # groups: one estimate for the fusion decisions and the tiles.
    from fusecc.passes.fusion.cost_model import kernel_resources

    overrides = overrides or Overrides()
    kind = group.attr("kind")
    outputs = group.yield_op.operands
    config = choose_geometry(kind, group.body_ops(), [v.type.shape for v in outputs], hw, overrides)
    registers, shared = kernel_resources(group, hw, config)
    config = replace(config, registers_per_thread=registers, shared_memory_bytes=shared)
    if overrides != Overrides():
        check_limits(group, hw, config)
    return config


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
    if any(op.name in RULES for op in ops):
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


def row_analysis(ops):
    """The stats and levels (`reduction_analysis.Analysis`) of a group body,
    or None if it is not a row computation."""
    try:
        return analyse_ops(ops)
    except LoweringError:
        return None


def analysis_geometry(analysis) -> tuple[int, int, int] | None:
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
    """The matmul template's tiles (`matmul.choose_matmul_tiles`)."""
    problem = MatmulProblem.of_op(_contraction(ops, "tensor.matmul"))
    block = o.block if o.block is not None and len(o.block) == 2 else None
    tiles = choose_matmul_tiles(problem, hw, block, o.k, o.threads)
    if not hw.is_gpu:
        return TileConfig(block=(tiles.block_m, tiles.block_n))
    return TileConfig(threads=tiles.threads, block=(tiles.block_m, tiles.block_n), k=tiles.block_k)


def _attention(ops, hw: Hardware, o: Overrides) -> TileConfig:
    """The attention template's tiles (`attention.choose_attention_tiles`)."""
    problem = AttentionProblem.of_op(_contraction(ops, "tensor.attention"))
    block = o.block if o.block is not None and len(o.block) == 2 else None
    tiles = choose_attention_tiles(problem, hw, block, o.threads)
    return TileConfig(threads=tiles.threads if hw.is_gpu else 1, block=(tiles.block_q, tiles.block_t))


# --------------------------------------------------------------------------- limits


def check_limits(group: Operation, hw: Hardware, config: TileConfig) -> None:
    problem = limit_problem(hw, config)
    if problem:
        gid = group.attr("id")
        name = f"group {gid}" if gid is not None else "group"
        raise error(group.location, f"tile choice for {name} ({group.attr('kind')}) {problem}")


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


# --------------------------------------------------------------------------- the pass


def parse_block(text: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"block '{text}' is not like 128x64") from None
    return dims


@dataclass(frozen=True)
class Tile(Pass):
    """Chooses tile sizes for every fusion group (`tile.*` attributes)."""

    name = "tile"
    summary = "Choose tile sizes per fusion group and target (tile.* attributes)"
    anchor = "builtin.module"

    target: str = "h200"
    block: str = ""
    k: int = 0
    threads: int = 0
    rows_per_block: int = 0
    split: int = 0

    def run(self, op: Operation, context: PassContext) -> None:
        try:
            hw = hardware(self.target)
            forced = Overrides(self.threads or None, parse_block(self.block), self.k or None, self.rows_per_block or None, self.split or None)
        except ValueError as exc:
            raise error(op.location, f"tile: {exc}") from None
        for group in op.walk():
            if not isinstance(group, GroupOp):
                continue
            own = read_attributes(group)
            merged = Overrides(*(f if f is not None else g for f, g in zip(_fields(forced), _fields(own))))
            config = choose_tiles(group, hw, merged)
            for name in TILE_ATTRIBUTES:
                group.attributes.pop(name, None)
            group.attributes.update(config.attributes())


def _fields(o: Overrides):
    return (o.threads, o.block, o.k, o.rows_per_block, o.split)


__all__ = [
    "BLOCK",
    "ELEMENTS_PER_THREAD",
    "K",
    "Overrides",
    "REGISTERS",
    "ROWS_PER_BLOCK",
    "SHARED_MEMORY",
    "SPLIT",
    "THREADS",
    "TILE_ATTRIBUTES",
    "Tile",
    "TileConfig",
    "choose_tiles",
    "elementwise_block",
    "choose_geometry",
    "elements_per_thread",
    "read_attributes",
    "row_analysis",
    "rows_config",
    "tile_config",
]
