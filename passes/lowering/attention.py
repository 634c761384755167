"""Attention groups: flash attention, one pass over the keys with an online softmax.

An `attention` group holds exactly one `tensor.attention`, optionally with
layout ops on its inputs (a head split: reshape + transpose of q, k, v) and
its output (a head merge), which are index maps and cost nothing (the
scalar emitter reads through the input maps; `epilogue.py` maps the output
forward). Elementwise epilogue ops (say, a cast) are fused too.

The scores `q·kᵀ` are never materialised: for each tile of BT keys the
running row maximum `m`, running sum `l` and the output accumulator `o` are
rescaled by `exp(m_old - m_new)` and updated, so memory grows as O(S·D),
never O(S·T) (the tiles below are BQ×D, BT×D, BT×Dv and BQ×BT).

GPU (f32, or heads past the tensor-core template's; f16/bf16 go to
attention_mma.py): `attention_gpu.py`, one block per (q tile of BQ rows,
batch·head), R rows and float4 loads per thread, K/V double-buffered by
cp.async on sm_80+.

CPU, one worker iteration per (batch·head, q tile of BQ rows), vector loops
over keys and over the head dimension:

    loop.parallel [batch * S/BQ] (worker)
      q_tile [BQ, D], k_tile [D, BT] (transposed), v_tile [BT, Dv], scores [BT],
      m, l [BQ], o [BQ, Dv]: local
      loop.for k0 in 0..kv_end step BT
        pack k_tile, v_tile
        loop.for r in rows
          scores = q_tile[r] · k_tile (register tiles of RR rows × up to
            4 vectors of keys around loop.for d), scale, mask
          online softmax update of m[r], l[r], o[r] (vector over Dv)
      epilogue(o / l) -> store
"""

from __future__ import annotations

from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, f32
from fusecc.dialects import tensor as T
from fusecc.dialects.fusion import GroupOp

from fusecc.passes.lowering.dynamic_loops import is_dynamic
from fusecc.passes.lowering.attention_gpu import lower_attention_gpu
from fusecc.passes.lowering.attention_mma import attention_mma_kind, lower_attention_mma
from fusecc.passes.lowering.attention_scores import Scores, causal_order, causal_visit_end, kv_end
from fusecc.passes.lowering.attention_split import lower_attention_split_kv
from fusecc.passes.lowering.epilogue import Epilogue
from fusecc.passes.lowering.interface import Launch, LoweredGroup, template
from fusecc.passes.lowering.kernel_builder import ceil_div
from fusecc.passes.lowering.kernel_writer import KernelWriter
from fusecc.passes.lowering.matmul import the_only, tile_attribute
from fusecc.passes.tiling.tile import hinted_copy
from fusecc.passes.tiling.attention_tiles import AttentionTiles, choose_attention_tiles
from fusecc.passes.tiling.cpu_matmul_tiles import CPU_K_UNROLL
from fusecc.passes.tiling.contraction_shapes import AttentionShape
from fusecc.passes.lowering.scalar_emitter import IndexMath, broadcast_index


class AttentionProblem(AttentionShape):
    """An attention group's problem: its shape (`tiling/contraction_shapes.py`)
    and the index of each operand's element."""

    @classmethod
    def of(cls, group: GroupOp) -> "AttentionProblem":
        return cls.of_op(the_only(group, T.AttentionOp))

    def batch_index(self, flat: Value, im: IndexMath) -> list[Value]:
        return im.delinearize(flat, self.batch) if self.batch else []

    def _index(self, operand: Value, bidx, row: Value, col: Value, rows: int, cols: int, im: IndexMath) -> list[Value]:
        return broadcast_index([*bidx, row, col], (*self.batch, rows, cols), operand.type.shape, im)

    def q_index(self, bidx, s: Value, d: Value, im: IndexMath) -> list[Value]:
        return self._index(self.op.query, bidx, s, d, self.s, self.d, im)

    def k_index(self, bidx, t: Value, d: Value, im: IndexMath) -> list[Value]:
        return self._index(self.op.key, bidx, t, d, self.t, self.d, im)

    def v_index(self, bidx, t: Value, dv: Value, im: IndexMath) -> list[Value]:
        return self._index(self.op.value, bidx, t, dv, self.t, self.dv, im)

    def mask_index(self, bidx, s: Value, t: Value, im: IndexMath) -> list[Value]:
        return self._index(self.mask, bidx, s, t, self.s, self.t, im)

    def out_index(self, bidx, s: Value, dv: Value) -> list[Value]:
        return [*bidx, s, dv]


# --------------------------------------------------------------------------- tile sizes


def attention_tiles(group: GroupOp, problem: AttentionProblem, hardware: Hardware) -> AttentionTiles:
    """The group's `tile.block = [BQ, BT]` and `tile.threads` as the tiler
    set them; what it leaves out, the choosers above fill in."""
    return choose_attention_tiles(
        problem, hardware, tile_attribute(group, "tile.block", None), tile_attribute(group, "tile.threads", None), tile_attribute(group, "tile.split", None)
    )


def dynamic_attention_tiles(group: GroupOp, hardware: Hardware) -> AttentionTiles:
    """The tiles of a group with `?` dims (docs/dynamic-shapes.md): chosen at
    the --shape-hint sizes on a copy of the group; the CPU template guards
    the last query and key tiles at the runtime S and T."""
    hinted = hinted_copy(group)
    try:
        return attention_tiles(hinted, AttentionProblem.of(hinted), hardware)
    finally:
        hinted.erase()




# --------------------------------------------------------------------------- the template


def query_rows_per_group(bq: int, dv: int, hardware: Hardware) -> int:
    """RR, the query rows of the CPU template's register tiles: 8 where the
    p·V accumulators, 8 rows × ⌈Dv / lanes⌉ vectors, fill at most half of
    the vector registers (Dv <= 32 on AVX-512: 16 zmm), else 4, 2 or 1,
    whichever divides BQ. With Dv = 32 the 4-row tiles had 8 accumulators,
    too few for the FMA latency; 8 rows measured 0.92× the time for MiniLM
    (12 heads × 128 × 32, paired runs, 1 thread); with Dv = 64 they would
    need 32 registers (1.06×)."""
    if bq % 8 == 0 and 8 * ceil_div(dv, hardware.warp_size) <= hardware.vector_registers // 2:
        return 8
    return next(x for x in (4, 2, 1) if bq % x == 0)


def score_tile_width(bt: int, rr: int, hardware: Hardware) -> int:
    """Keys per q·k register tile of the CPU template: 4, 2 or 1 vectors
    (`hardware.warp_size` lanes each) dividing the key tile, the most whose
    RR × vectors accumulators fill at most half of the vector registers (the
    rest hold the k vectors and q broadcasts); the whole tile when it is not
    a whole number of vectors. 4 rows × 4 vectors on AVX-512 (16 of 32 zmm),
    8 × 2, 4 × 2 on AVX2 (8 of 16 ymm). The widening emits 1, 2 or 4 vectors' worth
    as one chunk (docs/cpu-target.md, "Vector loops")."""
    lanes = hardware.warp_size
    if bt % lanes:
        return bt
    vectors = next(v for v in (4, 2, 1) if bt % (v * lanes) == 0 and (rr * v <= hardware.vector_registers // 2 or v == 1))
    return vectors * lanes


@template("attention")
def lower_attention(group: GroupOp, hardware: Hardware) -> LoweredGroup:
    problem = AttentionProblem.of(group)
    kind = attention_mma_kind(problem, hardware) if not is_dynamic(group) else None  # f16/bf16 on tensor cores, sm_80+
    if kind is not None:
        writer = lower_attention_mma(group, problem, kind, hardware)
        return LoweredGroup([Launch(writer.finish(), writer.arg_refs)])
    tiles = dynamic_attention_tiles(group, hardware) if is_dynamic(group) else attention_tiles(group, problem, hardware)
    if hardware.is_gpu and tiles.splits > 1 and not is_dynamic(group):  # (split-KV's partials would be `?`-sized per split)
        return lower_attention_split_kv(group, problem, tiles, hardware, lower_attention_gpu)
    writer = lower_attention_gpu(group, problem, tiles, hardware) if hardware.is_gpu else lower_attention_cpu(group, problem, tiles, hardware)
    return LoweredGroup([Launch(writer.finish(), writer.arg_refs)])


def causal_visit_end_cpu(w: KernelWriter, problem: AttentionProblem, bidx, end: Value) -> Value:
    """`causal_visit_end` for a CPU worker iteration: Σ 0·v over the skipped
    keys, a vector loop over the value columns around the loop over keys."""
    if not problem.causal:
        return end
    s = w.s
    sums = w.alloc(MemRefType([problem.dv], f32, "local"), "skipped")

    def column(c: Value) -> None:
        def step(key: Value, acc: Value) -> list[Value]:
            return [s.add(acc, s.mul(s.const(0.0), w.value_at(problem.op.value, problem.v_index(bidx, key, c, w.im))))]

        w.store(w.for_(end, w.im.const(problem.t), 1, step, [s.const(0.0)], "key")[0], sums, [c])

    w.parallel([problem.dv], ["vector"], column, ["c"])
    total = w.for_(0, problem.dv, 1, lambda c, acc: [s.add(acc, w.load(sums, [c]))], [s.const(0.0)], "c")[0]
    return causal_visit_end(w, problem, end, total)


def lower_attention_cpu(group: GroupOp, problem: AttentionProblem, tiles: AttentionTiles, hardware: Hardware) -> KernelWriter:
    w = KernelWriter(group, hardware)
    epilogue = Epilogue(group, problem.op.result, w.outputs, "attention")
    im, s = w.im, w.s
    bq, bt = tiles.block_q, tiles.block_t
    rr = query_rows_per_group(bq, problem.dv, hardware)  # rows sharing each k and v load
    S, Tk, D, Dv = problem.s, problem.t, problem.d, problem.dv
    q_blocks = ceil_div(S, bq)
    # A row's max and sum over a key tile run as `lanes` partial results
    # (a vector loop over lanes around the tile's chunks), then across the
    # lanes: a loop over all BT keys in order would be a chain of BT
    # dependent scalar ops (about 4 cycles each), slower than the tile's
    # q·k and p·V together.
    lanes = next(x for x in (hardware.warp_size, 8, 4, 2, 1) if bt % x == 0)
    width = score_tile_width(bt, rr, hardware)

    def worker(p: Value) -> None:
        bidx = problem.batch_index(im.div(p, q_blocks), im)
        q0 = im.mul(causal_order(w, problem, im.rem(p, q_blocks), q_blocks, gpu=False), im.const(bq))
        q_end = w.min_index(im.add(q0, im.const(bq)), S)
        rows = w.index_sub(q_end, q0)
        end = causal_visit_end_cpu(w, problem, bidx, kv_end(w, problem, q_end))
        q_tile = w.alloc(MemRefType([bq, D], f32, "local"), "q_tile")
        k_tile = w.alloc(MemRefType([D, bt], f32, "local"), "k_tile")
        v_tile = w.alloc(MemRefType([bt, Dv], f32, "local"), "v_tile")
        p_tile = w.alloc(MemRefType([rr, bt], f32, "local"), "p_tile")
        m_rows = w.alloc(MemRefType([bq], f32, "local"), "m")
        l_rows = w.alloc(MemRefType([bq], f32, "local"), "l")
        o_rows = w.alloc(MemRefType([bq, Dv], f32, "local"), "o")
        partial = w.alloc(MemRefType([rr, lanes], f32, "local"), "partial")
        scores = Scores(w, problem, bidx)

        def row_reductions(combine, init: Value, element) -> list[Value]:
            """For each of the RR rows i, `combine` over the tile's keys j of
            `element(i, j)`: per lane, then across the lanes."""

            def lane(l: Value) -> None:
                def chunk(c: Value, *acc: Value) -> list[Value]:
                    j = im.add(im.mul(c, im.const(lanes)), l)
                    return [combine(acc[i], element(i, j)) for i in range(rr)]

                per_lane = w.for_(0, bt // lanes, 1, chunk, [init] * rr, "c")
                for i in range(rr):
                    w.store(per_lane[i], partial, [im.const(i), l])

            w.parallel([lanes], ["vector"], lane, ["lane"])
            return [w.for_(0, lanes, 1, lambda l, acc, i=i: [combine(acc, w.load(partial, [im.const(i), l]))], [init])[0] for i in range(rr)]

        def init_row(r: Value) -> None:
            # Every row of the tile, rows past S as zeros: row groups may overhang.
            q = im.add(q0, r)
            q_ok = w.below(q, S, S % bq != 0)
            w.store(scores.minus_inf, m_rows, [r])
            w.store(s.const(0.0), l_rows, [r])
            w.parallel([Dv], ["vector"], lambda c: w.store(s.const(0.0), o_rows, [r, c]), ["c"])
            w.parallel([D], ["vector"], lambda d: w.store(w.value_at(problem.op.query, problem.q_index(bidx, q, d, im), q_ok), q_tile, [r, d]), ["d"])

        w.for_(0, bq, 1, init_row, name="row")

        def kv_step(k0: Value) -> None:
            def pack_key(j: Value) -> None:
                key = im.add(k0, j)
                key_ok = w.below(key, Tk, Tk % bt != 0)
                w.parallel([D], ["vector"], lambda d: w.store(w.value_at(problem.op.key, problem.k_index(bidx, key, d, im), key_ok), k_tile, [d, j]), ["d"])
                w.parallel([Dv], ["vector"], lambda c: w.store(w.value_at(problem.op.value, problem.v_index(bidx, key, c, im), key_ok), v_tile, [j, c]), ["c"])

            w.for_(0, bt, 1, pack_key, name="j")
            w.for_(0, rows, rr, lambda r0: update_rows(k0, r0), name="r0")

        def update_rows(k0: Value, r0: Value) -> None:
            """RR query rows against one key tile: scores, then the online softmax update."""
            r = [im.add(r0, im.const(i)) for i in range(rr)]
            q = [im.add(q0, x) for x in r]
            q_ok = [w.below(x, S, S % rr != 0) for x in q]

            def score_column(j: Value) -> None:
                # q·k for RR rows × BT keys: the d loop inside the vector loop
                # over keys (the transposed key tile read contiguously), one
                # accumulator per row.
                def dot_step(d: Value, *acc: Value) -> list[Value]:
                    k = w.load(k_tile, [d, j])
                    return [s.fma(w.load(q_tile, [r[i], d]), k, acc[i]) for i in range(rr)]

                dots = w.named_loop(w.for_(0, D, 1, dot_step, [s.const(0.0)] * rr, "d", unroll=CPU_K_UNROLL), "dot")
                key = im.add(k0, j)
                key_ok = w.below(key, Tk, Tk % bt != 0)
                for i in range(rr):
                    w.store(scores.finish(dots[i], q[i], key, q_ok[i], key_ok), p_tile, [i, j])

            # A register tile of RR rows × `width` keys, `width` a whole
            # number of vectors: the q·k FMAs of one vector of keys form RR
            # dependent chains, too few to cover the FMA latency alone.
            if width == bt:
                w.parallel([bt], ["vector"], score_column, ["j"])
            else:

                def key_chunk(c: Value) -> None:
                    w.parallel([width], ["vector"], lambda l: score_column(im.add(im.mul(c, im.const(width)), l)), ["j"])

                w.for_(0, bt // width, 1, key_chunk, name="kc")
            bases, alphas = [], []
            tile_maxima = row_reductions(s.max, scores.minus_inf, lambda i, j: w.load(p_tile, [im.const(i), j]))
            for i in range(rr):
                tile_max = tile_maxima[i]
                m_old = w.load(m_rows, [r[i]])
                m_new = w.named(s.max(m_old, tile_max), "m_new")
                bases.append(scores.safe_max(m_new))
                alphas.append(w.named(s.exp(s.sub(m_old, bases[i])), "alpha"))
                w.store(m_new, m_rows, [r[i]])

            def exponentiate(i: int, j: Value) -> Value:
                p = s.exp(s.sub(w.load(p_tile, [im.const(i), j]), bases[i]))
                w.store(p, p_tile, [im.const(i), j])
                return p

            row_sums = row_reductions(s.add, s.const(0.0), exponentiate)
            for i in range(rr):
                w.store(s.add(s.mul(w.load(l_rows, [r[i]]), alphas[i]), row_sums[i]), l_rows, [r[i]])

            def output_column(c: Value) -> None:
                # o = o·alpha + p·V for RR rows: the key loop inside the vector
                # loop over columns, one accumulator per row.
                def pv_step(j: Value, *acc: Value) -> list[Value]:
                    v = w.load(v_tile, [j, c])
                    return [s.fma(w.load(p_tile, [i, j]), v, acc[i]) for i in range(rr)]

                rescaled = [s.mul(w.load(o_rows, [r[i], c]), alphas[i]) for i in range(rr)]
                o = w.named_loop(w.for_(0, bt, 1, pv_step, rescaled, "j", unroll=CPU_K_UNROLL), "o")
                for i in range(rr):
                    w.store(o[i], o_rows, [r[i], c])

            w.parallel([Dv], ["vector"], output_column, ["c"])

        w.for_(0, end, bt, kv_step, name="k0")

        def store_row(r: Value) -> None:
            inverse = s.div(s.const(1.0), w.load(l_rows, [r]))

            def column(c: Value) -> None:
                out = s.mul(w.load(o_rows, [r, c]), inverse)
                epilogue.emit(w.emitter, problem.out_index(bidx, im.add(q0, r), c), out)

            w.parallel([Dv], ["vector"], column, ["c"])

        w.for_(0, rows, 1, store_row, name="row")

    w.outer([problem.batch_size * q_blocks], ["worker"], worker, ["block"])
    return w
