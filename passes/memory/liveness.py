"""Liveness of a schedule's arena buffers, shared by the static planner
(plan.py), the symbolic one (symbolic.py) and the checker (check.py): the
timeline of launches and copies, which values alias which arena buffer, each
buffer's live interval, and the in-place pairs a kernel allows."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from fusecc.compiler.ir import Operation, Value
from fusecc.dialects import loop


# --------------------------------------------------------------------------- in place


def in_place_pairs(kernel: loop.KernelOp) -> set[tuple[int, int]]:
    """(output argument, input argument) pairs of a kernel where the output
    may live in the input's bytes.

    True when every load of the input and every store of the output use the
    very same index values, all inside one loop whose induction variables
    those indices depend on, and every such load comes before every such
    store in that loop's body. Then each iteration reads its elements of
    the input before it overwrites them, and no iteration reads an element
    another one wrote (templates write each output element once).
    """
    args = list(kernel.body.args)
    loads: dict[int, list[Operation]] = {}
    stores: dict[int, list[Operation]] = {}
    other: set[int] = set()
    position = {arg: i for i, arg in enumerate(args)}
    order: dict[Operation, int] = {}
    for n, op in enumerate(kernel.walk(include_self=False)):
        order[op] = n
        for operand_index, value in enumerate(op.operands):
            i = position.get(value)
            if i is None:
                continue
            if isinstance(op, loop.DimOp):
                continue  # reads a size, not the data
            if isinstance(op, loop.LoadOp) and operand_index == 0:
                loads.setdefault(i, []).append(op)
            elif isinstance(op, loop.StoreOp) and operand_index == 1:
                stores.setdefault(i, []).append(op)
            else:
                other.add(i)
    pairs = set()
    for out, out_stores in stores.items():
        if out in loads or out in other:
            continue
        for inp, inp_loads in loads.items():
            if inp in stores or inp in other or args[inp].type.byte_size != args[out].type.byte_size:
                continue
            if args[inp].type.shape != args[out].type.shape:
                continue
            if _reads_before_writes(inp_loads, out_stores, order):
                pairs.add((out, inp))
    return pairs


def _reads_before_writes(reads, writes, order) -> bool:
    index = tuple(writes[0].indices)
    if any(tuple(op.indices) != index for op in reads + writes):
        return False
    loops = {_enclosing_loop(op) for op in reads + writes}
    if len(loops) != 1:
        return False
    (body_loop,) = loops
    if body_loop is None or not _depends_on(index, set(_induction_vars(body_loop))):
        return False
    return max(order[op] for op in reads) < min(order[op] for op in writes)


def _enclosing_loop(op: Operation) -> Operation | None:
    parent = op.parent_op
    while parent is not None and not isinstance(parent, (loop.ForOp, loop.ParallelOp, loop.KernelOp)):
        parent = parent.parent_op
    return parent if isinstance(parent, (loop.ForOp, loop.ParallelOp)) else None


def _induction_vars(op: Operation) -> list[Value]:
    return [op.induction_var] if isinstance(op, loop.ForOp) else list(op.induction_vars)


def _depends_on(values, roots: set[Value]) -> bool:
    """Does every value of `values` derive from one of `roots`? (The index
    of an element written once per iteration must.)"""
    seen: dict[Value, bool] = {}

    def visit(v: Value) -> bool:
        if v in roots:
            return True
        if v in seen:
            return seen[v]
        seen[v] = False
        op = v.defining_op
        result = op is not None and any(visit(o) for o in op.operands)
        seen[v] = result
        return result

    return any(visit(v) for v in values)


# --------------------------------------------------------------------------- liveness


def timeline(schedule: loop.ScheduleOp) -> list[Operation]:
    return [op for op in schedule.body if isinstance(op, (loop.LaunchOp, loop.CopyOp))]


def arena_roots(schedule: loop.ScheduleOp) -> dict[Value, loop.ArenaViewOp]:
    """Every value that aliases an arena buffer -> that buffer's view op."""
    roots: dict[Value, loop.ArenaViewOp] = {}
    for op in schedule.body:
        if isinstance(op, loop.ArenaViewOp):
            roots[op.result] = op
        elif isinstance(op, loop.ViewOp) and op.source in roots:
            roots[op.result] = roots[op.source]
    return roots


@dataclass
class Interval:
    buffer: loop.ArenaViewOp
    first: int
    last: int


def live_intervals(schedule: loop.ScheduleOp) -> list[Interval]:
    roots = arena_roots(schedule)
    events = timeline(schedule)
    spans: dict[loop.ArenaViewOp, list[int]] = {}
    for t, op in enumerate(events):
        for value in op.operands:
            root = roots.get(value)
            if root is not None:
                span = spans.setdefault(root, [t, t])
                span[1] = t
    out = []
    position = {op: n for n, op in enumerate(schedule.body)}
    event_positions = [position[op] for op in events]
    for view in dict.fromkeys(roots.values()):
        span = spans.get(view)
        if span is None:
            # Never used: live at the next event, so it still gets bytes.
            t = min(bisect.bisect_left(event_positions, position[view]), max(0, len(events) - 1))
            span = [t, t]
        out.append(Interval(view, span[0], span[1]))
    return out


def kernels_by_name(schedule: loop.ScheduleOp) -> dict[str, loop.KernelOp]:
    """The module's kernels by name, looked up once (not per launch)."""
    module = schedule.parent_op
    ops = module.body if module is not None else []
    return {op.sym_name: op for op in ops if isinstance(op, loop.KernelOp)}


__all__ = ["Interval", "arena_roots", "in_place_pairs", "kernels_by_name", "live_intervals", "timeline"]
