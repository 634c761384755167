"""Groups with reductions: row kernels, split rows, and a staged fallback.

`reduction_analysis` turns the group's reductions and composites into
stats in levels. When every stat keeps the same shape O (the *rows*) and
every output starts with O, the group is a **row kernel**: each row
computes its stats level by level, keeping them in registers, then writes
its outputs. Otherwise (say, a reduction over a leading axis feeding an
op that reads other rows) the group is **staged**: one kernel per level
writes the stats to scratch buffers, and a last elementwise kernel reads
them. Either way every tensor op lowers; the row kernel is the fast one.

GPU row kernel (T = tile.threads threads, P = T / rows_per_block threads
per row, a power of two; `rows` rows, `%tid` the thread):

    loop.parallel [ceil(rows / rows_per_block)] block.x (%block):
      %partials = loop.alloc : memref<S x T/32 x f32, shared>    // only if P > 32
      loop.parallel [T] thread.x (%tid):
        %lane = %tid % P ; %row = %block * rows_per_block + %tid / P
        %ok = %row < rows ; %row = min(%row, rows - 1)   // clamp: every warp stays busy
        // per level, per reduced shape: S stats in one strided loop
        %acc.. = loop.for %j = %lane to R step P iter(identity..) { combine(acc, element(j)) }
        %acc = combine(%acc, loop.shuffle_xor %acc {offset = o})   for o = min(P,32)/2 .. 1
        // if P > 32: lane 0 of each warp stores to %partials; loop.barrier;
        // every thread combines its row's P/32 partials; loop.barrier
        // outputs: per inner shape of the outputs
        loop.for %j = %lane to R_out step P { loop.store <formula>, ..., %ok }
        // (an output with one element per row: loop.if %lane == 0 { store })

CPU row kernel: one worker iteration per row:

    loop.parallel [rows] worker (%row):
      // a stat: 16 lanes of partials in a local buffer
      %acc = loop.alloc : memref<16xf32, local>
      loop.parallel [16] vector: store identity
      loop.for %c = 0 to R / 16: loop.parallel [16] vector (%v): acc[v] = combine(acc[v], element(c*16+v))
      %tail = loop.for %j = R / 16 * 16 to R iter(identity)      // the remainder
      %stat = loop.for %v = 0 to 16 iter(%tail) { combine(x, acc[v]) }
      // outputs
      loop.parallel [R_out] vector (%j): loop.store <formula>
    (rows shorter than 64 reduce with a plain `loop.for` carrying the value.)

**Split rows** (`tile.split` = C > 1, for few long rows): stat level l is
kernel `<name>_level<l>` over rows * C blocks (workers); block (row, chunk)
reduces its chunk [chunk * L, min(chunk * L + L, R)) (L = ceil(R / C)),
folds the C partials of earlier levels, and writes its partial of each
level-l stat to scratch `memref<rows x C x f32>`; kernel `<name>` then
folds all partials and writes the outputs of its chunk.

**Staged**: kernel `<name>_level<l>` computes every stat of level l, one
thread (worker iteration) per kept element with a sequential loop over the
reduced elements, into scratch `memref<kept shape>`; kernel `<name>` is the
elementwise kernel of the outputs with the stats loaded from scratch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, ScalarType, f32, i1
from fusecc.dialects import arith, loop
from fusecc.dialects.fusion import GroupOp

from fusecc.compiler.diagnostics import error
from fusecc.passes.lowering import dynamic_loops
from fusecc.passes.lowering.elementwise import Output, compute_and_store, elementwise_parts
from fusecc.passes.lowering.interface import ArgRef, Launch, LoweredGroup, group_io_kernel, input_buffers, kernel_name, memref_for, output_buffers, template
from fusecc.passes.lowering.kernel_builder import KernelBuilder, Part, build_kernel, ceil_div, product, threads
from fusecc.passes.lowering.reduction_analysis import Analysis, Stat, analyse, bind_nodes
from fusecc.passes.lowering.scalar_emitter import LoweringError, ScalarEmitter
from fusecc.passes.tiling.geometry import TileConfig
from fusecc.passes.tiling.tile import tile_config

VECTOR = 16  # CPU lanes of one register of f32 (a zmm register)
PARTIALS = 64  # CPU lanes of partial results at most: four registers, four independent chains
SCALAR_ROW = 64  # CPU rows shorter than this reduce with a plain loop
LOCAL_CACHE_BYTES = 16 * 1024  # a row of kept elements in a local buffer: at most half of L1


class NotRowLocal(Exception):
    """A stat is read at a row other than the one being computed."""


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


def same_index(kb: KernelBuilder, a: Sequence[Value], b: Sequence[Value]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is y:
            continue
        kx, ky = kb.im.value_of(x), kb.im.value_of(y)
        if kx is None or kx != ky:
            return False
    return True


@dataclass
class RowState:
    """The node-formula context of a row kernel: stats of the current row in
    registers; on the CPU, the elements of `reused` stats kept in `caches`
    (stat -> buffer: the row's output, or a local buffer of one row)."""

    em: ScalarEmitter
    kb: KernelBuilder
    row: list[Value] = field(default_factory=list)
    values: dict[Stat, Value] = field(default_factory=dict)
    caches: dict[Stat, Value] = field(default_factory=dict)
    # The output buffers and index that compute_and_store is computing now:
    # an output used as a cache may be read back only there, before its store.
    writing: tuple[frozenset, list[Value]] | None = None

    def lookup(self, stat: Stat, kept: Sequence[Value]) -> Value:
        value = self.values.get(stat)
        if value is None:
            raise LoweringError(f"{stat} is used before it is computed")
        if not same_index(self.kb, kept, self.row):
            raise NotRowLocal()
        return value

    def element(self, stat: Stat, kept: Sequence[Value], reduced: Sequence[Value]) -> Value:
        buffer = self.caches.get(stat)
        if buffer is not None and stat in self.values and same_index(self.kb, kept, self.row):
            if buffer.type.memory_space == "local":
                return self.kb.load(buffer, reduced)
            full = list(self.row) + list(reduced)
            if self.writing is not None and buffer in self.writing[0] and same_index(self.kb, full, self.writing[1]):
                return self.kb.load(buffer, full)
        return stat.element(self, kept, reduced)

    def divide(self, numerator: Value, denominator: Value) -> Value:
        s = self.em.s
        if self.kb.hw.is_gpu:
            return s.div(numerator, denominator)
        return s.mul(numerator, s.div(s.const(1.0, denominator.type), denominator))

    def keep(self, stats: Sequence[Stat], reduced: Sequence[Value], values: Sequence[Value]) -> None:
        """Store the elements of the cached stats among `stats` at `reduced`."""
        for stat, value in zip(stats, values):
            buffer = self.caches.get(stat)
            if buffer is not None:
                self.kb.store(value, buffer, list(reduced) if buffer.type.memory_space == "local" else list(self.row) + list(reduced))


@dataclass
class ScratchState:
    """The node-formula context of staged kernels: stats loaded from scratch."""

    em: ScalarEmitter
    kb: KernelBuilder
    buffers: dict[Stat, Value]

    def lookup(self, stat: Stat, kept: Sequence[Value]) -> Value:
        buffer = self.buffers.get(stat)
        if buffer is None:
            raise LoweringError(f"{stat} is used before it is computed")
        return self.kb.load(buffer, kept)

    def element(self, stat: Stat, kept: Sequence[Value], reduced: Sequence[Value]) -> Value:
        return stat.element(self, kept, reduced)

    def divide(self, numerator: Value, denominator: Value) -> Value:
        return self.em.s.div(numerator, denominator)


def by_reduced_shape(stats: Sequence[Stat]) -> list[tuple[tuple[int, ...], list[Stat]]]:
    groups: dict[tuple[int, ...], list[Stat]] = {}
    for s in stats:
        groups.setdefault(s.reduced_shape, []).append(s)
    return list(groups.items())


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


# --------------------------------------------------------------------------- row kernels


@dataclass
class RowPlan:
    """A row kernel's work: its stats, rows and outputs."""

    analysis: Analysis
    row_shape: tuple[int, ...]
    outputs: list[Output]

    @property
    def rows(self) -> int:
        return product(self.row_shape)

    def most_together(self) -> int:
        return max((len(stats) for level in self.analysis.levels for _, stats in by_reduced_shape(level)), default=1)


def row_plan(analysis: Analysis, outputs: Sequence[Output]) -> RowPlan | None:
    """The row kernel for these outputs, or None when the stats do not
    share one kept shape or an output does not start with it."""
    row_shape = analysis.row_shape()
    if row_shape is None:
        return None
    for value, _ in outputs:
        if tuple(value.type.shape[: len(row_shape)]) != row_shape:
            return None
    return RowPlan(analysis, row_shape, list(outputs))


def compute_levels(state: RowState, walker, levels: Sequence[Sequence[Stat]], chunk: Value | None = None, chunks: int = 1) -> list[tuple[Stat, Value]]:
    """Reduce the given levels over the row (or its chunk); fills state.values."""
    computed = []
    for level in levels:
        for shape, stats in by_reduced_shape(level):
            lo, hi = chunk_range(state.kb, product(shape), chunk, chunks)

            def elements(j, shape=shape, stats=stats):
                reduced = state.kb.im.delinearize(j, shape)
                values = [s.element(state, state.row, reduced) for s in stats]
                state.keep(stats, reduced, values)
                return values

            accs = walker.reduce(stats, elements, lo, hi)
            for s, acc in zip(stats, accs):
                acc.name_hint = acc.name_hint or s.name
                state.values[s] = acc
                computed.append((s, acc))
    return computed


def chunk_range(kb: KernelBuilder, n: int, chunk: Value | None, chunks: int):
    """[lo, hi) of `chunk` of `chunks` over n elements (all of them without a chunk)."""
    if chunk is None or chunks == 1:
        return 0, n
    size = ceil_div(n, chunks)
    lo = kb.min_index(kb.im.mul(chunk, kb.im.const(size)), n)
    hi = kb.min_index(kb.im.add(lo, kb.im.const(size)), n)
    return lo, hi


def write_outputs(state: RowState, walker, plan: RowPlan, guard: Value | None, chunk: Value | None = None, chunks: int = 1) -> None:
    kb, em = state.kb, state.em
    by_inner: dict[tuple[int, ...], list[Output]] = {}
    for value, buffer in plan.outputs:
        by_inner.setdefault(tuple(value.type.shape[len(plan.row_shape) :]), []).append((value, buffer))

    def store(j, inner, outs):
        idx = state.row + kb.im.delinearize(j, inner)
        state.writing = (frozenset(buffer for _, buffer in outs), idx)
        compute_and_store(kb, em, outs, idx, guard)
        state.writing = None

    for inner, outs in by_inner.items():
        lo, hi = chunk_range(kb, product(inner), chunk, chunks)
        walker.each(lo, hi, lambda j, inner=inner, outs=outs: store(j, inner, outs))


def element_caches(kb: KernelBuilder, plan: RowPlan) -> dict[Stat, Value]:
    """Where a CPU row kernel keeps the elements of `reused` stats: the f32
    output of the row that is computed from them, when its row has the
    stat's shape (it is overwritten element by element afterwards: no extra
    traffic), else a local buffer of one row (if it is small enough to stay
    in L1), else nowhere (they are recomputed)."""
    caches: dict[Stat, Value] = {}
    taken: set[Value] = set()
    for stat in plan.analysis.stats:
        if not stat.reused or stat.type is not f32:
            continue
        for value, buffer in plan.outputs:
            if buffer not in taken and buffer.type.element_type is f32 and tuple(buffer.type.shape) == plan.row_shape + stat.reduced_shape and depends_on(value, stat.node.op.result):
                caches[stat] = buffer
                taken.add(buffer)
                break
        else:
            row_elements = product(stat.reduced_shape)
            if type(row_elements) is int and row_elements * 4 <= LOCAL_CACHE_BYTES:  # a `?` row: recomputed
                caches[stat] = kb.alloc(MemRefType(list(stat.reduced_shape), f32, "local"), f"kept_{stat.name}")
    return caches


def depends_on(value: Value, source: Value) -> bool:
    """Whether `value` is computed from `source` (within one group body)."""
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        if v is source:
            return True
        op = v.defining_op
        if op is None or op in seen:
            continue
        seen.add(op)
        stack.extend(op.operands)
    return False


def row_part(kb: KernelBuilder, em: ScalarEmitter, plan: RowPlan, config: TileConfig) -> Part:
    """The single-kernel row reduction (no split)."""
    state = RowState(em, kb)
    bind_nodes(em, plan.analysis, state)
    rows = plan.rows
    if not kb.hw.is_gpu:

        def emit_cpu(kb: KernelBuilder, unit: Value) -> None:
            state.row = [kb.named(i, f"r{axis}") for axis, i in enumerate(kb.im.delinearize(unit, plan.row_shape))]
            state.values = {}
            state.caches = element_caches(kb, plan)
            walker = CpuRow(kb)
            compute_levels(state, walker, plan.analysis.levels)
            write_outputs(state, walker, plan, None)

        return Part(rows, emit_cpu)

    per_block = config.rows_per_block
    per_row = config.threads // per_block
    partials = Partials(plan.most_together(), config.threads)

    def emit_gpu(kb: KernelBuilder, unit: Value) -> None:
        def thread(tid: Value) -> None:
            walker = GpuRow(kb, tid, per_row, per_block, partials)
            row = kb.im.add(kb.im.mul(unit, kb.im.const(per_block)), walker.row_in_block) if per_block > 1 else unit
            guard = None
            if rows % per_block:
                guard = kb.named(kb.lt(row, rows), "row_ok")
                row = kb.min_index(row, rows - 1)
            state.row = [kb.named(i, f"r{axis}") for axis, i in enumerate(kb.im.delinearize(row, plan.row_shape))]
            state.values = {}
            compute_levels(state, walker, plan.analysis.levels)
            write_outputs(state, walker, plan, guard)

        threads(kb, config.threads, thread)

    return Part(ceil_div(rows, per_block), emit_gpu)


def fold_partials(state: RowState, stats: Sequence[Stat], scratch: dict[Stat, Value], row: Value, chunks: int) -> None:
    kb = state.kb
    for s in stats:
        fold = lambda c, acc, s=s: [combine(kb, s.combine, acc, kb.load(scratch[s], [row, c]))]  # noqa: E731
        (state.values[s],) = kb.for_(0, chunks, 1, fold, [identity(kb, s.combine, s.type)], name="c")
        state.values[s].name_hint = s.name


def split_part(kb: KernelBuilder, em: ScalarEmitter, plan: RowPlan, config: TileConfig, level: int | None, scratch: dict[Stat, Value]) -> Part:
    """Level `level` of a split row reduction, or its outputs (level None)."""
    state = RowState(em, kb)
    bind_nodes(em, plan.analysis, state)
    chunks = config.split
    levels = plan.analysis.levels
    done = levels if level is None else levels[:level]

    def body(kb: KernelBuilder, unit: Value, walker) -> None:
        row, chunk = (kb.named(v, n) for v, n in zip(kb.im.delinearize(unit, [plan.rows, chunks]), ("row", "chunk")))
        state.row = [kb.named(i, f"r{axis}") for axis, i in enumerate(kb.im.delinearize(row, plan.row_shape))]
        state.values = {}
        fold_partials(state, [s for lv in done for s in lv], scratch, row, chunks)
        if level is None:
            write_outputs(state, walker, plan, None, chunk, chunks)
            return
        for s, acc in compute_levels(state, walker, [levels[level]], chunk, chunks):
            kb.store(acc, scratch[s], [row, chunk], walker.leader())

    if not kb.hw.is_gpu:
        return Part(plan.rows * chunks, lambda kb, unit: body(kb, unit, CpuRow(kb)))
    partials = Partials(plan.most_together(), config.threads)

    def emit_gpu(kb: KernelBuilder, unit: Value) -> None:
        threads(kb, config.threads, lambda tid: body(kb, unit, GpuRow(kb, tid, config.threads, 1, partials)))

    return Part(plan.rows * chunks, emit_gpu)


# --------------------------------------------------------------------------- staged


def stat_part(kb: KernelBuilder, state: ScratchState, stat: Stat, target: Value, config: TileConfig) -> Part:
    """Every element of one stat, each with a sequential loop over what it reduces."""
    n = product(stat.kept_shape)
    reduced = product(stat.reduced_shape)

    def compute(flat: Value) -> None:
        kb_ = state.kb
        kept = kb_.im.delinearize(flat, stat.kept_shape)
        step = lambda r, acc: [combine(kb_, stat.combine, acc, stat.element(state, kept, kb_.im.delinearize(r, stat.reduced_shape)))]  # noqa: E731
        (acc,) = kb_.for_(0, reduced, 1, step, [identity(kb_, stat.combine, stat.type)], name="r")
        kb_.store(acc, target, kept)

    if not kb.hw.is_gpu:
        return Part(n, lambda kb, unit: compute(unit))
    t = config.threads

    def emit_gpu(kb: KernelBuilder, unit: Value) -> None:
        def thread(tid):
            flat = kb.im.add(kb.im.mul(unit, kb.im.const(t)), tid)
            if n % t:
                kb.if_(kb.lt(flat, n), lambda: compute(flat))
            else:
                compute(flat)

        threads(kb, t, thread)

    return Part(ceil_div(n, t), emit_gpu)


# --------------------------------------------------------------------------- kernels of a group


def _kernel(group: GroupOp, name: str, arg_types: Sequence[MemRefType], refs: Sequence[ArgRef]) -> tuple[loop.KernelOp, list[ArgRef]]:
    """A kernel of the group with the given arguments (not the group's own)."""
    attrs = {"kind": group.attr("kind")}
    if group.attr("id") is not None:
        attrs["group"] = group.attr("id")
    return loop.KernelOp.build(name, list(arg_types), attrs, group.location), list(refs)


def _threads(config: TileConfig, hw: Hardware) -> int:
    return config.threads if hw.is_gpu else 1


def lower_rows(group: GroupOp, hw: Hardware, analysis: Analysis, config: TileConfig) -> LoweredGroup | None:
    """The row kernel(s) of a group, or None when it is not row-local."""
    kernel, refs = group_io_kernel(group)
    outputs = list(zip(group.yield_op.operands, output_buffers(group, kernel)))
    plan = row_plan(analysis, outputs)
    if plan is None:
        return None
    try:
        if config.split > 1:
            return _split(group, hw, analysis, config)
        kb = KernelBuilder(kernel, hw)
        em = kb.emitter(input_buffers(group, kernel))
        build_kernel(kb, [row_part(kb, em, plan, config)], _threads(config, hw))
    except NotRowLocal:
        return None
    return LoweredGroup([Launch(kernel, refs)])


def _level_kernel(group: GroupOp, hw: Hardware, lowered: LoweredGroup, scratch_refs: dict, level: int):
    """The kernel computing statistics of one level: it reads the group's
    inputs and the scratch of every statistic up to that level."""
    used = [s for s in scratch_refs if s.level <= level]
    inputs = [memref_for(v.type) for v in group.operands]
    kernel, refs = _kernel(
        group,
        f"{kernel_name(group)}_level{level}",
        inputs + [lowered.scratch[scratch_refs[s].index] for s in used],
        [ArgRef("input", i) for i in range(len(inputs))] + [scratch_refs[s] for s in used],
    )
    lowered.launches.append(Launch(kernel, refs))
    kb = KernelBuilder(kernel, hw)
    args = kernel.body.args
    return kb, kb.emitter(dict(zip(group.body.args, args))), dict(zip(used, args[len(inputs) :]))


def _final_kernel(group: GroupOp, hw: Hardware, lowered: LoweredGroup, scratch_refs: dict):
    """The group's own kernel after its statistics levels: it reads the
    inputs and every statistic's scratch and writes the outputs."""
    inputs = [memref_for(v.type) for v in group.operands]
    outputs = [memref_for(r.type) for r in group.results]
    kernel, refs = _kernel(
        group,
        kernel_name(group),
        inputs + outputs + [lowered.scratch[r.index] for r in scratch_refs.values()],
        [ArgRef("input", i) for i in range(len(inputs))] + [ArgRef("output", i) for i in range(len(outputs))] + list(scratch_refs.values()),
    )
    lowered.launches.append(Launch(kernel, refs))
    kb = KernelBuilder(kernel, hw)
    args = kernel.body.args
    em = kb.emitter(dict(zip(group.body.args, args)))
    n_in, n_out = len(inputs), len(outputs)
    return kb, em, list(zip(group.yield_op.operands, args[n_in : n_in + n_out])), dict(zip(scratch_refs, args[n_in + n_out :]))


def _split(group: GroupOp, hw: Hardware, analysis: Analysis, config: TileConfig) -> LoweredGroup:
    lowered = LoweredGroup()
    rows = product(analysis.row_shape())
    scratch_refs = {s: lowered.add_scratch(MemRefType([rows, config.split], s.type)) for s in analysis.stats}
    for level in range(len(analysis.levels)):
        kb, em, scratch = _level_kernel(group, hw, lowered, scratch_refs, level)
        build_kernel(kb, [split_part(kb, em, row_plan(analysis, []), config, level, scratch)], _threads(config, hw))
    kb, em, outputs, scratch = _final_kernel(group, hw, lowered, scratch_refs)
    build_kernel(kb, [split_part(kb, em, row_plan(analysis, outputs), config, None, scratch)], _threads(config, hw))
    return lowered


def lower_staged(group: GroupOp, hw: Hardware, analysis: Analysis, config: TileConfig) -> LoweredGroup:
    lowered = LoweredGroup()
    scratch_refs = {s: lowered.add_scratch(MemRefType(s.kept_shape, s.type)) for s in analysis.stats}
    elementwise = TileConfig(threads=_threads(config, hw) if hw.is_gpu else 1)
    for level, level_stats in enumerate(analysis.levels):
        kb, em, scratch = _level_kernel(group, hw, lowered, scratch_refs, level)
        state = ScratchState(em, kb, {s: b for s, b in scratch.items() if s.level < level})
        bind_nodes(em, analysis, state)
        parts = [stat_part(kb, state, s, scratch[s], elementwise) for s in level_stats]
        build_kernel(kb, parts, _threads(elementwise, hw))
    kb, em, outputs, scratch = _final_kernel(group, hw, lowered, scratch_refs)
    bind_nodes(em, analysis, ScratchState(em, kb, scratch))
    build_kernel(kb, elementwise_parts(kb, em, outputs, elementwise), _threads(elementwise, hw))
    return lowered


@template("elementwise", "injective", "reduction", "opaque")
def lower_group(group: GroupOp, hw: Hardware) -> LoweredGroup:
    """Any group of elementwise, layout, reduction and composite ops
    (matmul and attention too, naively, when they arrive as `opaque`)."""
    config = tile_config(group, hw)
    analysis = analyse(group)
    if dynamic_loops.is_dynamic(group) and analysis.nodes:
        # `?` dims: one worker per row, the rows and their length known at run time
        lowered = lower_rows(group, hw, analysis, replace(config, split=1))
        if lowered is None:
            raise error(group.location, f"a reduction group with '?' dims that is not row-local is not supported yet {dynamic_loops.target_words(hw)} (docs/dynamic-shapes.md)")
        return lowered
    if not analysis.nodes:
        kernel, refs = group_io_kernel(group)
        kb = KernelBuilder(kernel, hw)
        em = kb.emitter(input_buffers(group, kernel))
        outputs = list(zip(group.yield_op.operands, output_buffers(group, kernel)))
        build_kernel(kb, elementwise_parts(kb, em, outputs, config), _threads(config, hw))
        return LoweredGroup([Launch(kernel, refs)])
    return lower_rows(group, hw, analysis, config) or lower_staged(group, hw, analysis, config)


__all__ = ["CpuRow", "GpuRow", "NotRowLocal", "RowPlan", "lower_group", "lower_rows", "lower_staged", "row_part", "row_plan"]
