"""Split-KV attention on the GPU: when a problem's batch·heads·query tiles
leave SMs idle (decoding: one query over thousands of keys), the keys are
cut into `tiles.splits` ranges of whole key tiles, each run by its own
blocks, and a second kernel combines their partial results in a fixed
order (deterministic: the same bits on every run).

    partial kernel (attention.py `lower_attention_gpu` with partials),
    grid [S/BQ, batch, splits]:
      the flash loop over key tiles [z·K, min((z+1)·K, kv_end)) -> per row
      m_z (row max), l_z (row sum of exp(s - m_z)), o_z (Σ exp(s - m_z)·v)
      written to scratch [splits, batch, S] (m, l) and [splits, batch, S, Dv] (o)
    combine kernel, one thread per output element (b, s, c):
      M = max_z m_z;  w_z = exp(m_z - M)  (0 for an empty range: m_z = -inf)
      out = (Σ_z w_z·o_z) / (Σ_z w_z·l_z)  -> the group's epilogue

A range past a causal diagonal visits no key: m = -inf, l = o = 0, and its
weight is exp(-inf - M) = 0. M is replaced by 0 while it is -inf (a row
with no visible key so far, as `Scores.safe_max` does in the flash loop),
so that no exp(-inf + inf) appears.
"""

from __future__ import annotations

import math

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, f32
from fusecc.dialects.fusion import GroupOp
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.lowering.epilogue import Epilogue
from fusecc.passes.lowering.interface import ArgRef, Launch, LoweredGroup
from fusecc.passes.lowering.kernel_builder import ceil_div
from fusecc.passes.lowering.kernel_writer import KernelWriter
from fusecc.passes.tiling.attention_tiles import AttentionTiles

COMBINE_THREADS = 256


def partial_types(problem, tiles: AttentionTiles) -> list[MemRefType]:
    """Scratch of the partial results: m, l [splits, batch, S] and o [splits, batch, S, Dv]."""
    rows = [tiles.splits, problem.batch_size, problem.s]
    return [MemRefType(rows, f32), MemRefType(rows, f32), MemRefType([*rows, problem.dv], f32)]


def write_partials(w: KernelWriter, scratch: list[Value], part: Value, batch: Value | None, qs, q_ok, lane: Value, dv_cols, dv_ok, final, rows: int, outputs_per_row: int) -> None:
    """The partial kernel's results for the thread's R rows: m and l once per
    row (by lane 0 of its row group, whose lanes all hold them), o per column."""
    m_part, l_part, o_part = scratch
    b = batch if batch is not None else 0
    first_lane = w.cmp("eq", lane, 0)
    for i in range(rows):
        w.store(final[i], m_part, [part, b, qs[i]], w.all_of(q_ok[i], first_lane))
        w.store(final[rows + i], l_part, [part, b, qs[i]], w.all_of(q_ok[i], first_lane))
        for u in range(outputs_per_row):
            w.store(final[2 * rows + i * outputs_per_row + u], o_part, [part, b, qs[i], dv_cols[u]], w.all_of(q_ok[i], dv_ok[u]))


def lower_attention_split_kv(group: GroupOp, problem, tiles: AttentionTiles, hardware: Hardware, lower_partial) -> LoweredGroup:
    """Two launches: `lower_partial` (attention.py's flash kernel) with the
    scratch, then the combining kernel."""
    types = partial_types(problem, tiles)
    lowered = LoweredGroup()
    refs = [lowered.add_scratch(t) for t in types]
    partial = lower_partial(group, problem, tiles, hardware, types)
    lowered.launches.append(Launch(partial.finish(), partial.arg_refs + refs))
    combine = combine_kernel(group, problem, tiles, hardware, types)
    lowered.launches.append(Launch(combine.finish(), combine.arg_refs + refs))
    return lowered


def combine_kernel(group: GroupOp, problem, tiles: AttentionTiles, hardware: Hardware, types: list[MemRefType]) -> KernelWriter:
    w = KernelWriter(group, hardware, extra_args=types)
    epilogue = Epilogue(group, problem.op.result, w.outputs, "attention")
    im, s = w.im, w.s
    m_part, l_part, o_part = w.extra
    S, Dv, splits = problem.s, problem.dv, tiles.splits
    n = problem.batch_size * S * Dv
    minus_inf = s.const(-math.inf)

    def block(b: Value) -> None:
        def thread(t: Value) -> None:
            # Consecutive threads take consecutive output columns: whole sectors.
            i = im.add(im.mul(b, im.const(COMBINE_THREADS)), t)
            ok = w.below(i, n, n % COMBINE_THREADS != 0)
            c, rest = im.rem(i, Dv), im.div(i, Dv)
            q, flat = im.rem(rest, S), im.div(rest, S)
            ms = [w.load(m_part, [z, flat, q], ok) for z in range(splits)]
            m = ms[0]
            for x in ms[1:]:
                m = s.max(m, x)
            base = w.select(w.cmp("eq", m, minus_inf), s.const(0.0), m)
            weights = [s.exp(s.sub(x, base)) for x in ms]
            l = o = s.const(0.0)
            for z in range(splits):  # in split order: the same sum on every run
                l = s.add(l, s.mul(w.load(l_part, [z, flat, q], ok), weights[z]))
                o = s.add(o, s.mul(w.load(o_part, [z, flat, q, c], ok), weights[z]))
            out = s.mul(o, s.div(s.const(1.0), l))
            epilogue.emit(w.emitter, problem.out_index(problem.batch_index(flat, im), q, c), out, ok)

        w.parallel([COMBINE_THREADS], ["thread.x"], thread, ["t"])

    w.outer([ceil_div(n, COMBINE_THREADS)], ["block.x"], block, ["block"])
    w.estimate_streaming(live=2 * splits + 3)  # each split's max and weight, then l, o and the index
    return w
