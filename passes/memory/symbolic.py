"""`plan-memory` for schedules whose buffers have `?` sizes.

A buffer's byte size is then an expression of the schedule's named dims
(its element size times its static dims times its `sizes` expressions), so
no gap can be chosen by size. The plan works with slots instead: a slot is
a band of the arena that holds buffers whose lifetimes do not meet, one
after another. Walking the timeline as the static planner does:

  * in place: an output takes its input's slot under the static planner's
    rule (`in_place_pairs`, the input dies and the output is born at this
    launch), when both are passed whole and have the same size expression;
  * otherwise a free slot whose size expression is the buffer's, else
    (static sizes only) the free static slot that wastes least, grown to fit;
    else a new slot.

Slots with a static size come first, so their buffers keep integer offsets;
each dynamic slot starts at the sum of the (aligned) slots below it. Every
offset and the arena's size are thus expressions evaluated once per call
(`compiler/shape_expr.py`); `memory/check.py` proves a plan at given dims.
Static schedules never come here: their plan is plan.py's, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusecc.compiler import attributes as A
from fusecc.compiler.shape_expr import align_up, parse_shape_expr, product, total
from fusecc.dialects import loop
from fusecc.passes.memory.liveness import arena_roots, in_place_pairs, kernels_by_name, live_intervals, timeline


def byte_size_expr(view: loop.ArenaViewOp) -> str:
    """The bytes of an arena view: an int's text, or an expression of the dims."""
    t = view.result.type
    sizes = iter(view.sizes)
    return product([t.element_type.byte_size] + [d if type(d) is int else next(sizes) for d in t.shape])


def is_symbolic(schedule: loop.ScheduleOp) -> bool:
    return schedule.is_dynamic or any(isinstance(op, loop.ArenaViewOp) and op.result.type.has_dynamic_shape for op in schedule.body)


@dataclass
class Slot:
    size: str  # aligned byte size: an int's text or an expression
    free_from: int = -1  # the timeline step after which the slot is free (-1: free)
    buffers: list = field(default_factory=list)

    @property
    def static(self) -> int | None:
        return parse_shape_expr(self.size).constant


@dataclass
class SymbolicPlan:
    offsets: dict  # arena view -> offset (int or expression text)
    arena_size: object  # int or expression text
    slots: list
    in_place: list


def plan_symbolic(schedule: loop.ScheduleOp, alignment: int) -> SymbolicPlan:
    intervals = live_intervals(schedule)
    kernels = kernels_by_name(schedule)
    events = timeline(schedule)
    roots = arena_roots(schedule)
    by_view = {iv.buffer: iv for iv in intervals}
    size = {iv.buffer: align_up(byte_size_expr(iv.buffer), alignment) for iv in intervals}
    starts: dict[int, list] = {}
    for iv in intervals:
        starts.setdefault(iv.first, []).append(iv)
    slots: list[Slot] = []
    slot_of: dict[loop.ArenaViewOp, Slot] = {}
    in_place = []
    for t in range(max(len(events), 1)):
        if t < len(events) and isinstance(events[t], loop.LaunchOp):
            for out_view, in_view in _handovers(events[t], kernels.get(events[t].kernel_name), roots, by_view, t):
                if out_view in slot_of or in_view not in slot_of or size[out_view] != size[in_view]:
                    continue
                slot = slot_of[in_view]
                if slot.buffers[-1] is not in_view:
                    continue
                slot_of[out_view] = slot
                slot.buffers.append(out_view)
                slot.free_from = by_view[out_view].last
                in_place.append(out_view)
        for iv in starts.get(t, []):
            if iv.buffer in slot_of:
                continue
            slot = _free_slot(slots, size[iv.buffer], t)
            if slot is None:
                slot = Slot(size[iv.buffer])
                slots.append(slot)
            elif slot.size != size[iv.buffer]:
                slot.size = str(max(slot.static, int(size[iv.buffer])))
            slot_of[iv.buffer] = slot
            slot.buffers.append(iv.buffer)
            slot.free_from = iv.last
    slots.sort(key=lambda s: s.static is None)  # static slots first: their offsets stay ints
    offsets, below = {}, []
    for slot in slots:
        offset = total(below)
        value = parse_shape_expr(offset).constant
        for view in slot.buffers:
            offsets[view] = value if value is not None else offset
        below.append(slot.size)
    arena = total(below)
    constant = parse_shape_expr(arena).constant
    return SymbolicPlan(offsets, constant if constant is not None else arena, slots, in_place)


def _free_slot(slots: list[Slot], size: str, t: int) -> Slot | None:
    free = [s for s in slots if s.free_from < t]
    same = [s for s in free if s.size == size]
    if same:
        return same[0]
    needed = parse_shape_expr(size).constant
    if needed is None:
        return None
    static = [s for s in free if s.static is not None]
    fitting = [s for s in static if s.static >= needed]
    if fitting:
        return min(fitting, key=lambda s: s.static)
    return max(static, key=lambda s: s.static, default=None)


def _handovers(launch: loop.LaunchOp, kernel, roots, by_view, t: int):
    """(output view, input view) pairs that may share a slot at this launch:
    a legal in-place pair of the kernel, each an arena view passed whole
    (the view itself) and once, the input dying and the output born here."""
    if kernel is None:
        return []
    operands = list(launch.operands)
    out = []
    for out_arg, in_arg in sorted(in_place_pairs(kernel)):
        o, i = operands[out_arg], operands[in_arg]
        ov, iv = roots.get(o), roots.get(i)
        if ov is None or iv is None or ov is iv or o is not ov.result or i is not iv.result:
            continue
        if operands.count(o) != 1 or operands.count(i) != 1:
            continue
        if by_view[iv].last == t and by_view[ov].first == t:
            out.append((ov, iv))
    return out


def apply_symbolic_plan(schedule: loop.ScheduleOp, plan: SymbolicPlan) -> None:
    for view, offset in plan.offsets.items():
        view.attributes["offset"] = A.from_python(offset)
    schedule.attributes["arena_size"] = A.from_python(plan.arena_size)
    schedule.attributes["plan.slots"] = A.IntegerAttr(len(plan.slots))
    schedule.attributes["plan.in_place"] = A.IntegerAttr(len(plan.in_place))


__all__ = ["SymbolicPlan", "apply_symbolic_plan", "byte_size_expr", "is_symbolic", "plan_symbolic"]
