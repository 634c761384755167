"""Facts about the buffers of loop IR that more than one later step needs:
where a schedule buffer lives (so two kernel arguments may overlap), which
kernel parameters no launch makes overlap a written one (`__restrict__`
on CUDA, and the barrier pass's aliasing), which arguments every launch
fills with a schedule constant (read only), and which of those a GPU
backend compiles into the kernel (small, and the same at every launch)."""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.shape_expr import total
from fusecc.compiler.types import MemRefType
from fusecc.dialects import loop


def base_buffer(value: Value) -> Value:
    """The buffer `value` is a (chain of) `loop.view` of."""
    while isinstance(value.defining_op, loop.ViewOp):
        value = value.defining_op.source
    return value


def written_buffers(kernel: loop.KernelOp) -> set[Value]:
    return {base_buffer(op.buffer) for op in kernel.walk() if isinstance(op, loop.StoreOp)}


@dataclass(frozen=True)
class Place:
    """Where a schedule buffer lives: `arena`, `input` i or `output` i, at a byte offset."""

    buffer: str
    index: int
    offset: int | str  # bytes; an expression of the dims with `?` sizes
    size: object  # bytes: an int, or a sympy count with `?` sizes

    def overlaps(self, other: "Place") -> bool:
        if (self.buffer, self.index) != (other.buffer, other.index):
            return False
        if not all(type(n) is int for n in (self.offset, self.size, other.offset, other.size)):
            return True  # `?` sizes or offsets (expressions): may overlap
        return self.offset < other.offset + other.size and other.offset < self.offset + self.size


def buffer_places(schedule: loop.ScheduleOp) -> dict[Value, Place]:
    places: dict[Value, Place] = {}
    n_inputs = len(schedule.inputs)
    for i, arg in enumerate(schedule.body.args):
        kind, k = ("input", i) if i < n_inputs else ("output", i - n_inputs)
        places[arg] = Place(kind, k, 0, arg.type.byte_size)
    for op in schedule.body:
        if isinstance(op, loop.ArenaViewOp):
            places[op.result] = Place("arena", 0, op.offset, op.result.type.byte_size)
        elif isinstance(op, loop.ViewOp) and op.source in places:
            src = places[op.source]
            offset = src.offset + op.offset if type(src.offset) is int and type(op.offset) is int else total([src.offset, op.offset])
            places[op.result] = Place(src.buffer, src.index, offset, op.result.type.byte_size)
    return places


def schedules(module: Operation) -> list[loop.ScheduleOp]:
    return [op for op in module.walk() if isinstance(op, loop.ScheduleOp)]


def restrict_safe_params(module: Operation) -> dict[loop.KernelOp, set[int]]:
    """Parameters that may be `__restrict__`: no launch passes a buffer the
    kernel writes overlapping another of its arguments."""
    kernels = [op for op in module.walk() if isinstance(op, loop.KernelOp)]
    safe = {k: {i for i, a in enumerate(k.body.args) if isinstance(a.type, MemRefType)} for k in kernels}
    for schedule in schedules(module):
        places = buffer_places(schedule)
        for launch in schedule.launches():
            kernel = launch.resolve()
            if kernel is None:
                continue
            written = written_buffers(kernel)
            ranges = [(i, places.get(v)) for i, v in enumerate(launch.operands) if isinstance(v.type, MemRefType)]
            for i, place in ranges:
                if kernel.body.args[i] not in written:
                    continue
                for j, other in ranges:
                    if j != i and place is not None and other is not None and place.overlaps(other):
                        safe[kernel].discard(i)
                        safe[kernel].discard(j)
    return safe


def schedule_constant(value: Value) -> loop.ConstantOp | None:
    """The schedule's `loop.constant` that `value` is (a view at offset 0 of)."""
    while isinstance(value.defining_op, loop.ViewOp) and value.defining_op.offset == 0:
        value = value.defining_op.source
    op = value.defining_op
    return op if isinstance(op, loop.ConstantOp) and isinstance(op.parent_op, loop.ScheduleOp) else None


# A schedule constant of at most this many bytes (a scalar, a small table) may
# be compiled into a GPU kernel's source; larger ones (weights) are buffers
# the runtime uploads once and launches pass like any other argument (the
# manifest's `constants`), so the source stays small whatever the model.
BAKE_LIMIT_BYTES = 1024


def constant_params(module: Operation) -> dict[loop.KernelOp, dict[int, list[loop.ConstantOp]]]:
    """Kernel arguments that every launch fills with a schedule constant (read
    only, never overlapping a written buffer), with the distinct constants
    the launches pass there. Launches of a kernel shared by identical layers
    pass each layer's own weights."""
    found: dict[loop.KernelOp, dict[int, list[loop.ConstantOp]]] = {}
    for schedule in schedules(module):
        for launch in schedule.launches():
            kernel = launch.resolve()
            constants = {i: schedule_constant(v) for i, v in enumerate(launch.operands) if isinstance(v.type, MemRefType)}
            if kernel not in found:
                found[kernel] = {i: [c] for i, c in constants.items() if c is not None}
                continue
            for i, passed in list(found[kernel].items()):
                c = constants.get(i)
                if c is None:
                    del found[kernel][i]
                elif all(c is not other for other in passed):
                    passed.append(c)
    return found


def is_bakeable(constant: loop.ConstantOp) -> bool:
    return constant.result.type.byte_size <= BAKE_LIMIT_BYTES


def baked_constants(module: Operation) -> dict[loop.KernelOp, dict[int, loop.ConstantOp]]:
    """Kernel arguments a GPU backend compiles into the kernel as constant
    data (the launch leaves them out): every launch passes the same small
    schedule constant there. Sharing a kernel between layers never changes
    what it computes: where the launches pass different constants, or a large
    one, the argument stays an argument."""
    return {
        kernel: {i: passed[0] for i, passed in params.items() if len(passed) == 1 and is_bakeable(passed[0])}
        for kernel, params in constant_params(module).items()
    }
