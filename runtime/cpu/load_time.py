"""Launches that depend only on constants run once, when a program is loaded.

A matmul whose B operand is a constant (a weight, dense or `dense_resource`)
is preceded by a `_pack_b` kernel that copies B into K-major panels. The
panels are the same on every call, so packing them per call wastes the
copy. The CPU runtime runs such a launch once, when it resolves the
schedule, into a buffer of its own (the arena bytes it was planned in may
be reused by later buffers) and skips it on calls.

A launch qualifies when every argument its kernel reads is a schedule
constant that nothing writes, and every argument it writes is a whole
arena buffer (`loop.arena_view`) that no other launch or copy writes.
"""

from __future__ import annotations

from fusecc.compiler.ir import Value
from fusecc.dialects import loop


def argument_uses(kernel: loop.KernelOp) -> tuple[set[int], set[int]]:
    """(read, written) argument indices of `kernel`: a `loop.store` into an
    argument (through views) writes it; any other use counts as a read."""
    args = {arg: i for i, arg in enumerate(kernel.body.args)}
    read, written = set(), set()
    for op in kernel.walk():
        if isinstance(op, loop.ViewOp):
            continue
        for index, operand in enumerate(op.operands):
            root = operand
            while isinstance(root.defining_op, loop.ViewOp):
                root = root.defining_op.source
            if root not in args:
                continue
            if isinstance(op, loop.StoreOp) and operand is op.buffer and index == 1:
                written.add(args[root])
            else:
                read.add(args[root])
    return read, written


def _root(value: Value) -> Value:
    while isinstance(value.defining_op, loop.ViewOp):
        value = value.defining_op.source
    return value


def load_time_launches(schedule: loop.ScheduleOp) -> dict[loop.LaunchOp, list[Value]]:
    """The launches of `schedule` that can run once at load, each with the
    arena buffers it fills (which then need buffers of their own)."""
    uses: dict[str, tuple[set[int], set[int]]] = {}
    writers: dict[Value, list] = {}
    launches = []
    for op in schedule.body:
        if isinstance(op, loop.LaunchOp):
            kernel = op.resolve()
            if op.kernel_name not in uses:
                uses[op.kernel_name] = argument_uses(kernel)
            for i in uses[op.kernel_name][1]:
                writers.setdefault(_root(op.operands[i]), []).append(op)
            launches.append(op)
        elif isinstance(op, loop.CopyOp):
            writers.setdefault(_root(op.target), []).append(op)
    found: dict[loop.LaunchOp, list[Value]] = {}
    for op in launches:
        read, written = uses[op.kernel_name]
        if not written:
            continue
        sources = [_root(op.operands[i]) for i in read]
        if not all(isinstance(s.defining_op, loop.ConstantOp) and s not in writers for s in sources):
            continue
        targets = [op.operands[i] for i in sorted(written)]
        if all(isinstance(t.defining_op, loop.ArenaViewOp) and writers.get(t) == [op] for t in targets):
            found[op] = targets
    return found


__all__ = ["argument_uses", "load_time_launches"]
