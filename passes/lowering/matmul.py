"""Matmul groups: tiled matrix products with a fused epilogue.

A `matmul` group holds exactly one `tensor.matmul` (batched, broadcast
batch, 1-D promotion and transposed operands all allowed), an optional
cheap elementwise prologue on its operands (computed while the operands are
read) and an epilogue on its result: elementwise ops (bias, activation,
residual, cast) and layout ops (a head split), applied to the accumulators
before the single store (see `epilogue.py`). Tile sizes come from the
tiler's `tile.*` attributes (`gpu_matmul_tiles`, `cpu_matmul_tiles`), which
come from the choosers here (`choose_gpu_matmul_tiles`,
`choose_cpu_matmul_tiles`); what they cost in registers and shared memory is
`gpu_matmul_resources`. The tiler and the fusion cost model both ask these.

GPU (Triton-style block tiles, boundary masks):

    loop.parallel [N/BN, M/BM, batch] (block.x, block.y, block.z)
      a_tile = alloc shared [BK, BM]; b_tile = alloc shared [BK, BN]
      loop.parallel [BM/TM * BN/TN] (thread.x)
        acc[TM][TN] = loop.for k0 in 0..K step BK (carrying the accumulators)
          a_tile, b_tile <- A[rows, k0:k0+BK], B[k0:k0+BK, cols]  (all threads, guarded)
          barrier
          acc += a_tile[kk, my rows] * b_tile[kk, my cols]   (loop.for kk, unrolled)
          barrier
        epilogue(acc) -> store, guarded at the edges

Each thread owns a TM×TN micro-tile of rows `ty + i·BM/TM` and columns
`tx + j·BN/TN`: consecutive threads take consecutive columns, so the shared
reads and the global stores are contiguous. Tiles are staged transposed
(k-major), and the global reads of a tile are spread over the threads in
the operand's memory order (coalesced for transposed operands too).

CPU (register tiles under cache blocking, the structure docs/cpu-target.md
recommends: the backend widens the vector loop, loop.for and all):

    loop.parallel [batch * M/MC * N/NC] (worker)        -- MC×NC output blocks
      loop.for n0 in block step NR                       -- a K×NR panel of B stays in cache
        loop.for m0 in block step MR                     -- register tiles down the block
          loop.parallel [NR] (vector)
            acc[MR] = loop.for k in 0..K: acc_i += A[m0+i, k] * B[k, n0+j]
                                          prefetch this tile's share of the next B panel
            epilogue(acc_i) -> store, guarded at the edges

A weight (a constant B) is packed at load into K×NR panels, which come from
memory on every call; each register tile prefetches a 1/(MC/MR) share of
the next panel (`b_prefetch_step`), so the stream is spread over the whole
panel's work instead of stalling its first tile.

Concatenated operands (sibling matmuls merged on concatenated weights and
biases: `x @ concat(wq, wk, wv) + concat(bq, bk, bv)`): the emitter would
choose the piece per element, a branch inside the K loop on every load.
Instead each axis of the product is cut where an operand changes pieces
(`MatmulProblem.piece_bounds`) and tiled span by span, tiles never crossing
a cut: the grid (GPU) or the worker loop (CPU) has the tiles of every span,
a chain of uniform `loop.if`s on the tile index picks the span once per
block, and each span gets its own copy of the loops above with the range of
its indices known (`IndexMath.assume`), so every concat in it (weights in
the K loop, biases in the epilogue) reads one piece's buffer directly. Cuts
along K become consecutive K loops carrying the accumulators. Each span's
last tile is guarded at the span's end, as the separate matmuls' would be.
"""

from __future__ import annotations

import math
from dataclasses import replace

from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import BlockArgument, Operation, Value
from fusecc.compiler.types import MemRefType
from fusecc.dialects import loop
from fusecc.dialects import tensor as T
from fusecc.dialects.fusion import GroupOp

from fusecc.passes.lowering.dynamic_loops import is_dynamic
from fusecc.passes.lowering.epilogue import Epilogue
from fusecc.passes.lowering.interface import Launch, LoweredGroup, kernel_name, template
from fusecc.passes.lowering.kernel_builder import ceil_div
from fusecc.passes.lowering.kernel_writer import KernelWriter
from fusecc.passes.lowering.matmul_checks import MAX_GRID_YZ, check_gpu_tiles, check_resources  # noqa: F401  (attention.py's too)
from fusecc.passes.lowering.matmul_gpu import lower_matmul_gpu  # the GPU template (padded tiles, vector loads, cp.async)
from fusecc.passes.lowering.matmul_split_k import lower_matmul_split_k
from fusecc.passes.lowering.matmul_mma import lower_matmul_mma, mma_kind
from fusecc.passes.lowering.scalar_emitter import IndexMath, LoweringError, broadcast_index
from fusecc.passes.lowering.spans import Span, in_span, spans, total_tiles  # noqa: F401  (the templates share them)
from fusecc.passes.tiling.tile import hinted_copy
from fusecc.passes.tiling.contraction_shapes import MAX_SPECIALISED_COPIES, MatmulShape  # noqa: F401  (the tests ask MAX_SPECIALISED_COPIES here)
from fusecc.passes.tiling.cpu_matmul_tiles import CPU_K_UNROLL, CpuMatmulTiles, choose_cpu_matmul_tiles
from fusecc.passes.tiling.gpu_matmul_tiles import (  # noqa: F401  (gpu_matmul_resources with the tile choosers, for the tests)
    GpuMatmulTiles,
    choose_gpu_matmul_tiles,
    gpu_matmul_resources,
)


# --------------------------------------------------------------------------- the problem


def the_only(group: GroupOp, op_class: type[Operation]) -> Operation:
    """The one op of a kind that a matmul or attention group is built around."""
    found = [op for op in group.body_ops() if isinstance(op, op_class)]
    if len(found) != 1:
        raise LoweringError(f"a {group.attr('kind')} group holds exactly one {op_class.name}, but group at {group.location} holds {len(found)}")
    return found[0]


class MatmulProblem(MatmulShape):
    """A matmul group's problem: its shape (`tiling/contraction_shapes.py`: what
    tiles and costs depend on) and the index of each operand's element."""

    @classmethod
    def of(cls, group: GroupOp) -> "MatmulProblem":
        return cls.of_op(the_only(group, T.MatmulOp))

    def batch_index(self, flat: Value, im: IndexMath) -> list[Value]:
        return im.delinearize(flat, self.batch) if self.batch else []

    def _operand_index(self, operand: Value, transposed: bool, bidx, row: Value, col: Value, im: IndexMath) -> list[Value]:
        """The element of an operand at logical (row, col) of its matrix."""
        shape = operand.type.shape
        logical = self._logical(shape, transposed)
        idx = broadcast_index([*bidx, row, col], (*self.batch, *logical[-2:]), logical, im)
        return [*idx[:-2], idx[-1], idx[-2]] if transposed else idx

    def a_index(self, bidx, m: Value, k: Value, im: IndexMath) -> list[Value]:
        if self.lhs.type.rank == 1:
            return [k]
        return self._operand_index(self.lhs, self.op.attr("transpose_a"), bidx, m, k, im)

    def b_index(self, bidx, k: Value, n: Value, im: IndexMath) -> list[Value]:
        if self.rhs.type.rank == 1:
            return [k]
        return self._operand_index(self.rhs, self.op.attr("transpose_b"), bidx, k, n, im)

    def result_index(self, bidx, m: Value, n: Value) -> list[Value]:
        idx = list(bidx)
        if self.lhs.type.rank > 1:
            idx.append(m)
        if self.rhs.type.rank > 1:
            idx.append(n)
        return idx


# --------------------------------------------------------------------------- tile sizes


def tile_attribute(group: GroupOp, name: str, default):
    """A tile choice the tiler put on the group (`tile.block`, `tile.k`,
    `tile.threads`; see tiling.py), or the template's own default."""
    value = group.attributes.get(name)
    return default if value is None else value.value


def with_packing(problem: MatmulProblem, tiles: CpuMatmulTiles) -> CpuMatmulTiles:
    """`tiles` (`cpu_matmul_tiles.choose_cpu_matmul_tiles`) with the packing
    choice (`pack_operand_cpu`: A into K×MR, B into K×NR panels, k-major).

    B is packed when it is a constant of the program (a weight: the CPU
    runtime packs it once, at load, so the panels cost nothing per call),
    or when its rows are long (PACK_ROW_BYTES): unpacked, each k of a B
    panel is on another page. A is read in place: the MR = 8 rows a register
    tile reads at one k fit in one L1 set even when K·4 is a multiple of
    4 KB (8 ≤ 12 ways), and packing it cost more than it saved (measured,
    one core, B packed, thread CPU time: 128×1536×384 147 GFLOP/s unpacked,
    131 with A packed; 128×3072×768 127 / 121; 512×3072×768 145 / 137)."""
    mr, nr = tiles.micro_m, tiles.micro_n
    size = problem.accumulator.byte_size
    # each k of a B panel on another page: half speed unless B sits on huge
    # pages; the copy is worth it from PACK_WIDE_B_ROWS rows of A up
    long_b_rows = problem.k * size >= PACK_ROW_BYTES or (problem.n * size >= PACK_ROW_BYTES and problem.m >= PACK_WIDE_B_ROWS)
    # An operand computed in the group (a cast, a scale) is packed too: its
    # prologue then runs once per element instead of once per register tile
    # that reads it. Panels follow the operand's rows (A)
    # or columns (B) from 0, so where concatenated pieces cut them into spans
    # (piece_bounds) every cut must fall on a panel's edge.
    bounds = problem.piece_bounds()
    aligned_m = all(cut % mr == 0 for cut in bounds["m"][1:-1])
    aligned_n = all(cut % nr == 0 for cut in bounds["n"][1:-1])
    pack_a = problem.lhs.type.rank >= 2 and problem.n > nr and aligned_m and has_prologue(problem.lhs)
    wanted_b = is_program_constant(problem.rhs) or (problem.m > mr and (long_b_rows or has_prologue(problem.rhs)))
    pack_b = problem.rhs.type.rank >= 2 and aligned_n and wanted_b
    return replace(tiles, pack_a=pack_a, pack_b=pack_b)


def gpu_matmul_tiles(group: GroupOp, problem: MatmulProblem, hardware: Hardware) -> GpuMatmulTiles:
    """`tile.block = [BM, BN]`, `tile.k = BK`, `tile.threads` as the tiler
    set them; what it leaves out, `choose_gpu_matmul_tiles` fills in."""
    block = tile_attribute(group, "tile.block", None)
    return choose_gpu_matmul_tiles(problem, hardware, block, tile_attribute(group, "tile.k", None), tile_attribute(group, "tile.threads", None))


def cpu_matmul_tiles(group: GroupOp, problem: MatmulProblem, hardware: Hardware) -> CpuMatmulTiles:
    """`tile.block = [MC, NC]` as the tiler set it, else `choose_cpu_matmul_tiles`'s."""
    return with_packing(problem, choose_cpu_matmul_tiles(problem, hardware, tile_attribute(group, "tile.block", None)))


# CPU matmuls pack a B that is not a constant when its rows or A's are this
# long (bytes) or longer: the copy moves N·K elements for 2·M·N·K flops
# (a few percent of the time), while unpacked such rows cost up to half
# the speed. Measured on one core of the CI machine, 16×16 register tiles
# (A and B packed alike then):
# K = 3072 at 40-45 GFLOP/s unpacked, 84-95 packed; K = 768, N = 768 at
# 98-103 unpacked, 93-97 packed; K = 768, N = 3072 at 96 unpacked when B
# sits on huge pages but half that when it does not (each k of a panel on
# another 4 KB page), 92 packed either way.
PACK_ROW_BYTES = 4096
# Packing B costs about 1/(2·M) of the product's work; at M = 128 (a
# transformer layer's 128 tokens) the copy cost 10-15% where unpacked B on
# huge pages ran at full speed, at M = 512 it costs 4% and saves up to half.
PACK_WIDE_B_ROWS = 256
PACK_K = 16  # values of k per worker iteration of a pack kernel

# --------------------------------------------------------------------------- the template


@template("matmul")
def lower_matmul(group: GroupOp, hardware: Hardware) -> LoweredGroup:
    problem = MatmulProblem.of(group)
    if not hardware.is_gpu:
        return lower_matmul_cpu(group, problem, dynamic_cpu_tiles(group, hardware) if is_dynamic(group) else cpu_matmul_tiles(group, problem, hardware), hardware)
    dynamic = is_dynamic(group)  # `?` rows or batch: the FMA template, its grid computed at launch (docs/dynamic-shapes.md, CUDA)
    kind = mma_kind(group, problem, hardware) if not dynamic else None  # tensor cores: f16/bf16 (and f32 under --allow-tf32) on sm_80+
    if kind is not None:
        return lower_matmul_mma(group, problem, kind, hardware)
    tiles = dynamic_gpu_tiles(group, hardware) if dynamic else gpu_matmul_tiles(group, problem, hardware)
    if tiles.split_k > 1 and problem.k_splittable:  # the chooser splits only such K (MatmulShape.k_splittable)
        return lower_matmul_split_k(group, problem, tiles, hardware)
    writer = lower_matmul_gpu(group, problem, replace(tiles, split_k=1), hardware)
    return LoweredGroup([Launch(writer.finish(), writer.arg_refs)])


def dynamic_gpu_tiles(group: GroupOp, hardware: Hardware) -> GpuMatmulTiles:
    """The GPU tiles of a group with `?` dims: chosen at the --shape-hint
    sizes on a copy of the group, without split-K (its partial sums would be
    a `?`-sized scratch per split)."""
    hinted = hinted_copy(group)
    try:
        tiles = gpu_matmul_tiles(hinted, MatmulProblem.of(hinted), hardware)
    finally:
        hinted.erase()
    return replace(tiles, split_k=1)


def dynamic_cpu_tiles(group: GroupOp, hardware: Hardware) -> CpuMatmulTiles:
    """The CPU tiles of a group with `?` dims (docs/dynamic-shapes.md): chosen,
    packing included, at the --shape-hint sizes on a copy of the group. A B
    with `?` dims is an activation: when packed (kᵀ read through a
    transpose, say), it is packed per call into a `?`-sized scratch like A's
    panels, never at load. (Packing it per call measured 1.30x -> 1.21x the
    static program's time, tests/passes/lowering/inputs/bert_attention_dynamic.ir
    at B=8, S=128, one thread.)"""
    hinted = hinted_copy(group)
    try:
        return cpu_matmul_tiles(hinted, MatmulProblem.of(hinted), hardware)
    finally:
        hinted.erase()


def lower_matmul_cpu(group: GroupOp, problem: MatmulProblem, tiles: CpuMatmulTiles, hardware: Hardware) -> LoweredGroup:
    mc, nc, mr, nr = tiles.block_m, tiles.block_n, tiles.micro_m, tiles.micro_n
    if mc % mr or nc % nr:
        raise LoweringError(f"the {mc}x{nc} output block is not a multiple of the {mr}x{nr} register block")
    lowered = LoweredGroup()
    packs = {}  # operand position (0: A, 1: B) -> (packed type, scratch ref)
    for position, wanted, width in ((0, tiles.pack_a, mr), (1, tiles.pack_b, nr)):
        if wanted:
            packed_type = MemRefType([math.prod(operand_batch(problem, position)), ceil_div((problem.m, problem.n)[position], width), problem.k, width], problem.accumulator)
            ref = lowered.add_scratch(packed_type)
            pack = pack_operand_cpu(group, problem, position, width, packed_type, hardware)
            lowered.launches.append(Launch(pack.finish(), pack.arg_refs + [ref]))
            packs[position] = (packed_type, ref)
    w = KernelWriter(group, hardware, extra_args=[t for t, _ in packs.values()])
    packed = dict(zip(packs, w.extra))
    epilogue = Epilogue(group, problem.result, w.outputs, "matmul")
    im, s = w.im, w.s
    bounds = problem.piece_bounds()
    m_spans, n_spans, k_spans = spans(bounds["m"], mc), spans(bounds["n"], nc), spans(bounds["k"], 1)
    acc_type = problem.accumulator
    row_blocks, col_blocks = total_tiles(m_spans), total_tiles(n_spans)
    prefetch_step = b_prefetch_step(problem, tiles) if 1 in packed else 0

    def worker(p: Value) -> None:
        batch_flat, row_block, col_block = im.delinearize(p, [problem.batch_size, row_blocks, col_blocks])
        bidx = problem.batch_index(batch_flat, im)
        # The pieces of concatenated operands are chosen here, per block of
        # outputs, not per element inside the K loop.
        in_span(w, n_spans, col_block, lambda ns, local_col: in_span(w, m_spans, row_block, lambda ms, local_row: output_block(bidx, ms, local_row, ns, local_col)))

    def output_block(bidx, ms: Span, local_row: Value, ns: Span, local_col: Value) -> None:
        row0 = im.add(im.mul(local_row, im.const(mc)), im.const(ms.start))
        col0 = im.add(im.mul(local_col, im.const(nc)), im.const(ns.start))
        row_end = w.min_index(im.add(row0, im.const(mc)), ms.end)
        col_end = w.min_index(im.add(col0, im.const(nc)), ns.end)
        packed_batch = {}
        for position in packed:
            own = operand_batch(problem, position)
            packed_batch[position] = im.linearize(broadcast_index(bidx, problem.batch, own, im), own)

        def register_tile(m0: Value, n0: Value, whole: bool = False, whole_columns: bool = False) -> None:
            # The MR×NR tile at (m0, n0): a vector loop over its NR columns
            # around the K loop, which carries one accumulator per row (each
            # a vector register row once the vector loop is widened).
            rows = [im.add(m0, im.const(i)) for i in range(mr)]
            row_ok = [None if whole else ms.guard(w, m, mr) for m in rows]
            a_panel, b_panel = im.div(m0, mr), im.div(n0, nr)
            if prefetch_step:
                # this tile's share of the next B panel: (t·K + k)·step elements in
                next_b_panel = im.add(b_panel, im.const(1))
                prefetch_first = im.mul(im.div(w.index_sub(m0, row0), mr), im.const(problem.k * prefetch_step))

            def column(j: Value) -> None:
                n = im.add(n0, j)
                col_ok = None if whole_columns else ns.guard(w, n, nr)

                def k_step(k: Value, *acc: Value) -> list[Value]:
                    # packed panels are zero past M and N: no guards
                    if 1 in packed:
                        b = w.load(packed[1], [packed_batch[1], b_panel, k, j])
                    else:
                        b = w.value_at(problem.rhs, problem.b_index(bidx, k, n, im), col_ok)
                    if prefetch_step:
                        ahead = im.add(prefetch_first, im.mul(k, im.const(prefetch_step)))
                        w.b.create(loop.PrefetchOp, [packed[1], packed_batch[1], next_b_panel, im.const(0), ahead])
                    if 0 in packed:
                        a = [w.load(packed[0], [packed_batch[0], a_panel, k, im.const(i)]) for i in range(mr)]
                    else:
                        a = [w.value_at(problem.lhs, problem.a_index(bidx, rows[i], k, im), row_ok[i]) for i in range(mr)]
                    # one rounding per step (math.fma): one FMA instruction,
                    # twice the rate of a multiply and an add on two pipes
                    return [s.fma(a[i], b, acc[i]) for i in range(mr)]

                # One K loop per range of K pieces, each carrying the accumulators on.
                acc = [s.const(0, acc_type)] * mr
                for ks in k_spans:
                    acc = w.named_loop(w.for_(ks.start, ks.end, 1, lambda k, *a, ks=ks: k_step(im.assume(k, ks.start, ks.end), *a), acc, "k", unroll=CPU_K_UNROLL), "acc")
                for i in range(mr):
                    epilogue.emit(w.emitter, problem.result_index(bidx, rows[i], n), acc[i], w.all_of(row_ok[i], col_ok))

            w.parallel([nr], ["vector"], column, ["j"])

        # Column panels outside, register tiles down the block's rows inside:
        # a K×NR panel of B stays in cache for all of them, and the block's
        # MC×K rows of A for all its panels.
        def column_panel(n0: Value) -> None:
            if type(ns.end) is int:
                w.for_(row0, row_end, mr, lambda m0: row_tile(m0, n0), name="m0")
                return
            # `?` columns (N of a B with `?` dims, say q @ kᵀ over S keys):
            # whole panels run unguarded, only the ragged last one checks
            # its columns against N; once per panel, outside the row loop.
            inside = w.cmp("le", im.add(n0, im.const(nr)), ns.end)
            w.if_(
                inside,
                lambda: w.for_(row0, row_end, mr, lambda m0: row_tile(m0, n0, whole_columns=True), name="m0"),
                lambda: w.for_(row0, row_end, mr, lambda m0: row_tile(m0, n0), name="m0"),
            )

        def row_tile(m0: Value, n0: Value, whole_columns: bool = False) -> None:
            if type(ms.end) is int:
                register_tile(m0, n0, whole_columns=whole_columns)
                return
            # `?` rows (docs/dynamic-shapes.md): whole tiles run unguarded,
            # only the ragged last one checks its rows against M.
            inside = w.cmp("le", im.add(m0, im.const(mr)), ms.end)
            w.if_(inside, lambda: register_tile(m0, n0, whole=True, whole_columns=whole_columns), lambda: register_tile(m0, n0, whole_columns=whole_columns))

        w.for_(col0, col_end, nr, column_panel, name="n0")

    w.outer([problem.batch_size * row_blocks * col_blocks], ["worker"], worker, ["block"])
    lowered.launches.append(Launch(w.finish(), w.arg_refs + [ref for _, ref in packs.values()]))
    return lowered


def b_prefetch_step(problem: MatmulProblem, tiles: CpuMatmulTiles) -> int:
    """Elements of the next packed B panel each register tile prefetches per
    k (0: none), so that the MC/MR tiles of a block, each over its K steps,
    cover the whole next panel between them.

    A weight comes from memory on every call (a model's weights do not stay
    in cache). Unprefetched, the first register tile of each K×NR panel
    streams it at the FMAs' pace (NR floats per MR·NR/W FMAs: 48 GB/s with
    AVX-512), which one core cannot draw from memory, and stalls; the other
    tiles find it in L2. Prefetched a panel ahead, spread over all tiles, the
    stream needs 1/(MC/MR) of that. (Measured, 1 thread, thread CPU time,
    caches flushed before each call: see docs/performance.md.) One tile
    (M ≤ MR) reads each panel once: nothing to spread it over."""
    tiles_per_block = tiles.block_m // tiles.micro_m
    if tiles_per_block < 2:
        return 0
    return ceil_div(tiles.micro_n, tiles_per_block)


def is_program_constant(operand: Value) -> bool:
    """Is the operand a block argument of its group that the program feeds
    with a `tensor.constant` (a weight), or a concatenation of such (sibling
    weights merged, passes/fusion/siblings.py)?"""
    op = operand.defining_op
    if isinstance(op, T.ConcatOp):
        return all(is_program_constant(piece) for piece in op.operands)
    if not isinstance(operand, BlockArgument):
        return False
    group = operand.block.parent_op
    if not isinstance(group, GroupOp) or operand.block is not group.body:
        return False
    return isinstance(group.operands[operand.index].defining_op, T.ConstantOp)


def has_prologue(operand: Value) -> bool:
    """Is the operand computed in the group, beyond a concatenation of
    inputs (which the spans of piece_bounds read piece by piece for free)?"""
    op = operand.defining_op
    return op is not None and not (isinstance(op, T.ConcatOp) and all(v.defining_op is None for v in op.operands))


def operand_batch(problem: MatmulProblem, position: int) -> tuple[int, ...]:
    """A's (position 0) or B's (1) own batch dimensions (1 where broadcast)."""
    operand, transposed = (problem.lhs, "transpose_a") if position == 0 else (problem.rhs, "transpose_b")
    return problem._logical(operand.type.shape, problem.op.attr(transposed))[:-2]


def pack_operand_cpu(group: GroupOp, problem: MatmulProblem, position: int, width: int, packed_type: MemRefType, hardware: Hardware) -> KernelWriter:
    """The kernel `<name>_pack_a` or `_pack_b`: the operand (its prologue
    applied) as panels of `width` rows of A, or columns of B, k-major:

        packed[batch, p, k, i] = A[batch, p·MR + i, k]   or   B[batch, k, p·NR + i]

    zero past M or N, so that the matmul reads each panel front to back and
    the MR values of A it needs at one k share a cache line (unpacked, MR
    rows K apart fall into one cache set when K·4 is a multiple of 4 KB).
    One worker iteration per block of PACK_K values of k, all panels: it
    reads PACK_K whole rows of B (or a PACK_K-wide strip of A) and writes
    PACK_K·width contiguous values into each panel."""
    operand = problem.lhs if position == 0 else problem.rhs
    name = "a" if position == 0 else "b"
    # An operand with `?` dims is packed per call; its kernel also takes the
    # group's outputs, whose dims give sizes its input alone may not (the
    # S of a [B*S, 192] input read as [B*4, S, 16]; docs/dynamic-shapes.md).
    w = KernelWriter(group, hardware, name=f"{kernel_name(group)}_pack_{name}", extra_args=[packed_type], with_outputs=not operand.type.is_static)
    (packed,) = w.extra
    im = w.im
    batch = operand_batch(problem, position)
    batches, panels, K = math.prod(batch), packed_type.shape[1], problem.k
    k_blocks = ceil_div(K, PACK_K)
    extent = problem.m if position == 0 else problem.n
    transposed = problem.op.attr("transpose_a" if position == 0 else "transpose_b")

    def worker(u: Value) -> None:
        flat, k_block = im.delinearize(u, [batches, k_blocks])
        bidx = im.delinearize(flat, batch) if batch else []
        k0 = im.mul(k_block, im.const(PACK_K))
        k_end = w.min_index(im.add(k0, im.const(PACK_K)), K)

        def panel(p: Value) -> None:
            first = im.mul(p, im.const(width))

            def row(k: Value) -> None:
                def lane(i: Value) -> None:
                    x = im.add(first, i)  # a row of A or a column of B
                    logical = [x, k] if position == 0 else [k, x]
                    idx = [*bidx, *(logical[::-1] if transposed else logical)]
                    w.store(w.value_at(operand, idx, w.below(x, extent, extent % width != 0)), packed, [flat, p, k, i])

                w.parallel([width], ["vector"], lane, ["i"])

            w.for_(k0, k_end, 1, row, name="k")

        w.for_(0, panels, 1, panel, name="p")

    w.outer([batches * k_blocks], ["worker"], worker, ["k_block"])
    return w
