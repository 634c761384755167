"""What both attention templates (attention.py on FMA, attention_mma.py on
tensor cores) do alike with scores: scale, additive mask, causal and
past-the-end masking (`Scores`), the keys a block visits (`kv_end`,
`causal_visit_end`) and the order causal query tiles are taken in
(`causal_order`)."""

from __future__ import annotations

import math

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, f32
from fusecc.passes.lowering.kernel_writer import KernelWriter


class Scores:
    """Scale, mask and causal/past-the-end masking of one score, shared by both targets."""

    def __init__(self, w: KernelWriter, problem, bidx):
        self.w, self.problem, self.bidx = w, problem, bidx
        self.scale = w.s.const(problem.scale)
        self.minus_inf = w.s.const(-math.inf)

    def finish(self, dot: Value, q: Value, key: Value, q_ok: Value | None, key_ok: Value | None) -> Value:
        w, problem = self.w, self.problem
        score = w.s.mul(dot, self.scale)
        if problem.mask is not None:
            guard = w.all_of(q_ok, key_ok)
            score = w.s.add(score, w.value_at(problem.mask, problem.mask_index(self.bidx, q, key, w.im), guard))
        visible = w.all_of(key_ok, w.cmp("le", key, q) if problem.causal else None)
        return w.select(visible, score, self.minus_inf)

    def safe_max(self, m: Value) -> Value:
        """The row maximum to subtract: 0 while the row has seen only -inf
        (fully masked so far), so that exp(-inf - m) is 0, never NaN."""
        w = self.w
        return w.select(w.cmp("eq", m, self.minus_inf), w.s.const(0.0), m)


def kv_end(w: KernelWriter, problem, q_end: Value) -> Value:
    """Keys to visit: all of them, or (causal) those up to the block's last row."""
    if not problem.causal:
        return w.im.const(problem.t)
    return w.min_index(q_end, problem.t)


def skipped_values_sum(w: KernelWriter, problem, bidx, end: Value, first: Value | int = 0, stride: int = 1) -> Value:
    """Σ 0·v over the values of the keys past `end` (those a causal block
    skips: above the diagonal for every row it has), taking the flat
    elements first, first + stride, ... of the [T - end, Dv] range: ±0, or
    NaN where one of them is inf or NaN."""
    im, s = w.im, w.s
    count = im.mul(w.index_sub(im.const(problem.t), end), im.const(problem.dv))

    def step(i: Value, acc: Value) -> list[Value]:
        key, c = im.add(end, im.div(i, problem.dv)), im.rem(i, problem.dv)
        return [s.add(acc, s.mul(s.const(0.0), w.value_at(problem.op.value, problem.v_index(bidx, key, c, im))))]

    return w.for_(first, count, stride, step, [s.const(0.0)], "skipped")[0]


def causal_visit_end(w: KernelWriter, problem, end: Value, skipped_sum: Value) -> Value:
    """The end of the keys a causal block visits: `end` (kv_end), or all T
    keys where the values past it hold an inf or NaN (`skipped_sum` is NaN).

    The language's attention is softmax(...)·v: a key above the diagonal
    weighs exactly 0, and 0·inf is NaN, so such a value makes its column
    NaN in every row above it. Skipping those keys would drop that NaN;
    visiting them, the causal mask gives each p = 0 and the tile's own p·v
    makes it (found by fusecc's own review: q, k, v 1x200x8, v[0, 199, 0] = inf)."""
    finite = w.cmp("eq", skipped_sum, skipped_sum)  # false for NaN only
    return w.select(finite, end, w.im.const(problem.t))


def gpu_causal_visit_end(w: KernelWriter, problem, bidx, end: Value, threads: int) -> Value:
    """`causal_visit_end` for a GPU block, at block level (the same value in
    every thread, so that the key loop's barriers stay legal): its threads
    share the scan of the skipped values out (consecutive threads,
    consecutive columns), each leaves its sum in shared memory, and every
    thread adds the `threads` sums up."""
    if not problem.causal:
        return end
    sums = w.alloc(MemRefType([threads], f32, "shared"), "skipped")
    w.parallel([threads], ["thread.x"], lambda t: w.store(skipped_values_sum(w, problem, bidx, end, t, threads), sums, [t]), ["t"])
    total = w.for_(0, threads, 1, lambda i, acc: [w.s.add(acc, w.load(sums, [i]))], [w.s.const(0.0)], "i")[0]
    return causal_visit_end(w, problem, end, total)


def causal_order(w: KernelWriter, problem, i: Value, count: int, gpu: bool) -> Value:
    """The q tile that block (or worker iteration) `i` of `count` takes.

    Causal tiles cost in proportion to their index. GPU blocks start in
    order, so the costliest go first and the cheap ones fill the tail; CPU
    workers take contiguous ranges of iterations, so tiles are interleaved
    from both ends (0, n-1, 1, n-2, ...) to give each range equal work."""
    if not problem.causal or count == 1:
        return i
    last = w.im.const(count - 1)
    if gpu:
        return w.index_sub(last, i)
    half = w.im.div(i, 2)
    odd = w.cmp("eq", w.im.rem(i, 2), 1)
    return w.select(odd, w.index_sub(last, half), half)
