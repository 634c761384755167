"""What the CPU backend learns about a loop-level module before emitting
it: per-argument aliasing and alignment from the schedules, work estimates,
and which values of a vector loop depend on the lane."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.types import MemRefType, ScalarType, i1, index
from fusecc.dialects import loop
from fusecc.passes.backends.llvm.text import low_bit



@dataclass(frozen=True)
class ArgFacts:
    noalias: bool
    align: int


def argument_facts(module: Operation) -> dict[str, list[ArgFacts]]:
    """Per kernel argument: may it be `noalias`, and its alignment, from
    every launch of the kernel in the module's schedules. Schedule outputs
    and the arena are 64-byte aligned by the runtime; inputs are the
    caller's arrays (element-aligned); constants of the schedule get their
    own aligned buffers. A kernel never launched here gets noalias and
    element alignment."""
    facts: dict[str, list[ArgFacts]] = {}
    kernels = {op.sym_name: op for op in module.body if isinstance(op, loop.KernelOp)}
    for schedule in module.body:
        if not isinstance(schedule, loop.ScheduleOp):
            continue
        where: dict[Value, tuple] = {}  # value -> (root, byte offset, byte end, alignment)
        n_inputs = len(schedule.inputs)
        # Sizes known per call: each arena slot (offset expression) is its own
        # root, which the symbolic plan keeps apart from every other buffer
        # live at the same launch; a view may overlap anything of its root.
        symbolic = schedule.is_dynamic or not isinstance(schedule.arena_size, int)
        for i, arg in enumerate(schedule.body.args):
            align = arg.type.element_type.byte_size if i < n_inputs else 64
            where[arg] = (("arg", i), 0, 1 if symbolic else arg.type.byte_size, align)
        for op in schedule.body:
            if isinstance(op, loop.ConstantOp):  # the runtime gives each its own 64-byte aligned buffer
                where[op.result] = (("const", id(op)), 0, op.result.type.byte_size, 64)
            elif symbolic and isinstance(op, (loop.ArenaViewOp, loop.ViewOp)):
                if isinstance(op, loop.ArenaViewOp):
                    where[op.result] = (("arena", str(op.offset)), 0, 1, 64 if not isinstance(op.offset, int) else min(64, low_bit(op.offset)))
                elif op.source in where:
                    root, _, _, align = where[op.source]
                    where[op.result] = (root, 0, 1, min(align, low_bit(op.offset)) if isinstance(op.offset, int) else 1)
            elif isinstance(op, loop.ArenaViewOp):
                where[op.result] = ("arena", op.offset, op.offset + op.result.type.byte_size, min(64, low_bit(op.offset)))
            elif isinstance(op, loop.ViewOp) and op.source in where:
                root, start, _, align = where[op.source]
                begin = start + op.offset
                where[op.result] = (root, begin, begin + op.result.type.byte_size, min(align, low_bit(op.offset)))
            elif isinstance(op, loop.LaunchOp) and op.kernel_name in kernels:
                kernel = kernels[op.kernel_name]
                written = written_arguments(kernel)
                places = [where.get(v) for v in op.operands]
                previous = facts.get(op.kernel_name)
                current = []
                for i, (arg, place) in enumerate(zip(kernel.body.args, places)):
                    noalias = isinstance(arg.type, MemRefType) and place is not None
                    for j, other in enumerate(places):
                        if j == i or place is None or other is None:
                            continue
                        overlap = place[0] == other[0] and place[1] < other[2] and other[1] < place[2]
                        if overlap and (i in written or j in written):
                            noalias = False
                    align = place[3] if place is not None else 1
                    if previous is not None:
                        noalias = noalias and previous[i].noalias
                        align = min(align, previous[i].align)
                    current.append(ArgFacts(noalias, align))
                facts[op.kernel_name] = current
    return facts


def written_arguments(kernel: loop.KernelOp) -> set[int]:
    """Indices of the kernel arguments some `loop.store` writes (through views)."""
    args = {arg: i for i, arg in enumerate(kernel.body.args)}
    written = set()
    for op in kernel.walk():
        if isinstance(op, loop.StoreOp):
            buffer = op.buffer
            while isinstance(buffer.defining_op, loop.ViewOp):
                buffer = buffer.defining_op.source
            if buffer in args:
                written.add(args[buffer])
    return written


# Operations that pick values without computing new ones.
_PICKS = ("arith.constant", "arith.select")


def moves_data_only(kernel: loop.KernelOp) -> bool:
    """Whether the kernel only moves values (a pack kernel's copy into
    panels): loads, stores, selects, and arithmetic on indices and masks
    alone. Such a kernel is bound by memory, so it is compiled for size
    (LLVM's `optsize`: no unrolling, which spent ~35 ms of LLVM on each
    pack kernel for no speed)."""
    for op in kernel.walk():
        if not op.name.startswith(("arith.", "math.")) or op.name in _PICKS:
            continue
        if op.name.startswith("math.") or any(v.type not in (index, i1) for v in (*op.operands, *op.results)):
            return False
    return True


def carries_float_extremum(op: loop.ForOp) -> bool:
    """Whether a loop may carry a float max or min (`maxnum`/`minnum`) from
    one iteration to the next, a reduction LLVM's loop vectoriser would
    take: it carries a float and its body, nested loops included, takes a
    float max or min. Conservative: the max need not feed the carried value
    (LLVM vectorises only innermost loops, so an outer loop loses nothing)."""
    if not any(isinstance(arg.type, ScalarType) and arg.type.is_float for arg in op.iter_args):
        return False
    return any(inner.name in ("arith.max", "arith.min") and inner.results[0].type.is_float for inner in op.walk(include_self=False))


def has_side_effects(op: Operation) -> bool:
    return any(isinstance(o, (loop.StoreOp, loop.BarrierOp)) for o in op.walk())


UNKNOWN_TRIPS = 16  # what the work estimate assumes of a loop whose extent is known only at run time


def estimate_work(block: Block) -> int:
    """Scalar operations executed by one run of `block`, loops multiplied out
    (loops with unknown trip counts count 16 iterations)."""
    total = 0
    for op in block:
        if isinstance(op, loop.ParallelOp):
            total += math.prod(u if isinstance(u, int) else UNKNOWN_TRIPS for u in op.extents) * estimate_work(op.body)
        elif isinstance(op, loop.ForOp):
            bounds = [constant_of(v) for v in op.operands[:3]]
            trips = UNKNOWN_TRIPS if None in bounds or bounds[2] <= 0 else max(0, -(-(bounds[1] - bounds[0]) // bounds[2]))
            total += trips * estimate_work(op.body)
        elif isinstance(op, loop.IfOp):
            total += max(estimate_work(op.then_block), estimate_work(op.else_block))
        else:
            total += 1
    return total


def constant_of(value: Value):
    op = value.defining_op
    if op is not None and op.name == "arith.constant":
        return op.attr("value").value
    return None


# --------------------------------------------------------------------------- vector-loop analysis


# A vector loop of 1, 2 or 4 registers' worth of lanes is done in one chunk
# (the loop IR asks for that unroll by writing a wider vector loop, e.g. a
# 32-column matmul tile); other extents go in chunks of one register.
WHOLE_LOOP_REGISTERS = (1, 2, 4)


class NotWidenable(Exception):
    pass


def varying_values(body: Block, lane_iv: Value) -> set[Value]:
    """Values of a vector loop body that depend on the lane (a fixpoint over
    loop-carried values). Raises NotWidenable for bodies this emitter does
    not widen."""
    varying = {lane_iv}

    def mark(values, flag):
        changed = False
        for v in values:
            if flag and v not in varying:
                varying.add(v)
                changed = True
        return changed

    def visit(block: Block) -> None:
        for op in block:
            if isinstance(op, (loop.YieldOp, loop.ReturnOp)):
                continue
            if isinstance(op, (loop.BarrierOp, loop.ShuffleXorOp)):
                raise NotWidenable("GPU operation")
            if isinstance(op, loop.AllocOp):
                raise NotWidenable("a buffer allocated per lane")
            if isinstance(op, loop.ForOp):
                if any(v in varying for v in op.operands[:3]):
                    raise NotWidenable("lane-dependent loop bounds")
                carried = [v in varying for v in op.inits]
                while True:
                    for arg, flag in zip(op.iter_args, carried):
                        mark([arg], flag)
                    visit(op.body)
                    yielded = [v in varying for v in op.body.last_op.operands]
                    new = [a or b for a, b in zip(carried, yielded)]
                    if new == carried:
                        break
                    carried = new
                for result, flag in zip(op.results, carried):
                    mark([result], flag)
            elif isinstance(op, loop.ParallelOp):
                visit(op.body)
            elif isinstance(op, loop.IfOp):
                visit(op.then_block)
                visit(op.else_block)
                lane_dependent = op.condition in varying
                for k, result in enumerate(op.results):
                    flag = lane_dependent or op.then_block.last_op.operands[k] in varying or op.else_block.last_op.operands[k] in varying
                    mark([result], flag)
            else:
                mark(op.results, any(v in varying for v in op.operands))

    visit(body)
    return varying


def body_element_bytes(block: Block) -> int:
    """The widest element the body computes on (f16/bf16 compute as f32)."""
    widest = 4
    for op in block.parent_op.walk(include_self=False) if block.parent_op else []:
        for v in list(op.results) + list(op.operands):
            t = v.type
            if isinstance(t, MemRefType):
                t = t.element_type
            if isinstance(t, ScalarType) and t not in (index, i1):
                widest = max(widest, t.byte_size)
    return widest


def choose_width(extent: int, lanes: int) -> int:
    """Lanes per chunk: the whole loop when it is a few registers wide,
    else one register with a scalar remainder."""
    if extent % lanes == 0 and extent // lanes in WHOLE_LOOP_REGISTERS:
        return extent
    if extent >= lanes:
        return lanes
    if extent >= 4 and extent & (extent - 1) == 0:
        return extent
    return 1
