"""How a fusion group becomes kernels: the contract between the lowering
driver and the per-kind kernel templates.

A template receives a `fusion.group` and the hardware it targets and
returns a `LoweredGroup`: the kernels to launch, in order, and for each
launch where its arguments come from — one of the group's inputs, one of
its outputs, or a scratch buffer the template asked for (say, partial
results of a row reduction split over several blocks). The driver places
group inputs/outputs and scratch buffers in the arena and writes the
launches into the schedule.

Templates register themselves by group kind in `TEMPLATES`; the same
template serves every target and chooses GPU (`block.*`/`thread.*`) or CPU
(`worker`/`vector`) mappings from `hardware.is_gpu`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import MemRefType, TensorType
from fusecc.dialects.fusion import GroupOp
from fusecc.dialects.loop import KernelOp


@dataclass(frozen=True)
class ArgRef:
    """Where a kernel argument comes from."""

    source: Literal["input", "output", "scratch"]
    index: int


@dataclass
class Launch:
    kernel: KernelOp
    args: list[ArgRef]


@dataclass
class LoweredGroup:
    launches: list[Launch] = field(default_factory=list)
    scratch: list[MemRefType] = field(default_factory=list)

    def add_scratch(self, t: MemRefType) -> ArgRef:
        self.scratch.append(t)
        return ArgRef("scratch", len(self.scratch) - 1)


def memref_for(t: TensorType, space: str = "global") -> MemRefType:
    return MemRefType(t.shape, t.element_type, space)


def kernel_name(group: GroupOp) -> str:
    """`fused_<id>_<kind>`, as the generated sources name them."""
    gid = group.attr("id")
    return f"fused_{gid if gid is not None else 0}_{group.attr('kind')}"


def group_io_kernel(group: GroupOp, name: str | None = None, extra_args: list[MemRefType] = (), with_outputs: bool = True) -> tuple[KernelOp, list[ArgRef]]:
    """A kernel whose arguments are the group's inputs then outputs (unless
    `with_outputs` is false; then any extra scratch buffers), with the
    group's id, kind and location. The refs cover inputs and outputs."""
    inputs = [memref_for(v.type) for v in group.operands]
    outputs = [memref_for(r.type) for r in group.results] if with_outputs else []
    attrs = {"kind": group.attr("kind")}
    if group.attr("id") is not None:
        attrs["group"] = group.attr("id")
    kernel = KernelOp.build(name or kernel_name(group), inputs + outputs + list(extra_args), attrs, group.location)
    refs = [ArgRef("input", i) for i in range(len(inputs))] + [ArgRef("output", i) for i in range(len(outputs))]
    return kernel, refs


Template = Callable[[GroupOp, Hardware], LoweredGroup]
TEMPLATES: dict[str, Template] = {}


def template(*kinds: str):
    """Register a kernel template for group kinds."""

    def register(fn: Template) -> Template:
        for kind in kinds:
            TEMPLATES[kind] = fn
        return fn

    return register


def input_buffers(group: GroupOp, kernel: KernelOp) -> dict[Value, Value]:
    """Block argument of the group -> the kernel argument holding that input."""
    return dict(zip(group.body.args, kernel.body.args))


def output_buffers(group: GroupOp, kernel: KernelOp) -> list[Value]:
    n = len(group.operands)
    return list(kernel.body.args[n : n + len(group.results)])


def yielded_values(group: GroupOp) -> list[Value]:
    return list(group.yield_op.operands)


def body_ops(group: GroupOp) -> list[Operation]:
    return group.body_ops()
