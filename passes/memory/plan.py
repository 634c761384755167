"""`plan-memory`: share one arena among a schedule's intermediates.

The buffers are the schedule's `loop.arena_view`s (every intermediate and
scratch buffer; inputs, outputs and constants live elsewhere). A buffer is
live from the first to the last launch or copy that touches it or any
`loop.view` of it (the timeline is the schedule's launches and copies in
order). Walking the timeline, each launch first places the buffers it
starts, then frees those it ends:

  * in place: an output whose kernel reads an input at exactly the index
    it writes, before writing it (`in_place_pairs`), takes that input's
    bytes when the input dies at this launch and has the same size;
  * otherwise best fit: the smallest free gap that holds the buffer, or
    the top of the arena.

Offsets and sizes are multiples of the alignment (`alignment=0` means the
target's: 256 bytes when the schedule launches GPU kernels, else 64).
Freeing after placing means an output never shares bytes with an input
of its own launch other than through a legal in-place pair. The plan sets
each view's `offset` and the schedule's `arena_size`, and records
`plan.naive_bytes` (every intermediate its own bytes) and
`plan.in_place` (buffers that took an input's bytes) on the schedule.
`memory_check.check_plan` proves a plan sound independently.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from fusecc.compiler import attributes as A
from fusecc.passes.backends.hardware import CPU, H200
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.dialects import loop
from fusecc.passes.memory.liveness import Interval, arena_roots, in_place_pairs, kernels_by_name, live_intervals, timeline


def align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


ALIGNMENT_ATTR = "plan.alignment"  # set by lower-to-loops from the target


def default_alignment(schedule: loop.ScheduleOp) -> int:
    """The alignment lower-to-loops recorded, else that of any GPU (when the
    schedule launches GPU kernels) or of the CPU."""
    recorded = schedule.attributes.get(ALIGNMENT_ATTR)
    if isinstance(recorded, A.IntegerAttr):
        return recorded.value
    gpu = any(k.is_gpu for k in kernels_by_name(schedule).values())
    return (H200 if gpu else CPU).buffer_alignment


# --------------------------------------------------------------------------- placing


class FreeList:
    """Free gaps of the arena below its high-water mark, best fit."""

    def __init__(self):
        self.gaps: list[tuple[int, int]] = []  # (offset, size), sorted by offset
        self.top = 0

    def allocate(self, size: int) -> int:
        best = None
        for n, (offset, gap) in enumerate(self.gaps):
            if gap >= size and (best is None or gap < self.gaps[best][1]):
                best = n
        if best is not None:
            offset, gap = self.gaps[best]
            if gap == size:
                del self.gaps[best]
            else:
                self.gaps[best] = (offset + size, gap - size)
            return offset
        if self.gaps and sum(self.gaps[-1]) == self.top:
            offset, _ = self.gaps.pop()  # extend the gap at the top
        else:
            offset = self.top
        self.top = offset + size
        return offset

    def free(self, offset: int, size: int) -> None:
        n = bisect.bisect_left(self.gaps, (offset, 0))
        self.gaps.insert(n, (offset, size))
        if n + 1 < len(self.gaps) and sum(self.gaps[n]) == self.gaps[n + 1][0]:
            self.gaps[n] = (offset, size + self.gaps[n + 1][1])
            del self.gaps[n + 1]
        if n > 0 and sum(self.gaps[n - 1]) == self.gaps[n][0]:
            self.gaps[n - 1] = (self.gaps[n - 1][0], self.gaps[n - 1][1] + self.gaps[n][1])
            del self.gaps[n]


@dataclass
class Plan:
    offsets: dict[loop.ArenaViewOp, int]
    arena_size: int
    naive_size: int
    in_place: list[loop.ArenaViewOp] = field(default_factory=list)


def plan_schedule(schedule: loop.ScheduleOp, alignment: int) -> Plan:
    intervals = live_intervals(schedule)
    kernels = kernels_by_name(schedule)
    events = timeline(schedule)
    starts: dict[int, list[Interval]] = {}
    ends: dict[int, list[Interval]] = {}
    for iv in intervals:
        starts.setdefault(iv.first, []).append(iv)
        ends.setdefault(iv.last, []).append(iv)
    by_view = {iv.buffer: iv for iv in intervals}
    roots = arena_roots(schedule)
    size = {iv.buffer: align(iv.buffer.result.type.byte_size, alignment) for iv in intervals}
    offsets: dict[loop.ArenaViewOp, int] = {}
    handed_over: set[loop.ArenaViewOp] = set()
    in_place: list[loop.ArenaViewOp] = []
    free = FreeList()
    for t in range(max(len(events), 1)):
        starting = starts.get(t, [])
        if t < len(events) and isinstance(events[t], loop.LaunchOp):
            for out_view, in_view in _in_place_candidates(events[t], kernels.get(events[t].kernel_name), roots, by_view, t):
                if out_view in offsets or in_view in handed_over or in_view not in offsets:
                    continue
                if size[out_view] != size[in_view]:
                    continue
                offsets[out_view] = offsets[in_view]
                handed_over.add(in_view)
                in_place.append(out_view)
        for iv in starting:
            if iv.buffer not in offsets:
                offsets[iv.buffer] = free.allocate(size[iv.buffer])
        for iv in ends.get(t, []):
            if iv.buffer not in handed_over:
                free.free(offsets[iv.buffer], size[iv.buffer])
    naive = sum(size.values())
    return Plan(offsets, free.top, naive, in_place)


def _in_place_candidates(launch: loop.LaunchOp, kernel: loop.KernelOp | None, roots, by_view, t: int):
    """(output buffer, input buffer) pairs of arena buffers that may share
    bytes at this launch: a legal pair whose input dies here and whose output
    starts here, each passed whole and only once."""
    if kernel is None:
        return []
    operands = list(launch.operands)
    counts: dict[loop.ArenaViewOp, int] = {}
    for v in operands:
        if v in roots:
            counts[roots[v]] = counts.get(roots[v], 0) + 1
    out = []
    for out_arg, in_arg in sorted(in_place_pairs(kernel)):
        o, i = operands[out_arg], operands[in_arg]
        ov, iv = roots.get(o), roots.get(i)
        if ov is None or iv is None or ov is iv or counts[ov] != 1 or counts[iv] != 1:
            continue
        if not _whole(o, ov) or not _whole(i, iv):
            continue
        if by_view[iv].last == t and by_view[ov].first == t:
            out.append((ov, iv))
    return out


def _whole(value: Value, view: loop.ArenaViewOp) -> bool:
    """`value` covers all of `view`'s bytes from its start (itself, or views at offset 0)."""
    size = value.type.byte_size
    while value is not view.result:
        op = value.defining_op
        if not isinstance(op, loop.ViewOp) or op.offset != 0:
            return False
        value = op.source
    return size == view.result.type.byte_size


def apply_plan(schedule: loop.ScheduleOp, plan: Plan) -> None:
    for view, offset in plan.offsets.items():
        view.attributes["offset"] = A.IntegerAttr(offset)
    schedule.attributes["arena_size"] = A.IntegerAttr(plan.arena_size)
    schedule.attributes["plan.naive_bytes"] = A.IntegerAttr(plan.naive_size)
    schedule.attributes["plan.in_place"] = A.IntegerAttr(len(plan.in_place))


@dataclass(frozen=True)
class PlanMemory(Pass):
    """Arena offsets for every intermediate of every schedule."""

    name = "plan-memory"
    summary = "Place schedule intermediates in one arena, reusing bytes by liveness (best fit, in place)"
    anchor = "builtin.module"

    alignment: int = 0
    remarks: bool = False

    def run(self, module: Operation, context: PassContext) -> None:
        from fusecc.passes.memory.symbolic import apply_symbolic_plan, is_symbolic, plan_symbolic

        for schedule in [op for op in module.body if isinstance(op, loop.ScheduleOp)]:
            if is_symbolic(schedule):  # `?` sizes: offsets as expressions of the dims (symbolic.py)
                symbolic = plan_symbolic(schedule, self.alignment or default_alignment(schedule))
                apply_symbolic_plan(schedule, symbolic)
                context.statistics.setdefault("memory", {})[schedule.sym_name] = {
                    "arena_bytes": symbolic.arena_size,
                    "slots": len(symbolic.slots),
                    "in_place": len(symbolic.in_place),
                }
                continue
            plan = plan_schedule(schedule, self.alignment or default_alignment(schedule))
            apply_plan(schedule, plan)
            context.statistics.setdefault("memory", {})[schedule.sym_name] = {
                "arena_bytes": plan.arena_size,
                "naive_bytes": plan.naive_size,
                "in_place": len(plan.in_place),
            }
            if self.remarks or context.explain:
                context.diagnostics.remark(
                    schedule.location,
                    f"memory plan for @{schedule.sym_name}: arena of {plan.arena_size} bytes for {len(plan.offsets)} buffers "
                    f"(naive plan {plan.naive_size} bytes), {len(plan.in_place)} in place",
                )


__all__ = ["FreeList", "Plan", "PlanMemory", "apply_plan", "arena_roots", "in_place_pairs", "live_intervals", "plan_schedule", "timeline"]
