"""A tensor program compiled for measuring, fused or one kernel per op (a
`Variant`), and the steps of its schedule (`Step`: each launch or copy with
the bytes it loads and stores, from the loop IR, the FLOPs it executes and
the useful FLOPs credited to it).

What one launch computes is said here, once, for `report --measure` and
`fusecc profile`: the fusion group it computes (`launch_group`: identical
groups, an encoder's layers, launch one kernel) and its share of that
group's FLOPs (`credit_flops`, by `kernel_work.credited_flops`): a kernel
launched once per piece of a horizontal group (merged Q/K/V) is credited
one piece per launch. Its bytes are those of the buffers it is passed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.dims import active_hints, shape_hints
from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import PassContext, run_pipeline
from fusecc.compiler.types import MemRefType
from fusecc.dialects import loop
from fusecc.driver import reporting
from fusecc.driver.kernel_work import credited_flops, kernel_work
from fusecc.driver.measured_call import hinted_types, input_dims
from fusecc.driver.measurers import MeasurementUnavailable, Measurer, Runnable
from fusecc.passes.fusion.fuse import PHASES
from fusecc.passes.memory.plan import kernels_by_name


@dataclass
class Step:
    """One launch or copy of the compiled schedule."""

    name: str  # the loop.kernel's symbol, or "copy"
    kind: str  # the group's kind, or "copy"
    group: int | None
    bytes_read: int
    bytes_written: int
    executed_flops: float = 0.0  # what one launch executes (kernel_work, from its loop IR; 0 for packs and copies)
    flops: float = 0.0  # its group's useful FLOPs credited to this launch (`credit_flops`; 0 for packs and copies)
    seconds: list[float] = field(default_factory=list)  # one per timed run

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclass
class Variant:
    label: str  # "unfused" or "fused"
    model: dict  # reporting.report_data of the groups that were compiled
    module: Operation  # at the loop level
    program: Runnable
    steps: list[Step]
    arena_bytes: int
    naive_bytes: int
    in_place: int
    compile_seconds: float
    run_seconds: list[float] = field(default_factory=list)
    results: list[np.ndarray] = field(default_factory=list)
    dims: dict[str, int] = field(default_factory=dict)  # the schedule's `?` dims at the measured call


def _root_argument(buffer, args: dict) -> int | None:
    while isinstance(buffer.defining_op, loop.ViewOp):
        buffer = buffer.defining_op.source
    return args.get(buffer)


def accessed_arguments(kernel: loop.KernelOp) -> tuple[set[int], set[int]]:
    """Indices of the kernel arguments that some `loop.load` reads and some
    `loop.store` writes (through views)."""
    args = {arg: i for i, arg in enumerate(kernel.body.args)}
    read: set[int] = set()
    written: set[int] = set()
    for op in kernel.walk():
        if isinstance(op, (loop.LoadOp, loop.StoreOp)):
            i = _root_argument(op.buffer, args)
            if i is not None:
                (written if isinstance(op, loop.StoreOp) else read).add(i)
    return read, written


def is_dynamic_schedule(schedule: loop.ScheduleOp) -> bool:
    """Sizes of this schedule are expressions of `?` dims (as the CPU runtime decides)."""
    return schedule.is_dynamic or not isinstance(schedule.arena_size, int)


def buffer_types(schedule: loop.ScheduleOp, dims: dict[str, int] | None = None) -> dict:
    """Every memref value of the schedule -> its type at one call's `dims`
    (named dim -> size): every size known, as runtime/cpu/dynamic.py places
    the buffers. Without `dims`, the types as they are (`?` sizes stay
    expressions: a static schedule's, or a caller that wants only names)."""
    found: dict = {}
    sizes = schedule.argument_sizes()
    for i, arg in enumerate(schedule.body.args):
        if isinstance(arg.type, MemRefType):
            found[arg] = arg.type.with_sizes(loop.evaluate_size(e, dims) for e in sizes[i]) if arg.type.has_dynamic_shape and dims is not None else arg.type
    for op in schedule.body:
        for result in op.results:
            if isinstance(result.type, MemRefType):
                dynamic = dims is not None and result.type.has_dynamic_shape and isinstance(op, (loop.ViewOp, loop.ArenaViewOp))
                found[result] = loop.concrete_type(op, dims) if dynamic else result.type
    return found


def buffer_bytes(schedule: loop.ScheduleOp, dims: dict[str, int] | None = None) -> dict:
    """Every memref value of the schedule -> its bytes at one call's `dims` (`buffer_types`)."""
    return {v: t.byte_size for v, t in buffer_types(schedule, dims).items()}


def schedule_steps(schedule: loop.ScheduleOp, skip=(), dims: dict[str, int] | None = None) -> list[Step]:
    """The launches and copies of a schedule, in order, with their bytes at
    one call's `dims` (needed when the schedule has `?` dims); launches in
    `skip` (those the CPU runtime runs once at load) left out."""
    types = buffer_types(schedule, dims)
    byte_size = {v: t.byte_size for v, t in types.items()}
    kernels = kernels_by_name(schedule)
    accesses: dict[str, tuple[set[int], set[int]]] = {}
    work: dict[tuple, float] = {}
    steps = []
    for op in schedule.body:
        if isinstance(op, loop.LaunchOp) and op in skip:
            continue
        if isinstance(op, loop.LaunchOp):
            kernel = kernels[op.kernel_name]
            if op.kernel_name not in accesses:
                accesses[op.kernel_name] = accessed_arguments(kernel)
            arg_types = tuple(types.get(v, v.type) for v in op.operands)
            key = (op.kernel_name, arg_types if dims else ())
            if key not in work:
                work[key] = kernel_work(kernel, arg_types if dims else None).flops
            read, written = accesses[op.kernel_name]
            size = [byte_size.get(v, 0) for v in op.operands]
            group = launch_group(op, kernel)
            steps.append(Step(op.kernel_name, kernel.attr("kind") or "?", group, sum(size[i] for i in read), sum(size[i] for i in written), work[key]))
        elif isinstance(op, loop.CopyOp):
            size = byte_size[op.source]
            steps.append(Step("copy", "copy", None, size, size))
    return steps


def launch_group(launch: loop.LaunchOp, kernel: loop.KernelOp) -> int | None:
    """The fusion group a launch computes: its own `group` where its kernel
    was lowered for another, identical group (layer 2 runs layer 1's
    kernels), else its kernel's."""
    own = launch.attr("group")
    return own if own is not None else kernel.attr("group")


def credit_flops(steps: list[Step], model: dict) -> list[Step]:
    """Each step's `flops`: its share of its group's useful FLOPs (the cost
    model's, in `model`, `reporting.report_data`'s) by what it executes."""
    group_flops = {g["id"]: g["flops"] for g in model["groups"]}
    for step, flops in zip(steps, credited_flops(steps, group_flops), strict=True):
        step.flops = flops
    return steps


def compile_variant(program: Operation, entry: str, measurer: Measurer, fused: bool, engine: DiagnosticEngine, shapes: Sequence[tuple] | None = None) -> Variant:
    """A copy of the tensor program through the target's loop pipeline, fused
    or with one kernel per op, with the fusion report of the groups it compiled.
    `shapes`: the input shapes of the call to be measured. Its `?` dims are
    the sizes the cost model assumes (so the modelled figures describe that
    call) and the sizes the steps' bytes are counted at; without them, the
    active --shape-hint sizes (`hinted_inputs`)."""
    start = time.perf_counter()
    module = program.clone()
    target = measurer.target
    shapes = [tuple(s) for s in shapes] if shapes is not None else [tuple(getattr(t, "shape", ())) for t in hinted_types(program.lookup(entry))]
    with shape_hints({**active_hints(), **input_dims(program.lookup(entry), shapes)}):
        model = reporting.report_data(module, target, engine, enabled=PHASES if fused else ())
        _, after_fuse = reporting.split_at_fuse("loop", target)
        run_pipeline(after_fuse, module, PassContext(diagnostics=engine, target=target))
    schedule = module.lookup(entry)
    program = measurer.compile(module)
    dims = None
    if is_dynamic_schedule(schedule):
        try:
            dims = schedule.bind_dims(shapes)
        except loop.ShapeMismatch as exc:
            raise MeasurementUnavailable(f"@{entry}: {exc}") from None
    at_load = ()
    if target == "cpu":  # packing constant weights runs once at load, not per call (runtime/cpu/load_time.py)
        from fusecc.runtime.cpu.load_time import load_time_launches

        # a `?`-shaped schedule packs at load only what does not depend on the dims (runtime/cpu/dynamic.py)
        at_load = program.prepare(entry).launches_at_load if dims is not None else load_time_launches(schedule)
    byte_size = buffer_bytes(schedule, dims)
    arena = loop.evaluate_size(schedule.arena_size, dims)
    naive = schedule.attr("plan.naive_bytes")
    if dims is not None:  # the symbolic plan records no naive size: every arena view its own bytes
        naive = sum(byte_size[op.result] for op in schedule.body if isinstance(op, loop.ArenaViewOp))
    return Variant(
        "fused" if fused else "unfused",
        model,
        module,
        program,
        credit_flops(schedule_steps(schedule, at_load, dims), model),
        arena,
        naive or arena,
        schedule.attr("plan.in_place") or 0,
        time.perf_counter() - start,
        dims=dims or {},
    )


__all__ = ["Step", "Variant", "accessed_arguments", "buffer_bytes", "buffer_types", "compile_variant", "credit_flops", "is_dynamic_schedule", "launch_group", "schedule_steps"]
