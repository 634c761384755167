"""Horizontal groups: independent computations launched as one kernel.

The group body falls apart into connected components (ops linked by the
values they pass; sharing an input or a constant does not link them: the
parts fusion formed, `tiling.parts.horizontal_parts`). Each component
becomes one or more parts of a single kernel, and the block (worker) index
dispatches among them (`kernel_builder.dispatch`):

    loop.parallel [B0 + B1 + ...] block.x (%block):
      loop.if %block < B0 { <part 0 with %block> }
      else { loop.if %block < B0 + B1 { <part 1 with %block - B0> } else { ... } }

Elementwise components are elementwise parts; reduction components are
row parts (their rows per block fitted to the kernel's common
`tile.threads`). A component that needs more than one kernel (split or
staged rows) or a kind this module does not generate (matmul, attention)
is lowered on its own, as a one-component group with its kind's template,
and launched after the horizontal kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.traits import ConstantLike
from fusecc.dialects.fusion import GroupOp, YieldOp

from fusecc.passes.lowering.elementwise import Output, elementwise_parts
from fusecc.passes.lowering.interface import TEMPLATES, ArgRef, Launch, LoweredGroup, group_io_kernel, input_buffers, output_buffers, template
from fusecc.passes.lowering.kernel_builder import KernelBuilder, Part, build_kernel
from fusecc.passes.lowering.reduction_rows import NotRowLocal, row_part, row_plan
from fusecc.passes.lowering.reduction_analysis import analyse_ops
from fusecc.passes.tiling.parts import horizontal_parts
from fusecc.passes.tiling.geometry import Overrides, TileConfig, analysis_geometry, elementwise_block, rows_config
from fusecc.passes.tiling.tile import tile_config

FOREIGN = {"tensor.matmul": "matmul", "tensor.attention": "attention"}


@dataclass(eq=False)
class Component:
    ops: list[Operation]
    outputs: list[int]  # indices of the group results it yields

    def kind(self) -> str:
        for op in self.ops:
            if op.name in FOREIGN:
                return FOREIGN[op.name]
        return "reduction" if analyse_ops(self.ops).nodes else "elementwise"


def components(group: GroupOp) -> list[Component]:
    """The group's parts (`tiling.parts.horizontal_parts`, the rule fusion
    formed them by: constants link no parts), in body order, each with the
    constants it reads (a constant two parts share is cloned into both)."""
    body = group.body_ops()
    position = {op: i for i, op in enumerate(body)}
    constants = [op for op in body if op.has_trait(ConstantLike)]
    found: list[Component] = []
    part_of: dict[Operation, Component] = {}
    for _, ops in horizontal_parts(group):
        read = {v.defining_op for op in ops for v in op.operands}
        component = Component(sorted([c for c in constants if c in read] + list(ops), key=position.__getitem__), [])
        found.append(component)
        part_of.update((op, component) for op in ops)
    alone: dict[Value, Component] = {}  # a yielded argument or constant
    for i, v in enumerate(group.yield_op.operands):
        component = part_of.get(v.defining_op)
        if component is None:
            component = alone.setdefault(v, Component([v.defining_op] if v.defining_op is not None else [], []))
        component.outputs.append(i)
    return [c for c in [*found, *alone.values()] if c.outputs]


def subgroup(group: GroupOp, component: Component, kind: str) -> tuple[GroupOp, list[int]]:
    """A detached group of just this component; and which inputs it takes."""
    used = {v for op in component.ops for v in op.operands} | {group.yield_op.operands[i] for i in component.outputs}
    inputs = [i for i, arg in enumerate(group.body.args) if arg in used]
    sub = GroupOp.build([group.operands[i] for i in inputs], [group.results[i].type for i in component.outputs], kind, group.location, group.attr("id"))
    mapping: dict[Value, Value] = {group.body.args[i]: sub.body.args[n] for n, i in enumerate(inputs)}
    for op in component.ops:
        sub.body.append(op.clone(mapping))
    sub.body.append(YieldOp.create([mapping[group.yield_op.operands[i]] for i in component.outputs], location=group.location))
    return sub, inputs


class _Failed(Exception):
    def __init__(self, component: Component):
        self.component = component


def _guarded(part: Part, component: Component) -> Part:
    def emit(kb, unit):
        try:
            part.emit(kb, unit)
        except NotRowLocal:
            raise _Failed(component) from None

    return Part(part.units, emit)


@template("horizontal")
def lower_horizontal(group: GroupOp, hw: Hardware) -> LoweredGroup:
    config = tile_config(group, hw)
    parts_of = components(group)
    alone: list[Component] = [c for c in parts_of if c.kind() in FOREIGN.values()]
    while True:
        try:
            lowered = _one_kernel(group, hw, config, [c for c in parts_of if c not in alone], alone)
            break
        except _Failed as failed:
            alone.append(failed.component)
    for component in alone:
        _append_alone(lowered, group, hw, component)
    return lowered


def _one_kernel(group: GroupOp, hw: Hardware, config: TileConfig, together: list[Component], alone: list[Component]) -> LoweredGroup:
    kernel, refs = group_io_kernel(group)
    kb = KernelBuilder(kernel, hw)
    em = kb.emitter(input_buffers(group, kernel))
    buffers = output_buffers(group, kernel)
    threads = config.threads if hw.is_gpu else 1
    parts: list[Part] = []
    for component in together:
        outputs: list[Output] = [(group.yield_op.operands[i], buffers[i]) for i in component.outputs]
        analysis = analyse_ops(component.ops)
        if not analysis.nodes:
            shape = max((v.type.shape for v, _ in outputs), key=len)
            block = TileConfig(threads=threads, block=(threads,) if hw.is_gpu else elementwise_block(hw, shape)[1])
            parts += [_guarded(p, component) for p in elementwise_parts(kb, em, outputs, block)]
            continue
        plan = row_plan(analysis, outputs)
        geometry = analysis_geometry(analysis)
        rows = rows_config(hw, geometry, Overrides(threads=threads if hw.is_gpu else None, split=1)) if geometry else None
        if plan is None or rows is None:
            alone.append(component)
            continue
        parts.append(_guarded(row_part(kb, em, plan, rows), component))
    if not parts:
        return LoweredGroup()
    build_kernel(kb, parts, threads)
    return LoweredGroup([Launch(kernel, refs)])


def _append_alone(lowered: LoweredGroup, group: GroupOp, hw: Hardware, component: Component) -> None:
    kind = component.kind()
    sub, inputs = subgroup(group, component, kind)
    try:
        fn = TEMPLATES.get(kind)
        if fn is None:
            raise RuntimeError(f"no kernel template for kind '{kind}' (a part of horizontal group {group.attr('id')} at {group.location})")
        part = fn(sub, hw)
    finally:
        sub.erase()
    base = len(lowered.scratch)
    lowered.scratch += part.scratch
    remap = {
        "input": lambda n: ArgRef("input", inputs[n]),
        "output": lambda n: ArgRef("output", component.outputs[n]),
        "scratch": lambda n: ArgRef("scratch", base + n),
    }
    for launch in part.launches:
        lowered.launches.append(Launch(launch.kernel, [remap[ref.source](ref.index) for ref in launch.args]))


__all__ = ["Component", "components", "lower_horizontal", "subgroup"]
