"""Attention groups on tensor cores: flash attention with `nvgpu.mma_sync`
for QKᵀ and PV (f16 or bf16 query, key and value, sm_80+; f32 accumulators).

Chosen by `lower_attention` (attention.py) where `attention_mma_kind`
allows; the FMA template keeps the rest (f32, dynamic shapes, head
dimensions past MAX_HEAD_DIM). One block per (query tile of BQ = 16 · WARPS
rows, batch·head); each warp owns 16 query rows. WARPS is 4 where that
still gives every SM a block, else 2 (`attention_mma_warps`): more blocks,
each staging K and V for fewer rows:

    q_tile [BQ, D16 + 8], k_tile [BT, D16 + 8]  (k = head dim contiguous)
    v_tile [BT, Dv8 + 8]                        (k = key: k-major)
    q fragments <- q_tile (once: D16/16 A fragments per lane)
    (m, l: 2 rows per lane, o: Dv8/8 C fragments) = loop.for k0 in 0..kv_end step BT
      k_tile, v_tile <- K, V[k0 : k0 + BT]  (zero past T, D, Dv)
      s_j = Σ_d mma(q, k_tile)           for the BT/8 key tiles j (C fragments: rows g, g+8)
      scale, mask, causal; row max over the lane's keys, then its quad (shuffle_xor 1, 2)
      p = exp(s - m_new); l = l·alpha + row sums (quad shuffles); o *= alpha
      o_v += mma(p as A fragments, v_tile)  for the BT/16 key steps and Dv8/8 value tiles
    epilogue(o / l) at the C fragments' (row, column), guarded at S and Dv

The C fragments of two adjacent 8-key tiles are exactly the A fragment of
one 16-key step (rows g, g+8; columns 2t, 2t+1 and 8 + 2t, 8 + 2t + 1), so P
never leaves registers (FlashAttention-2's layout). Rounding P to f16/bf16
for the PV product is the one rounding the reference does not make
(docs/cuda-tensor-cores.md).
"""

from __future__ import annotations

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, bf16, f16
from fusecc.dialects import arith
from fusecc.dialects.fusion import GroupOp
from fusecc.dialects.loop import GPU_BLOCK
from fusecc.dialects.nvgpu import FRAGMENTS, WARP
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.lowering.attention_scores import Scores, causal_order, gpu_causal_visit_end, kv_end
from fusecc.passes.lowering.epilogue import Epilogue
from fusecc.passes.lowering.kernel_builder import ceil_div
from fusecc.passes.lowering.kernel_writer import KernelWriter
from fusecc.passes.lowering.matmul_mma import MIN_SM, Lane, affine, mma_sync, sm_version
from fusecc.passes.lowering.scalar_emitter import LoweringError
from fusecc.passes.tiling.contraction_shapes import BASE_REGISTERS, KernelResources, resource_problem

WARP_CHOICES = (4, 2)  # warps per block, fullest first
BLOCK_T = 64
MAX_HEAD_DIM = 128  # Q fragments, S and O stay in registers: D = Dv = 128 is ~200 of 255
PAD = 8  # elements: conflict-free fragment reads in both layouts (matmul_mma.TileLayout)
MAX_GRID_YZ = 65535


def attention_mma_kind(problem, hardware: Hardware) -> str | None:
    """"f16" or "bf16" where the tensor-core template takes the group, else None."""
    if not hardware.is_gpu or sm_version(hardware) < MIN_SM:
        return None
    types = {v.type.element_type for v in (problem.op.query, problem.op.key, problem.op.value)}
    if len(types) != 1 or not types <= {f16, bf16}:
        return None
    if problem.d > MAX_HEAD_DIM or problem.dv > MAX_HEAD_DIM or problem.d == 0 or problem.dv == 0:
        return None
    return "f16" if types == {f16} else "bf16"


def attention_mma_warps(problem, hardware: Hardware) -> int:
    """4 warps (64 query rows) per block where the grid still fills the SMs, else 2."""
    for warps in WARP_CHOICES:
        if ceil_div(problem.s, 16 * warps) * problem.batch_size >= hardware.sm_count:
            return warps
    return WARP_CHOICES[-1]


def attention_mma_resources(problem, warps: int) -> KernelResources:
    d16, dv8 = ceil_div(problem.d, 16) * 16, ceil_div(problem.dv, 8) * 8
    registers = d16 // 2 + BLOCK_T // 8 * 4 + dv8 // 8 * 4 + 8 + BASE_REGISTERS  # Q (packed), S, O, m/l/alpha, the base
    shared = 2 * (16 * warps * (d16 + PAD) + BLOCK_T * (d16 + PAD) + BLOCK_T * (dv8 + PAD))
    return KernelResources(WARP * warps, registers, shared)


def lower_attention_mma(group: GroupOp, problem, kind: str, hardware: Hardware) -> KernelWriter:
    warps = attention_mma_warps(problem, hardware)
    refused = resource_problem(attention_mma_resources(problem, warps), hardware, "tensor-core attention")
    if refused is not None:
        raise LoweringError(refused)
    f = FRAGMENTS[kind]
    element = problem.op.query.type.element_type
    w = KernelWriter(group, hardware)
    epilogue = Epilogue(group, problem.op.result, w.outputs, "attention")
    im, s = w.im, w.s
    S, Tk, D, Dv = problem.s, problem.t, problem.d, problem.dv
    d16, dv8 = ceil_div(D, 16) * 16, ceil_div(Dv, 8) * 8
    key_tiles, value_tiles = BLOCK_T // 8, dv8 // 8
    block_q = 16 * warps
    grid = [ceil_div(S, block_q)] + ([problem.batch_size] if problem.batch_size > 1 else [])
    if any(g > MAX_GRID_YZ for g in grid[1:]):
        raise LoweringError(f"attention grid {grid} exceeds {MAX_GRID_YZ} blocks in y")
    a_at, b_at, c_at = affine(f.a, f.a_count), affine(f.b, f.b_count), affine(f.c, f.c_count)
    threads = WARP * warps

    def mma(a, b, c) -> list[Value]:
        return mma_sync(w, kind, a, b, c)

    def as_loaded(value: Value) -> Value:
        widened = value.defining_op  # an f16/bf16 element goes to its tile as loaded
        return widened.input if isinstance(widened, arith.CastOp) and widened.input.type is element else value

    def block(q_block: Value, batch: Value | None = None) -> None:
        q_tile = w.alloc(MemRefType([block_q, d16 + PAD], element, "shared"), "q_tile")
        k_tile = w.alloc(MemRefType([BLOCK_T, d16 + PAD], element, "shared"), "k_tile")
        v_tile = w.alloc(MemRefType([BLOCK_T, dv8 + PAD], element, "shared"), "v_tile")
        q0 = im.mul(causal_order(w, problem, q_block, grid[0], gpu=True), im.const(block_q))
        bidx = problem.batch_index(batch if batch is not None else im.const(0), im)
        end = gpu_causal_visit_end(w, problem, bidx, kv_end(w, problem, im.add(q0, im.const(block_q))), threads)

        def thread(t: Value) -> None:
            lane = Lane(w, t)
            at = lane.at
            warp_row = im.mul(lane.warp, im.const(16))

            scores = Scores(w, problem, bidx)
            for (r, d), inside in w.cooperative(t, threads, [block_q, d16]):
                q = im.add(q0, r)
                guard = w.all_of(inside, w.below(q, S, S % block_q != 0), w.below(d, D, d16 != D))
                w.store(as_loaded(w.value_at(problem.op.query, problem.q_index(bidx, q, d, im), guard)), q_tile, [r, d], inside)
            q_frags = [[w.load(q_tile, [at(rc[0], warp_row), at(rc[1], im.const(16 * ks))]) for rc in a_at] for ks in range(d16 // 16)]
            # the lane's two rows (C fragment elements 0, 1 and 2, 3)
            rows = [at(c_at[0][0], im.add(q0, warp_row)), at(c_at[2][0], im.add(q0, warp_row))]
            rows_ok = [w.below(q, S, S % block_q != 0) for q in rows]

            def stage(k0: Value) -> None:
                for tile, operand, width, padded, index_of in ((k_tile, problem.op.key, D, d16, problem.k_index), (v_tile, problem.op.value, Dv, dv8, problem.v_index)):
                    for (j, c), inside in w.cooperative(t, threads, [BLOCK_T, padded]):
                        key = im.add(k0, j)
                        guard = w.all_of(inside, w.below(key, Tk, Tk % BLOCK_T != 0), w.below(c, width, padded != width))
                        w.store(as_loaded(w.value_at(operand, index_of(bidx, key, c, im), guard)), tile, [j, c], inside)

            def quad(x: Value, combine) -> Value:
                for offset in (1, 2):  # the 4 lanes of a group hold one row's columns
                    x = combine(x, w.shuffle_xor(x, offset))
                return x

            def kv_step(k0: Value, *carried: Value) -> list[Value]:
                m, l, o = carried[:2], carried[2:4], carried[4:]
                stage(k0)
                dots = []
                for j in range(key_tiles):
                    acc = [s.const(0.0)] * 4
                    for ks in range(d16 // 16):
                        # B (k = head dim, n = key): k_tile[key][d]
                        b = [w.load(k_tile, [at(rc[1], im.const(8 * j)), at(rc[0], im.const(16 * ks))]) for rc in b_at]
                        acc = mma(q_frags[ks], b, acc)
                    dots.append(acc)
                # the lane's scores: key tile j, element e -> row e // 2, key 8j + column
                keys = [[at(c_at[e][1], im.add(k0, im.const(8 * j))) for e in range(2)] for j in range(key_tiles)]
                keys_ok = [[w.below(key, Tk, Tk % BLOCK_T != 0) for key in pair] for pair in keys]
                sc = [[scores.finish(dots[j][e], rows[e // 2], keys[j][e % 2], rows_ok[e // 2], keys_ok[j][e % 2]) for e in range(4)] for j in range(key_tiles)]
                next_m, next_l, alphas, p = [], [], [], [[None] * 4 for _ in range(key_tiles)]
                for half in range(2):
                    mine = [sc[j][e] for j in range(key_tiles) for e in (2 * half, 2 * half + 1)]
                    tile_max = mine[0]
                    for x in mine[1:]:
                        tile_max = s.max(tile_max, x)
                    m_new = w.named(s.max(m[half], quad(tile_max, s.max)), "m_new")
                    base = scores.safe_max(m_new)
                    alpha = w.named(s.exp(s.sub(m[half], base)), "alpha")
                    row_sum = None
                    for j in range(key_tiles):
                        for e in (2 * half, 2 * half + 1):
                            p[j][e] = s.exp(s.sub(sc[j][e], base))
                            row_sum = p[j][e] if row_sum is None else s.add(row_sum, p[j][e])
                    next_m.append(m_new)
                    next_l.append(s.add(s.mul(l[half], alpha), quad(row_sum, s.add)))
                    alphas.append(alpha)
                o = [s.mul(x, alphas[(i % 4) // 2]) for i, x in enumerate(o)]
                for kk in range(BLOCK_T // 16):
                    a = [*p[2 * kk][0:2], *p[2 * kk][2:4], *p[2 * kk + 1][0:2], *p[2 * kk + 1][2:4]]  # C of two key tiles = A of one key step
                    for jv in range(value_tiles):
                        # B (k = key, n = value column): v_tile[key][dv]
                        b = [w.load(v_tile, [at(rc[0], im.const(16 * kk)), at(rc[1], im.const(8 * jv))]) for rc in b_at]
                        o[4 * jv : 4 * jv + 4] = mma(a, b, o[4 * jv : 4 * jv + 4])
                return [*next_m, *next_l, *o]

            init = [scores.minus_inf] * 2 + [s.const(0.0)] * 2 + [s.const(0.0)] * (4 * value_tiles)
            final = w.named_loop(w.for_(0, end, BLOCK_T, kv_step, init, "k0"), "m", "m", "l", "l", *["o"] * (4 * value_tiles))
            inverse = [s.div(s.const(1.0), final[2 + half]) for half in range(2)]
            for jv in range(value_tiles):
                for e in range(4):
                    dv = at(c_at[e][1], im.const(8 * jv))
                    out = s.mul(final[4 + 4 * jv + e], inverse[e // 2])
                    guard = w.all_of(rows_ok[e // 2], w.below(dv, Dv, dv8 != Dv))
                    epilogue.emit(w.emitter, problem.out_index(bidx, rows[e // 2], dv), out, guard)

        w.parallel([threads], ["thread.x"], thread, ["t"])

    w.outer(grid, GPU_BLOCK[: len(grid)], block, ["q_block", "batch"])
    return w


__all__ = ["attention_mma_kind", "attention_mma_resources", "attention_mma_warps", "lower_attention_mma"]
