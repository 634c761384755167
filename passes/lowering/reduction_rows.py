"""Row kernels: every stat keeps the same shape (the rows), each row
computes its stats level by level in registers and then writes its outputs;
with `tile.split` = C > 1, one kernel per level over rows * C chunks, the
partials in scratch (the module docstring of `reduction.py` shows the loops).
`horizontal.py` puts row parts beside other parts in one kernel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, f32
from fusecc.passes.lowering.elementwise import Output, compute_and_store
from fusecc.passes.lowering.kernel_builder import KernelBuilder, Part, ceil_div, product, threads
from fusecc.passes.lowering.reduction_analysis import Analysis, Stat, bind_nodes
from fusecc.passes.lowering.reduction_walkers import CpuRow, GpuRow, Partials, combine, identity
from fusecc.passes.lowering.scalar_emitter import LoweringError, ScalarEmitter
from fusecc.passes.tiling.geometry import TileConfig

LOCAL_CACHE_BYTES = 16 * 1024  # a row of kept elements in a local buffer: at most half of L1


class NotRowLocal(Exception):
    """A stat is read at a row other than the one being computed."""


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


def by_reduced_shape(stats: Sequence[Stat]) -> list[tuple[tuple[int, ...], list[Stat]]]:
    groups: dict[tuple[int, ...], list[Stat]] = {}
    for s in stats:
        groups.setdefault(s.reduced_shape, []).append(s)
    return list(groups.items())


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
