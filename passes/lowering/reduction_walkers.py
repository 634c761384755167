"""How a reduction walks a row (or a chunk of one): combining values, and
the two walkers the row kernels use. `GpuRow`: P cooperating threads, a
strided loop, warp shuffles and shared partials when P passes a warp.
`CpuRow`: one worker, P lanes of partials in a local buffer, a scalar tail,
the lanes folded as a tree. Both offer `reduce` (stats over [lo, hi)),
`each` (a body per element, for the outputs) and `leader`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, ScalarType, i1
from fusecc.dialects import arith
from fusecc.passes.lowering.kernel_builder import KernelBuilder
from fusecc.passes.lowering.reduction_analysis import Stat

VECTOR = 16  # CPU lanes of one register of f32 (a zmm register)
PARTIALS = 64  # CPU lanes of partial results at most: four registers, four independent chains
SCALAR_ROW = 64  # CPU rows shorter than this reduce with a plain loop


# --------------------------------------------------------------------------- combining


# "max"/"min" are numpy's (a NaN wins, as in np.max: reduce_max/min);
# "maxnum" is C's fmaxf (NaN ignored): enough where a NaN reaches the result
# another way (softmax's max: a NaN in the row makes its sum NaN), and one
# instruction on a GPU.
COMBINERS = {"sum": arith.AddOp, "maxnum": arith.MaxOp}


def identity(kb: KernelBuilder, combine: str, t: ScalarType) -> Value:
    if combine == "sum":
        return kb.constant(0, t)
    if t is i1:
        return kb.constant(combine == "min", t)
    if t.is_float:
        return kb.constant(float("-inf") if combine in ("max", "maxnum") else float("inf"), t)
    info = np.iinfo(t.numpy_dtype)
    return kb.constant(int(info.min if combine in ("max", "maxnum") else info.max), t)


def combine(kb: KernelBuilder, kind: str, a: Value, b: Value) -> Value:
    """a + b, or numpy's maximum/minimum (a NaN wins, as in np.max)."""
    if kind == "max":
        return kb.s.maximum(a, b)
    if kind == "min":
        return kb.s.minimum(a, b)
    return kb.b.create(COMBINERS[kind], [a, b]).result


# --------------------------------------------------------------------------- how a row is walked


ElementsFn = Callable[[Value], list[Value]]


class GpuRow:
    """A row (or a chunk of one) walked by P cooperating threads."""

    def __init__(self, kb: KernelBuilder, tid: Value, per_row: int, rows_per_block: int, partials: "Partials"):
        self.kb = kb
        self.tid = tid
        self.per_row = per_row
        self.lane = kb.named(kb.im.rem(tid, per_row), "lane") if rows_per_block > 1 else tid
        self.row_in_block = kb.named(kb.im.div(tid, per_row), "row_in_block") if rows_per_block > 1 else kb.im.const(0)
        self.partials = partials

    def reduce(self, stats: Sequence[Stat], elements: ElementsFn, lo, hi) -> list[Value]:
        kb = self.kb
        inits = [identity(kb, s.combine, s.type) for s in stats]
        body = lambda j, *accs: [combine(kb, s.combine, a, e) for s, a, e in zip(stats, accs, elements(j))]  # noqa: E731
        accs = kb.for_(kb.im.add(kb.index(lo), self.lane), hi, self.per_row, body, inits)
        return self.across_threads(stats, accs)

    def across_threads(self, stats: Sequence[Stat], accs: list[Value]) -> list[Value]:
        kb, warp = self.kb, kb_warp(self.kb)
        offset = min(self.per_row, warp) // 2
        while offset:
            accs = [combine(kb, s.combine, a, kb.shuffle_xor(a, offset)) for s, a in zip(stats, accs)]
            offset //= 2
        if self.per_row <= warp:
            return accs
        warps = self.per_row // warp
        warp_id = kb.im.div(self.tid, warp)
        leader = kb.cmp("eq", kb.im.rem(self.tid, warp), 0)
        buffers = [self.partials.buffer(self.kb, s.type) for s in stats]
        for i, (acc, buffer) in enumerate(zip(accs, buffers)):
            kb.store(acc, buffer, [i, warp_id], leader)
        first = kb.im.mul(self.row_in_block, kb.im.const(warps))
        out = []
        for i, (s, buffer) in enumerate(zip(stats, buffers)):
            fold = lambda w, acc, s=s, buffer=buffer, i=i: [combine(kb, s.combine, acc, kb.load(buffer, [i, kb.im.add(first, w)]))]  # noqa: E731
            out += kb.for_(0, warps, 1, fold, [identity(kb, s.combine, s.type)], name="w")
        return out

    def each(self, lo, hi, body: Callable[[Value], None]) -> None:
        kb = self.kb
        if self.per_row > 1 and isinstance(lo, int) and isinstance(hi, int) and hi - lo == 1:
            kb.if_(kb.cmp("eq", self.lane, 0), lambda: body(kb.index(lo)))
            return
        kb.for_(kb.im.add(kb.index(lo), self.lane), hi, self.per_row, lambda j: body(j))

    def leader(self) -> Value:
        return self.kb.cmp("eq", self.lane, 0)


def kb_warp(kb: KernelBuilder) -> int:
    return kb.hw.warp_size


@dataclass
class Partials:
    """The shared buffers where warps leave their partial stats: one per
    stat type, `count` stats by one slot per warp of the block."""

    count: int
    block_threads: int
    buffers: dict[ScalarType, Value] = field(default_factory=dict)

    def buffer(self, kb: KernelBuilder, t: ScalarType) -> Value:
        found = self.buffers.get(t)
        if found is None:
            found = kb.alloc(MemRefType([self.count, self.block_threads // kb_warp(kb)], t, "shared"), "partials")
            self.buffers[t] = found
        return found


class CpuRow:
    """A row (or a chunk of one) walked by one worker, P lanes at a time."""

    def __init__(self, kb: KernelBuilder):
        self.kb = kb
        self.lanes: dict[tuple[ScalarType, int, int], Value] = {}  # reused by every level

    def lane_buffer(self, t: ScalarType, i: int, width: int) -> Value:
        found = self.lanes.get((t, i, width))
        if found is None:
            found = self.kb.alloc(MemRefType([width], t, "local"), f"lanes{i}")
            self.lanes[(t, i, width)] = found
        return found

    def reduce(self, stats: Sequence[Stat], elements: ElementsFn, lo, hi) -> list[Value]:
        kb = self.kb
        inits = lambda: [identity(kb, s.combine, s.type) for s in stats]  # noqa: E731
        scalar_body = lambda j, *accs: [combine(kb, s.combine, a, e) for s, a, e in zip(stats, accs, elements(j))]  # noqa: E731
        static = isinstance(lo, int) and isinstance(hi, int)
        if static and hi - lo < SCALAR_ROW:
            return kb.for_(lo, hi, 1, scalar_body, inits())
        width = partial_lanes(hi - lo if static else None)
        lanes = [self.lane_buffer(s.type, i, width) for i, s in enumerate(stats)]
        start = kb.index(lo)

        def clear(v):
            for s, buffer, init in zip(stats, lanes, inits()):
                kb.store(init, buffer, [v])

        kb.parallel([width], ["vector"], clear, ["v"])
        count = kb.im.const(hi - lo) if static else kb.b.create(arith.SubOp, [kb.index(hi), start]).result
        full = kb.im.div(count, width)

        def chunk(c):
            def lane(v):
                j = kb.im.add(start, kb.im.add(kb.im.mul(c, kb.im.const(width)), v))
                values = elements(j)
                partial = [kb.load(buffer, [v]) for buffer in lanes]
                for s, buffer, p, e in zip(stats, lanes, partial, values):
                    kb.store(combine(kb, s.combine, p, e), buffer, [v])

            kb.parallel([width], ["vector"], lane, ["v"])

        kb.for_(0, full, 1, chunk, name="c")
        tail = None
        if not static or (hi - lo) % width:
            tail_start = kb.im.add(start, kb.im.mul(full, kb.im.const(width)))
            tail = kb.for_(tail_start, hi, 1, scalar_body, inits())
        # Fold the lanes as a tree (lane v takes lane v + h, h halving), in
        # vector loops: a chain of `width` scalar combines would cost more
        # than the row's chunks when rows are a few thousand long.
        half = width // 2
        while half:

            def fold(v, half=half):
                for s, buffer in zip(stats, lanes):
                    kb.store(combine(kb, s.combine, kb.load(buffer, [v]), kb.load(buffer, [kb.im.add(v, kb.im.const(half))])), buffer, [v])

            kb.parallel([half], ["vector"], fold, ["v"])
            half //= 2
        folded = [kb.load(buffer, [kb.im.const(0)]) for buffer in lanes]
        return folded if tail is None else [combine(kb, s.combine, f, t) for s, f, t in zip(stats, folded, tail)]

    def each(self, lo, hi, body: Callable[[Value], None]) -> None:
        kb = self.kb
        if isinstance(lo, int) and isinstance(hi, int):
            if hi - lo == 1:
                body(kb.index(lo))
            else:
                kb.parallel([hi - lo], ["vector"], lambda v: body(kb.im.add(v, kb.index(lo))), ["v"])
            return
        start = kb.index(lo)
        count = kb.b.create(arith.SubOp, [kb.index(hi), start]).result
        full = kb.im.div(count, VECTOR)

        def chunk(c):
            base = kb.im.add(start, kb.im.mul(c, kb.im.const(VECTOR)))
            kb.parallel([VECTOR], ["vector"], lambda v: body(kb.im.add(base, v)), ["v"])

        kb.for_(0, full, 1, chunk, name="c")
        kb.for_(kb.im.add(start, kb.im.mul(full, kb.im.const(VECTOR))), hi, 1, lambda j: body(j))

    def leader(self) -> Value | None:
        return None


def partial_lanes(length: int | None) -> int:
    """Lanes of partial results for a row of `length` (None: not known when
    lowering): up to PARTIALS (several registers: independent chains hide
    the latency of the combine), while the row fills two chunks."""
    width = VECTOR
    while length is not None and width < PARTIALS and 4 * width <= length:
        width *= 2
    return width
