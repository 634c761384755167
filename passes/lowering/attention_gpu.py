"""The GPU flash-attention kernel, chosen by `attention.py` for f32 (and
for heads past the tensor-core template's; f16/bf16 go to attention_mma.py):
one block per (q tile of BQ rows, batch·head); row groups of TPR = 8
lanes, each thread R = BQ·TPR/threads rows (g, g+G, ...)
so that every key and value it loads from shared memory serves R rows, read
as float4s (`attention_vector_widths`: at most one shared load per 4 FMAs
for R ≥ 2); K and V double-buffered with cp.async on sm_80+ (S = 2 stages,
`attention_stages`; one stage: the step stages its own tile, by cp.async
and a wait on sm_80+, plain loads and stores before):

    loop.parallel [S/BQ, batch] (block.x, block.y)
      q_tile [BQ, D+4], k_tile [S, BT, D+4], v_tile [S, BT, Dv], p_tile [BQ, BT+pad]: shared
      loop.parallel [BQ/R * TPR] (thread.x)   -- row group g = t / TPR, lane = t % TPR
        q_tile <- Q[q0 : q0+BQ]; k_tile[0], v_tile[0] <- K, V[0 : BT] (cp.async); commit
        (m[R], l[R], o[R][Dv/TPR]) = loop.for k0 in 0..kv_end step BT   -- causal: kv_end = min(T, q0+BQ),
                                                                        -- or T where V past it is not finite
          k_tile[1-s], v_tile[1-s] <- K, V[k0+BT : k0+2BT] (cp.async, a loop over rounds); commit; wait 1; barrier
          s_iu = q_tile[row_i]·k_tile[s, lane + u·TPR] * scale + mask   (R × BT/TPR scores, float4s along d)
          causal / past-the-end keys -> -inf
          per row: m_new = max(m, max over the group's lanes (shuffle_xor)); alpha = exp(m - m_new)
                   p = exp(s - m_new); l = l·alpha + Σ p (shuffle_xor); p_tile[row_i] <- p
          barrier; o_iw = o_iw·alpha_i + Σ_j p_tile[row_i, j] · v_tile[s, j, lane + w·TPR]; barrier
            (float4s of 4 keys' p; the v tile holds lane l's columns side by side: `attention_v_column`)
        wait 0; epilogue(o / l) -> store (a row group's 8 lanes: 8 consecutive words)

Split-KV (`tile.split` = Z > 1, where the query tiles leave SMs idle): the
same kernel on grid [S/BQ, batch, Z] visits key range z and writes m, l, o
to scratch; a second kernel combines the ranges (attention_split.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, f32
from fusecc.dialects.fusion import GroupOp
from fusecc.dialects.loop import GPU_BLOCK
from fusecc.dialects.loop_vector import AsyncCommitOp, AsyncWaitOp, LoadVectorOp
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.lowering.attention_scores import Scores, causal_order, gpu_causal_visit_end, kv_end
from fusecc.passes.lowering.attention_split import write_partials
from fusecc.passes.lowering.epilogue import Epilogue
from fusecc.passes.lowering.interface import kernel_name
from fusecc.passes.lowering.kernel_builder import ceil_div
from fusecc.passes.lowering.kernel_writer import KernelWriter
from fusecc.passes.lowering.matmul_checks import MAX_GRID_YZ, check_resources
from fusecc.passes.lowering.matmul_gpu import copy_async
from fusecc.passes.lowering.scalar_emitter import LoweringError
from fusecc.passes.tiling.attention_tiles import (
    AttentionTiles,
    attention_row_pads,
    attention_stages,
    attention_vector_widths,
    gpu_attention_resources,
    key_tiles_per_split,
)
from fusecc.passes.tiling.contraction_shapes import AttentionShape, KernelResources
from fusecc.passes.tiling.gpu_matmul_tiles import gpu_matmul_stages

# Plain (one-stage) staging rounds unrolled by this much: a few global loads
# in flight per thread, without every round's address live across the key loop.
STAGING_UNROLL = 4


def check_gpu_attention_tiles(tiles: AttentionTiles, problem: AttentionShape, hardware: Hardware) -> KernelResources:
    tpr, threads = tiles.threads_per_row, tiles.threads
    if threads % tpr or tiles.block_q * tpr % threads or tiles.block_q * tpr < threads:
        raise LoweringError(f"attention needs row groups of {tpr} lanes, each taking the same number of the {tiles.block_q} query rows; {threads} threads do not divide them")
    if tiles.block_t % tpr:
        raise LoweringError(f"the key tile {tiles.block_t} is not a multiple of the {tpr} threads per query row")
    resources = gpu_attention_resources(tiles, problem)
    check_resources(resources, hardware, "attention")
    return resources


def lower_attention_gpu(group: GroupOp, problem: AttentionShape, tiles: AttentionTiles, hardware: Hardware, partials: Sequence[MemRefType] = ()) -> KernelWriter:
    """The flash-attention kernel; with `partials` (split-KV: the scratch
    types of `attention_split.partial_types`), block z of `tiles.splits`
    visits one range of key tiles and writes its row max, row sum and
    unnormalised output there instead of the output."""
    tiles = replace(tiles, stages=attention_stages(tiles, problem, hardware))  # the template decides its buffers from the target
    # cp.async (sm_80+) even with one buffer: the copies bypass the registers
    use_async = gpu_matmul_stages(hardware) > 1
    check_gpu_attention_tiles(tiles, problem, hardware)
    split = bool(partials)
    w = KernelWriter(group, hardware, f"{kernel_name(group)}_partial", partials, with_outputs=False) if split else KernelWriter(group, hardware)
    epilogue = None if split else Epilogue(group, problem.op.result, w.outputs, "attention")
    im, s = w.im, w.s
    bq, bt, threads, tpr, rows, stages = tiles.block_q, tiles.block_t, tiles.threads, tiles.threads_per_row, tiles.rows_per_thread, tiles.stages
    row_groups = threads // tpr
    S, Tk, D, Dv = problem.s, problem.t, problem.d, problem.dv
    scores_per_row, outputs_per_row = bt // tpr, ceil_div(Dv, tpr)
    d_width, p_width, v_width = attention_vector_widths(tiles, problem)
    q_pad, k_pad, p_pad = attention_row_pads(tiles, problem)
    grid = [ceil_div(S, bq)] + ([problem.batch_size] if type(problem.batch_size) is not int or problem.batch_size > 1 or split else []) + ([tiles.splits] if split else [])
    if any(type(g) is int and g > MAX_GRID_YZ for g in grid[1:]):  # (a `?` batch: checked per call, kernels.json)
        raise LoweringError(f"attention grid {grid} exceeds {MAX_GRID_YZ} blocks in y or z")
    keys_per_split = key_tiles_per_split(problem, tiles) * bt

    def block(q_block: Value, batch: Value | None = None, part: Value | None = None) -> None:
        # Padded rows: the rows a warp touches at once fall into different banks.
        q_tile = w.alloc(MemRefType([bq, D + q_pad], f32, "shared"), "q_tile")
        k_tile = w.alloc(MemRefType([stages, bt, D + k_pad], f32, "shared"), "k_tile")
        v_tile = w.alloc(MemRefType([stages, bt, Dv], f32, "shared"), "v_tile")
        p_tile = w.alloc(MemRefType([bq, bt + p_pad], f32, "shared"), "p_tile")
        q0 = im.mul(causal_order(w, problem, q_block, grid[0], gpu=True), im.const(bq))
        bidx = problem.batch_index(batch if batch is not None else im.const(0), im)
        begin, end = im.const(0), gpu_causal_visit_end(w, problem, bidx, kv_end(w, problem, im.add(q0, im.const(bq))), threads)
        if split:  # this block's range of key tiles (empty past a causal diagonal)
            begin = im.mul(part, im.const(keys_per_split))
            end = w.min_index(end, im.add(begin, im.const(keys_per_split)))

        def thread(t: Value) -> None:
            # Row group g takes rows g, g + G, g + 2G, ...: the 32/TPR groups of
            # a warp hold consecutive rows, so their p rows and outputs are apart.
            lane, row_group = w.named(im.rem(t, tpr), "lane"), w.named(im.div(t, tpr), "row_group")
            my_rows = [w.named(im.add(row_group, im.const(i * row_groups)), "row") for i in range(rows)]
            qs = [im.add(q0, r) for r in my_rows]
            q_ok = [w.below(q, S, S % bq != 0) for q in qs]
            scores = Scores(w, problem, bidx)
            # Stage the block's queries once.
            for (r, d), inside in w.cooperative(t, threads, [bq, D]):
                qr = im.add(q0, r)
                guard = w.all_of(inside, w.below(qr, S, S % bq != 0))
                w.store(w.value_at(problem.op.query, problem.q_index(bidx, qr, d, im), guard), q_tile, [r, d], inside)
            key_cols = [im.add(lane, im.const(u * tpr)) for u in range(scores_per_row)]
            dv_cols = [im.add(lane, im.const(u * tpr)) for u in range(outputs_per_row)]
            dv_ok = [w.below(c, Dv, (u + 1) * tpr > Dv) for u, c in enumerate(dv_cols)]
            copies = []  # the loop.copy_async ops staging made (none: no commit and wait)

            def v_column(c: Value) -> Value:
                # attention_v_column: lane l's columns l, l + TPR, ... side by side
                if v_width == 1:
                    return c
                chunk = tpr * v_width
                return im.add(im.add(im.mul(im.div(c, chunk), im.const(chunk)), im.mul(im.rem(c, tpr), im.const(v_width))), im.div(im.rem(c, chunk), tpr))

            def stage_kv(slot: Value, k0: Value, ahead: bool) -> None:
                # `ahead`: the prefetch of the tile after this one, which may
                # start past the last key (guarded off: zeros no one reads).
                for tile, operand, width, index_of, column in ((k_tile, problem.op.key, D, problem.k_index, lambda c: c), (v_tile, problem.op.value, Dv, problem.v_index, v_column)):
                    if bt * width % threads == 0:
                        # a loop over the thread's rounds, not unrolled: unrolled,
                        # ptxas keeps every copy's source address live across the
                        # key loop (2 registers each, 128+ copies; 255 and spills)
                        def copy_round(r: Value, tile=tile, operand=operand, width=width, index_of=index_of, column=column) -> None:
                            flat = im.add(im.mul(r, im.const(threads)), t)
                            j, c = im.div(flat, width), im.rem(flat, width)
                            key = im.add(k0, j)
                            value = w.value_at(operand, index_of(bidx, key, c, im), w.below(key, Tk, ahead or Tk % bt != 0))
                            if use_async and copy_async(w, value, tile, [slot, j, column(c)]):
                                copies.append(True)
                            else:
                                w.store(value, tile, [slot, j, column(c)])

                        w.for_(0, bt * width // threads, 1, copy_round, name="round", unroll=None if use_async else STAGING_UNROLL)
                        continue
                    for (j, c), inside in w.cooperative(t, threads, [bt, width]):
                        key = im.add(k0, j)
                        guard = w.all_of(inside, w.below(key, Tk, ahead or Tk % bt != 0))
                        value = w.value_at(operand, index_of(bidx, key, c, im), guard)
                        if use_async and inside is None and copy_async(w, value, tile, [slot, j, column(c)]):
                            copies.append(True)
                            continue
                        w.store(value, tile, [slot, j, column(c)], inside)

            def row_reduce(x: Value, combine) -> Value:
                # Across the TPR consecutive lanes of one row group.
                offset = tpr // 2
                while offset:
                    x = combine(x, w.shuffle_xor(x, offset))
                    offset //= 2
                return x

            def compute(slot: Value, k0: Value, carried) -> list[Value]:
                m, l, o = carried[:rows], carried[rows : 2 * rows], carried[2 * rows :]

                def dot_step(d: Value, *sums: Value) -> list[Value]:
                    # R query vectors and BT/TPR key vectors of W_d values: R·BT/TPR·W_d FMAs.
                    # each key vector used as soon as it is loaded: fewer live registers
                    qd = [vector_load(w, q_tile, [r, d], d_width) for r in my_rows]
                    out = list(sums)
                    for u, c in enumerate(key_cols):
                        kd = vector_load(w, k_tile, [slot, c, d], d_width)
                        for i in range(rows):
                            for e in range(d_width):
                                out[i * scores_per_row + u] = s.add(out[i * scores_per_row + u], s.mul(qd[i][e], kd[e]))
                    return out

                dots = w.named_loop(w.for_(0, D, d_width, dot_step, [s.const(0.0)] * (rows * scores_per_row), "d"), "dot")
                keys = [im.add(k0, c) for c in key_cols]
                keys_ok = [w.below(key, Tk, Tk % bt != 0) for key in keys]
                next_m, next_l, rescaled = [], [], []
                for i in range(rows):
                    tile_scores = [scores.finish(dots[i * scores_per_row + u], qs[i], keys[u], q_ok[i], keys_ok[u]) for u in range(scores_per_row)]
                    tile_max = tile_scores[0]
                    for x in tile_scores[1:]:
                        tile_max = s.max(tile_max, x)
                    m_new = w.named(s.max(m[i], row_reduce(tile_max, s.max)), "m_new")
                    base = scores.safe_max(m_new)
                    alpha = w.named(s.exp(s.sub(m[i], base)), "alpha")
                    p = [s.exp(s.sub(x, base)) for x in tile_scores]
                    row_sum = p[0]
                    for x in p[1:]:
                        row_sum = s.add(row_sum, x)
                    next_m.append(m_new)
                    next_l.append(s.add(s.mul(l[i], alpha), row_reduce(row_sum, s.add)))
                    for u in range(scores_per_row):
                        w.store(p[u], p_tile, [my_rows[i], key_cols[u]])
                    rescaled += [s.mul(x, alpha) for x in o[i * outputs_per_row : (i + 1) * outputs_per_row]]

                def pv_step(j0: Value, *acc: Value) -> list[Value]:
                    # R probability vectors of W_p keys; per key ⌈Dv/TPR⌉/W_v value
                    # vectors: R·⌈Dv/TPR⌉·W_p FMAs.
                    pj = [vector_load(w, p_tile, [r, j0], p_width) for r in my_rows]
                    out = list(acc)
                    for e in range(p_width):
                        j = im.add(j0, im.const(e))
                        if v_width == 1:
                            vj = [w.load(v_tile, [slot, j, dv_cols[u]], dv_ok[u]) for u in range(outputs_per_row)]
                        else:
                            vj = [x for g in range(outputs_per_row // v_width) for x in vector_load(w, v_tile, [slot, j, im.add(im.mul(lane, im.const(v_width)), im.const(g * tpr * v_width))], v_width)]
                        out = [s.add(out[i * outputs_per_row + u], s.mul(pj[i][e], vj[u])) for i in range(rows) for u in range(outputs_per_row)]
                    return out

                o = w.named_loop(w.for_(0, bt, p_width, pv_step, rescaled, "j"), "o")
                return [*next_m, *next_l, *o]

            def single_stage(k0: Value, *carried: Value) -> list[Value]:
                stage_kv(im.const(0), k0, ahead=False)
                if copies:  # this step's own tile, landed before use
                    w.b.create(AsyncCommitOp)
                    w.b.create(AsyncWaitOp, attributes={"pending": 0})
                return compute(im.const(0), k0, carried)

            def double_stage(k0: Value, *carried: Value) -> list[Value]:
                slot = im.rem(im.div(w.index_sub(k0, begin), bt), 2)
                # the next key tile goes in flight while this one is used
                stage_kv(w.index_sub(im.const(1), slot), im.add(k0, im.const(bt)), ahead=True)
                if copies:
                    w.b.create(AsyncCommitOp)
                    w.b.create(AsyncWaitOp, attributes={"pending": 1})
                return compute(slot, k0, carried)

            init = [scores.minus_inf] * rows + [s.const(0.0)] * rows + [s.const(0.0)] * (rows * outputs_per_row)
            if stages == 1:
                step = single_stage
            else:
                stage_kv(im.const(0), begin, ahead=True)
                if copies:
                    w.b.create(AsyncCommitOp)
                step = double_stage
            final = w.named_loop(w.for_(begin, end, bt, step, init, "k0"), *["m"] * rows, *["l"] * rows, *["o"] * (rows * outputs_per_row))
            if copies and stages > 1:  # nothing in flight past the loop (the zero fills after the last tile included)
                w.b.create(AsyncWaitOp, attributes={"pending": 0})
            if split:
                write_partials(w, w.extra, part, batch, qs, q_ok, lane, dv_cols, dv_ok, final, rows, outputs_per_row)
                return
            for i in range(rows):
                inverse = s.div(s.const(1.0), final[rows + i])
                for u in range(outputs_per_row):
                    out = s.mul(final[2 * rows + i * outputs_per_row + u], inverse)
                    epilogue.emit(w.emitter, problem.out_index(bidx, qs[i], dv_cols[u]), out, w.all_of(q_ok[i], dv_ok[u]))

        w.parallel([threads], ["thread.x"], thread, ["t"])

    w.outer(grid, GPU_BLOCK[: len(grid)], block, ["q_block", "batch", "part"][: len(grid)])
    return w


def vector_load(w: KernelWriter, tile: Value, idx: list[Value], width: int) -> list[Value]:
    """`width` consecutive elements of the tile's last axis: one loop.load_vector, or a scalar load."""
    if width == 1:
        return [w.load(tile, idx)]
    return list(w.b.create(LoadVectorOp, [tile, *idx], result_types=[tile.type.element_type] * width).results)
