"""Groups with reductions: row kernels, split rows, and a staged fallback;
the template of elementwise, injective, reduction and opaque groups.

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

The stages: `reduction_analysis` (stats in levels), `reduction_walkers`
(how a row is walked on a GPU or a CPU), `reduction_rows` (row and split
row kernels); this module holds the staged kernels and turns a group into
its launches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType
from fusecc.dialects import loop
from fusecc.dialects.fusion import GroupOp

from fusecc.compiler.diagnostics import error
from fusecc.passes.lowering import dynamic_loops
from fusecc.passes.lowering.elementwise import elementwise_parts
from fusecc.passes.lowering.interface import ArgRef, Launch, LoweredGroup, group_io_kernel, input_buffers, kernel_name, memref_for, output_buffers, template
from fusecc.passes.lowering.kernel_builder import KernelBuilder, Part, build_kernel, ceil_div, product, threads
from fusecc.passes.lowering.reduction_analysis import Analysis, Stat, analyse, bind_nodes
from fusecc.passes.lowering.reduction_rows import NotRowLocal, row_part, row_plan, split_part
from fusecc.passes.lowering.reduction_walkers import combine, identity
from fusecc.passes.lowering.scalar_emitter import LoweringError, ScalarEmitter
from fusecc.passes.tiling.geometry import TileConfig
from fusecc.passes.tiling.tile import tile_config


# --------------------------------------------------------------------------- staged


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


__all__ = ["lower_group", "lower_rows", "lower_staged"]
