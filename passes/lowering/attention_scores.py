"""What both attention templates (attention.py on FMA, attention_mma.py on
tensor cores) do alike with scores: scale, additive mask, causal and
past-the-end masking (`Scores`), the keys a block visits (`kv_end`) and the
order causal query tiles are taken in (`causal_order`)."""

from __future__ import annotations

import math

from fusecc.compiler.ir import Value
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
