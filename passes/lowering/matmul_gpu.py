"""The GPU matmul template: block tiles in shared memory, register-blocked
micro-tiles read with vector loads, a double-buffered K loop fed by
cp.async (sm_80+), the epilogue fused into the stores.

    loop.parallel [N/BN, M/BM, batch] (block.x, block.y, block.z)
      a_tile = alloc shared [S, BK, BM + pa]; b_tile = alloc shared [S, BK, BN + pb]
      loop.parallel [threads] (thread.x)
        stage(slot 0, k = 0); commit                       -- S = 2 (sm_80+)
        acc[TM][TN] = loop.for k0 in 0..K step BK
          if k0 + BK < K: stage(slot 1 - s, k0 + BK)        -- the next tile, in flight
          commit; wait(1 group pending)                     -- this tile has landed
          barrier
          loop.for kk: a = A_tile[s, kk, my rows] (float4), b = B_tile[s, kk, my cols] (float4)
                       acc += a ⊗ b
          barrier
        epilogue(acc) -> store, guarded at the edges

With one stage (before sm_80) the loop stages its own tile, then computes.

Micro-tile: thread (tx, ty) of a BN/TN × BM/TM grid owns rows
`g·W·(BM/TM) + ty·W + e` and columns `g·V·(BN/TN) + tx·V + e` (W, V: the
vector widths, 4 where TM or TN allow): for each k it reads its TM values
of A and TN of B as TM/W + TN/V vector loads (2×4 and up: at most one load
per four FMAs). A warp's float4 loads of a row of B are 32 consecutive
words (one wavefront); of A, a broadcast.

Staging (`stage`): every element of a tile is copied by one thread. An
operand whose memory order has k fastest (A, or a transposed B) is spread
so that a warp takes 8 consecutive k of 4 rows: the global reads are four
full 32-byte sectors, and with rows of BM + 4 words the shared stores of
the k-major tile fall into 32 distinct banks (unpadded, the 32 k of one row
went to one bank: 32-way). Operands with the row fastest are spread row by
row (consecutive threads, consecutive words: no padding needed). An operand
that is a plain read of an f32 input (transposes, reshapes, broadcasts and
concatenated pieces included) is copied with `loop.copy_async` (zero where
guarded off); one computed on the way (a cast, a scale) is loaded, computed
and stored by the thread.

Concatenated operands are read span by span as in matmul.py (`Span`).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, f32
from fusecc.dialects import loop
from fusecc.dialects.fusion import GroupOp
from fusecc.dialects.loop import GPU_BLOCK
from fusecc.dialects.loop_vector import AsyncCommitOp, AsyncWaitOp, CopyAsyncOp, LoadVectorOp, StoreVectorOp
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.lowering.epilogue import Epilogue
from fusecc.passes.lowering.kernel_builder import ceil_div
from fusecc.passes.lowering.kernel_writer import KernelWriter
from fusecc.passes.lowering.matmul_checks import MAX_GRID_YZ, check_gpu_tiles
from fusecc.passes.lowering.scalar_emitter import LoweringError
from fusecc.passes.lowering.spans import in_span, spans, total_tiles
from fusecc.passes.tiling.gpu_matmul_tiles import SHARED_ROW_PAD, GpuMatmulTiles, matmul_padded_operands

STAGING_WARP = (4, 8)  # rows × k a warp stages of a k-fastest operand


def vector_width(count: int) -> int:
    """The widest vector (4, 2, 1 elements) that divides `count`."""
    return 4 if count % 4 == 0 else 2 if count % 2 == 0 else 1


@dataclass(frozen=True)
class OperandStaging:
    """How one operand's BK×extent tile is laid out and copied."""

    is_rhs: bool
    extent: int  # BM for A, BN for B
    k_fastest: bool  # the operand's memory order has k fastest
    row: int  # words per k row of the shared tile (extent, + SHARED_ROW_PAD when k_fastest)

    @classmethod
    def of(cls, problem, is_rhs: bool, tiles: GpuMatmulTiles) -> "OperandStaging":
        extent = tiles.block_n if is_rhs else tiles.block_m
        k_fastest = matmul_padded_operands(problem)[is_rhs]
        return cls(is_rhs, extent, k_fastest, extent + (SHARED_ROW_PAD if k_fastest else 0))


def lower_matmul_gpu(group: GroupOp, problem, tiles: GpuMatmulTiles, hardware: Hardware, partial: MemRefType | None = None) -> KernelWriter:
    """The kernel; with `partial` (scratch [splits, batch, M, N]: split-K,
    matmul_split_k.py) each block sums one range of K into it, no epilogue."""
    staging = [OperandStaging.of(problem, False, tiles), OperandStaging.of(problem, True, tiles)]
    check_gpu_tiles(tiles, problem.result.type.element_type, hardware, (staging[0].k_fastest, staging[1].k_fastest))
    w = KernelWriter(group, hardware, extra_args=[partial] if partial is not None else [])
    epilogue = Epilogue(group, problem.result, w.outputs, "matmul")
    splits = partial.shape[0] if partial is not None else 1
    im, s = w.im, w.s
    bm, bn, bk, stages = tiles.block_m, tiles.block_n, tiles.block_k, tiles.stages
    tm, tn = tiles.micro_tile
    # float4/float2 vectors of f32 (the harness and the prelude know those); f64 accumulators load scalars
    wm, wn = (vector_width(tm), vector_width(tn)) if problem.accumulator is f32 else (1, 1)
    cols_per_row, rows_per_col = bn // tn, bm // tm  # thread grid: threads along N, along M
    bounds = problem.piece_bounds()
    m_spans, n_spans, k_spans = spans(bounds["m"], bm), spans(bounds["n"], bn), spans(bounds["k"], bk)
    acc_type = problem.accumulator
    c_row = output_row(tiles, wm, wn, staging[0].row, w.hw.warp_size)
    if splits > 1 and len(k_spans) > 1:
        raise LoweringError("split-K takes one range of K (no operand concatenated along K)")
    k_per_split = ceil_div(ceil_div(problem.k, splits), bk) * bk
    grid = [total_tiles(n_spans), total_tiles(m_spans)] + ([problem.batch_size * splits] if type(problem.batch_size) is not int or problem.batch_size * splits > 1 else [])
    if any(type(g) is int and g > MAX_GRID_YZ for g in grid[1:]):  # (a `?` row count: checked per call, kernels.json)
        raise LoweringError(f"matmul grid {grid} exceeds {MAX_GRID_YZ} blocks in y or z; use larger tiles")

    def block(col_block: Value, row_block: Value, z: Value | None = None) -> None:
        a_tile = w.alloc(MemRefType([stages, bk, staging[0].row], acc_type, "shared"), "a_tile")
        b_tile = w.alloc(MemRefType([stages, bk, staging[1].row], acc_type, "shared"), "b_tile")
        batch = im.rem(z, problem.batch_size) if z is not None else im.const(0)
        split = im.div(z, problem.batch_size) if splits > 1 else None
        bidx = problem.batch_index(batch, im)

        def k_range(ks) -> tuple[Value, Value | int]:
            """[lo, hi) of K this block sums: the span, or its split's share."""
            if split is None:
                return im.const(ks.start), ks.end
            lo = im.mul(split, im.const(k_per_split))
            return lo, w.min_index(im.add(lo, im.const(k_per_split)), ks.end)

        def sink(m: Value, n: Value, value: Value, guard) -> None:
            if partial is None:
                epilogue.emit(w.emitter, problem.result_index(bidx, m, n), value, guard)
            else:
                w.store(value, w.extra[0], [split, batch, m, n], guard)

        def output_tile(ms, local_row: Value, ns, local_col: Value) -> None:
            row0 = im.add(im.mul(local_row, im.const(bm)), im.const(ms.start))
            col0 = im.add(im.mul(local_col, im.const(bn)), im.const(ns.start))
            w.parallel([tiles.threads], ["thread.x"], lambda t: thread(t, ms, row0, ns, col0), ["t"])

        def thread(t: Value, ms, row0: Value, ns, col0: Value) -> None:
            tx, ty = im.rem(t, cols_per_row), im.div(t, cols_per_row)
            copies = []  # the loop.copy_async ops staging made (none: no commit and wait)

            def stage(tile: Value, how: OperandStaging, slot: Value, k0: Value, ks, ahead: bool) -> None:
                # This thread's share of the BK-deep tile at k0 into `slot`;
                # `ahead`: k0 may be past the span's end (the prefetch after
                # the last tile), so every k is guarded (its tile is never read).
                operand = problem.rhs if how.is_rhs else problem.lhs
                span, origin = (ns, col0) if how.is_rhs else (ms, row0)
                for (r, c), inside in staging_points(w, t, tiles.threads, how, bk):
                    row, k = im.add(origin, r), im.add(k0, c)
                    if ahead:
                        k_ok = w.below(k, ks.end)
                        im.assume(k, ks.start, ks.end)  # where it is read (k_ok): picks concatenated pieces
                    else:
                        k_ok = ks.guard(w, k, bk)
                    guard = w.all_of(inside, span.guard(w, row, how.extent), k_ok)
                    idx = problem.b_index(bidx, k, row, im) if how.is_rhs else problem.a_index(bidx, row, k, im)
                    value = w.value_at(operand, idx, guard)
                    if stages > 1 and inside is None and copy_async(w, value, tile, [slot, c, r]):
                        copies.append(True)
                        continue
                    w.store(value, tile, [slot, c, r], inside)

            def stage_both(slot: Value, k0: Value, ks, ahead: bool = False) -> None:
                stage(a_tile, staging[0], slot, k0, ks, ahead)
                stage(b_tile, staging[1], slot, k0, ks, ahead)

            def multiply(slot: Value, kk: Value, *acc: Value) -> list[Value]:
                a = fragment(w, a_tile, slot, kk, ty, tm, wm, rows_per_col)
                b = fragment(w, b_tile, slot, kk, tx, tn, wn, cols_per_row)
                return [s.add(acc[i * tn + j], s.mul(a[i], b[j])) for i in range(tm) for j in range(tn)]

            def compute(slot: Value, acc) -> list[Value]:
                return w.named_loop(w.for_(0, bk, 1, lambda kk, *a: multiply(slot, kk, *a), acc, "kk", unroll=bk), "acc")

            def single_stage(ks, k0: Value, *acc: Value) -> list[Value]:
                stage_both(im.const(0), k0, ks)
                return compute(im.const(0), acc)

            def double_stage(ks, lo: Value, k0: Value, *acc: Value) -> list[Value]:
                slot = im.rem(im.div(w.index_sub(k0, lo), bk), 2)
                k_next = im.add(k0, im.const(bk))
                following = w.index_sub(im.const(1), slot)
                # the next tile goes in flight while this one is multiplied
                # (past the end: guarded off, zeros no one reads; no branch)
                stage_both(following, k_next, ks, ahead=True)
                if copies:
                    w.b.create(AsyncCommitOp)
                    w.b.create(AsyncWaitOp, attributes={"pending": 1})
                return compute(slot, acc)

            # One K loop per range of K pieces, each carrying the accumulators on.
            acc = [s.const(0, acc_type)] * (tm * tn)
            for ks in k_spans:
                if ks.width == 0:  # K = 0: nothing to stage or sum, the accumulators stay 0
                    continue
                lo, hi = k_range(ks)
                if stages == 1:
                    acc = w.named_loop(w.for_(lo, hi, bk, lambda k0, *a, ks=ks: single_stage(ks, k0, *a), acc, "k0"), "acc")
                    continue
                stage_both(im.const(0), lo, ks)
                if copies:
                    w.b.create(AsyncCommitOp)
                acc = w.named_loop(w.for_(lo, hi, bk, lambda k0, *a, ks=ks, lo=lo: double_stage(ks, lo, k0, *a), acc, "k0"), "acc")
            if copies:  # nothing in flight past the loop (the zero fills after the last tile included)
                w.b.create(AsyncWaitOp, attributes={"pending": 0})
            local_rows, local_cols = owned(im, ty, tm, wm, rows_per_col), owned(im, tx, tn, wn, cols_per_row)
            if c_row is None:
                rows = [im.add(row0, r) for r in local_rows]
                cols = [im.add(col0, c) for c in local_cols]
                row_ok = [ms.guard(w, m, bm) for m in rows]
                col_ok = [ns.guard(w, n, bn) for n in cols]
                for i, m in enumerate(rows):
                    for j, n in enumerate(cols):
                        sink(m, n, acc[i * tn + j], w.all_of(row_ok[i], col_ok[j]))
                return
            # The output tile through shared memory (A's tile, reused), so
            # that consecutive threads store consecutive columns: the
            # micro-tiles go in as vectors, the epilogue reads them back.
            if copies:
                w.b.create(loop.BarrierOp)  # every thread's copies have landed in A's tile before it is reused
            c_tile = w.b.create(loop.ViewOp, [a_tile], {"offset": 0}, result_types=[MemRefType([bm, c_row], acc_type, "shared")]).result
            c_tile.name_hint = "c_tile"
            for i, r in enumerate(local_rows):
                for g in range(tn // wn):
                    values = acc[i * tn + g * wn : i * tn + (g + 1) * wn]
                    w.b.create(StoreVectorOp, [*values, c_tile, r, local_cols[g * wn]])
            for (r, c), inside in w.cooperative(t, tiles.threads, [bm, bn]):
                m, n = im.add(row0, r), im.add(col0, c)
                value = w.load(c_tile, [r, c], inside)
                sink(m, n, value, w.all_of(inside, ms.guard(w, m, bm), ns.guard(w, n, bn)))

        # The pieces of concatenated operands are chosen here, per block
        # (uniformly for all its threads), not per element.
        in_span(w, n_spans, col_block, lambda ns, local_col: in_span(w, m_spans, row_block, lambda ms, local_row: output_tile(ms, local_row, ns, local_col)))

    w.outer(grid, GPU_BLOCK[: len(grid)], block, ["col_block", "row_block", "batch" if splits == 1 else "batch_split"])
    return w


def output_row(tiles: GpuMatmulTiles, wm: int, wn: int, a_row: int, warp: int) -> int | None:
    """Words per row of the output tile staged in shared memory (BN + pad:
    the pad with the fewest bank conflicts over a warp's vector stores of
    micro-tiles and its reads of consecutive columns), or None where the
    output is stored straight from the registers: one stage (no cp.async),
    scalar micro-tile rows, or an output tile larger than A's tile."""
    bm, bn, threads = tiles.block_m, tiles.block_n, tiles.threads
    tm, tn = tiles.micro_tile
    if tiles.stages < 2 or wn < 2 or threads < warp:
        return None
    cpr, rpc = bn // tn, bm // tm
    lanes = range(warp)

    def wavefronts(requests) -> int:
        total = 0
        for words in requests:
            banks = [0] * warp
            for word in set(words):
                banks[word % warp] += 1
            total += max(banks)
        return total

    best = None
    for pad in range(0, 33, 4):
        row = bn + pad
        if row % wn or bm * row > tiles.stages * tiles.block_k * a_row:
            continue
        stores = [
            [((i // wm) * wm * rpc + (t // cpr) * wm + i % wm) * row + g * wn * cpr + (t % cpr) * wn + e for t in lanes for e in range(wn)]
            for i in range(tm)
            for g in range(tn // wn)
        ]
        reads = [[(f // bn) * row + f % bn for f in range(k * threads, k * threads + warp)] for k in range(-(-bm * bn // threads))]
        cost = wavefronts(stores) + wavefronts(reads)
        if best is None or cost < best[0]:
            best = (cost, row)
    return None if best is None else best[1]


def owned(im, lane: Value, count: int, width: int, lanes: int) -> list[Value]:
    """The `count` offsets (rows or columns of the block tile) a thread owns:
    groups of `width` consecutive ones, `width·lanes` apart."""
    return [im.add(im.mul(lane, im.const(width)), im.const(g * width * lanes + e)) for g in range(count // width) for e in range(width)]


def fragment(w: KernelWriter, tile: Value, slot: Value, kk: Value, lane: Value, count: int, width: int, lanes: int) -> list[Value]:
    """This thread's `count` values of row `kk` of a tile, `width` per load."""
    im = w.im
    values = []
    for g in range(count // width):
        first = im.add(im.mul(lane, im.const(width)), im.const(g * width * lanes))
        if width == 1:
            values.append(w.load(tile, [slot, kk, first]))
        else:
            op = w.b.create(LoadVectorOp, [tile, slot, kk, first], result_types=[tile.type.element_type] * width)
            values += list(op.results)
    return values


def staging_points(w: KernelWriter, t: Value, threads: int, how: OperandStaging, bk: int):
    """(row, k) of each element of the BK×extent tile this thread stages,
    with the guard of a round the threads do not fill (None when they do)."""
    im = w.im
    rows_per_warp, k_per_warp = STAGING_WARP
    warp = w.hw.warp_size
    if not how.k_fastest or how.extent % rows_per_warp or bk % k_per_warp or threads % warp:
        points = w.cooperative(t, threads, [how.extent, bk] if how.k_fastest else [bk, how.extent])
        return [((a, b) if how.k_fastest else (b, a), inside) for (a, b), inside in points]
    # a warp: 4 rows × 8 consecutive k; warps then go down k, then across rows
    lane, warp_id = im.rem(t, warp), im.div(t, warp)
    k_in, row_in = im.rem(lane, k_per_warp), im.div(lane, k_per_warp)
    k_blocks = bk // k_per_warp
    total_warps = how.extent * bk // warp
    warps = threads // warp
    out = []
    # warp units u = warp_id + round·warps, (k block, row block) = (u mod k_blocks, u div k_blocks);
    # warps and k_blocks are powers of two, so one divides the other and the
    # rounds differ by constants (cheap indices, nothing live across rounds)
    for round_ in range(-(-total_warps // warps)):
        first = round_ * warps
        inside = w.below(im.add(warp_id, im.const(first)), total_warps, first + warps > total_warps)
        if warps % k_blocks == 0:
            k_block = im.rem(warp_id, k_blocks)
            row_block = im.add(im.div(warp_id, k_blocks), im.const(first // k_blocks))
        else:
            k_block = im.add(warp_id, im.const(first % k_blocks))
            row_block = im.const(first // k_blocks)
        row = im.add(im.mul(row_block, im.const(rows_per_warp)), row_in)
        k = im.add(im.mul(k_block, im.const(k_per_warp)), k_in)
        out.append(((row, k), inside))
    return out


def copy_async(w: KernelWriter, value: Value, tile: Value, idx) -> bool:
    """Turn `value`, if it is a plain load of an input buffer of the tile's
    type, into a `loop.copy_async` into tile[idx]; False leaves it alone."""
    op = value.defining_op
    if type(op) is not loop.LoadOp or op.buffer.type.memory_space != "global" or op.buffer.type.element_type is not tile.type.element_type:
        return False
    if tile.type.element_type is not f32 or op.attr("padding") not in (None, 0, 0.0):
        return False
    guard = op.guard
    w.b.create(CopyAsyncOp, [op.buffer, *op.indices, tile, *(w.index(i) for i in idx), *([guard] if guard is not None else [])])
    if not op.result.has_uses():
        for memo in w.emitter._memo_by_guard.values():
            for key in [key for key, v in memo.items() if v is op.result]:
                del memo[key]
        op.erase()
    return True
