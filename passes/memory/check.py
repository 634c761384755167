"""An independent check of a schedule's memory plan.

Written apart from the planner (its own liveness, no shared placing code),
it proves for one `loop.schedule`:

  * every arena buffer lies inside the arena and starts at a multiple of
    the alignment;
  * no two buffers that are live at the same time share a byte, except an
    output that takes over an input at the launch where that input dies
    and the output is born, with identical bytes, when the kernel's
    in-place analysis allows that pair for those arguments.

A buffer is live over the launches and copies between the first and the
last one that name it or a `loop.view` of it.
"""

from __future__ import annotations

from fusecc.compiler.ir import Value
from fusecc.dialects import loop

from fusecc.passes.memory.liveness import in_place_pairs


def check_plan(schedule: loop.ScheduleOp, alignment: int = 1, dims: dict[str, int] | None = None) -> list[str]:
    """Problems with the schedule's plan; empty when it is sound. A plan of
    `?` sizes (offsets and arena as expressions) is checked at `dims`."""
    problems: list[str] = []
    dims = dims or {}
    arena = loop.evaluate_size(schedule.arena_size, dims)
    owner: dict[Value, loop.ArenaViewOp] = {}
    place: dict[loop.ArenaViewOp, tuple[int, int]] = {}  # view -> (offset, bytes) at dims
    events = []
    for op in schedule.body:
        if isinstance(op, loop.ArenaViewOp):
            owner[op.result] = op
            lo = loop.evaluate_size(op.offset, dims)
            hi = lo + loop.concrete_type(op, dims).byte_size
            place[op] = (lo, hi - lo)
            if lo % alignment:
                problems.append(f"buffer at {lo} is not aligned to {alignment} bytes")
            if lo < 0 or hi > arena:
                problems.append(f"buffer [{lo}, {hi}) leaves the arena of {arena} bytes")
        elif isinstance(op, loop.ViewOp):
            if op.source in owner:
                owner[op.result] = owner[op.source]
        elif isinstance(op, (loop.LaunchOp, loop.CopyOp)):
            events.append(op)
    first: dict[loop.ArenaViewOp, int] = {}
    last: dict[loop.ArenaViewOp, int] = {}
    for t, op in enumerate(events):
        for v in op.operands:
            if v in owner:
                first.setdefault(owner[v], t)
                last[owner[v]] = t
    live = sorted(first, key=lambda b: first[b])
    for n, a in enumerate(live):
        for b in live[n + 1 :]:
            if first[b] > last[a]:
                break  # sorted by start: b and later ones begin after a ends
            (a_lo, a_size), (b_lo, b_size) = place[a], place[b]
            if not (a_lo < b_lo + b_size and b_lo < a_lo + a_size):
                continue
            if not _legal_handover(a, b, first, last, events, owner, place):
                problems.append(
                    f"buffers [{a_lo}, {a_lo + a_size}) and [{b_lo}, {b_lo + b_size}) "
                    f"overlap while both are live (launches {first[a]}..{last[a]} and {first[b]}..{last[b]})"
                )
    return problems


def _legal_handover(a, b, first, last, events, owner, place) -> bool:
    """`b` takes `a`'s bytes in place at the launch where `a` dies (or the
    other way round)."""
    if first[b] < first[a]:
        a, b = b, a
    t = last[a]
    if first[b] != t or place[a] != place[b]:
        return False
    launch = events[t]
    kernel = launch.resolve() if isinstance(launch, loop.LaunchOp) else None
    if kernel is None:
        return False
    positions_a = [i for i, v in enumerate(launch.operands) if owner.get(v) is a]
    positions_b = [i for i, v in enumerate(launch.operands) if owner.get(v) is b]
    if len(positions_a) != 1 or len(positions_b) != 1:
        return False
    return (positions_b[0], positions_a[0]) in in_place_pairs(kernel)


def check_module(module, alignment: int = 1) -> list[str]:
    problems = []
    for op in module.body:
        if isinstance(op, loop.ScheduleOp):
            problems += [f"@{op.sym_name}: {p}" for p in check_plan(op, alignment)]
    return problems


__all__ = ["check_module", "check_plan"]
