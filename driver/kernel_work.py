"""The floating-point work of each kernel, so that measured rates credit FLOPs where they are done.

A fusion group may lower to several kernels (a matmul's pack_a, pack_b and
compute kernels): crediting the group's FLOPs to its first launch gave a
pack kernel 11943 GFLOP/s on one core (issue 11.4). Here:

* `kernel_work(kernel)` counts the floating-point operations one launch
  executes, from its loop IR: each float `arith` op but constants, casts,
  selects and compares (add, sub, mul, div, max, min, neg) and each `math`
  function, per execution. Tiles padded to the register or vector width
  are counted as executed (a 17x3 @ 3x129 matmul runs 32x144 tiles);
* `credited_flops(steps, group_flops)` credits each group's useful FLOPs
  (the cost model's: 2*M*N*K for a matmul, whatever the padding) to its
  launches in proportion to what each executes, so a pack kernel, which
  executes none, gets none, a group with one computing launch credits it
  all of them, and a kernel launched once per piece of a horizontal group
  gets one piece's per launch (crediting by kernel name gave each of the
  three Q/K/V launches all three matmuls: 450-500 GFLOP/s on one core).

Loop bounds are index arithmetic over constants, the induction variables
of enclosing loops and, for a kernel with `?` dims, the sizes of one
launch's arguments (`kernel_work(kernel, arg_types)`, the memref types at
the call's dims: `loop.dim` reads them). The counter walks the kernel
with those values known: a loop whose body does the same work at its first
and last iteration is counted as trip count x one body; otherwise (an edge
tile cut short by `arith.min`) every iteration is walked, up to
`MAX_WALKED` of them, beyond which the first and last are averaged. A
bound it cannot evaluate (it never happens for lowered tensor programs)
counts one iteration and marks the count `exact=False`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusecc.compiler.ir import Block, Operation
from fusecc.dialects import loop

NOT_FLOPS = frozenset({"arith.constant", "arith.cast", "arith.select", "arith.cmp", "arith.and", "arith.or", "arith.xor"})
MAX_WALKED = 4096

_INDEX_ARITH = {
    "arith.add": lambda a, b: a + b,
    "arith.sub": lambda a, b: a - b,
    "arith.mul": lambda a, b: a * b,
    "arith.div": lambda a, b: int(a / b) if b else 0,  # truncating, as the loop level divides
    "arith.rem": lambda a, b: a - b * int(a / b) if b else 0,
    "arith.min": min,
    "arith.max": max,
}
_CMP = {"eq": int.__eq__, "ne": int.__ne__, "lt": int.__lt__, "le": int.__le__, "gt": int.__gt__, "ge": int.__ge__}


@dataclass
class Work:
    flops: float
    exact: bool = True


def flops_of(op: Operation) -> int:
    """FLOPs of one float op: a fused multiply-add is a multiply and an add."""
    return 2 if op.name == "math.fma" else 1


def is_flop(op: Operation) -> bool:
    if op.name in NOT_FLOPS or not op.results:
        return False
    if not (op.name.startswith("arith.") or op.name.startswith("math.")):
        return False
    t = op.results[0].type
    return getattr(t, "is_float", False)


class _Counter:
    def __init__(self, sizes: dict | None = None):
        self.exact = True
        self.sizes = sizes or {}  # (kernel argument, axis) -> size at one launch

    def block(self, block: Block, env: dict) -> float:
        flops = 0.0
        for op in block:
            flops += self.op(op, env)
        return flops

    def _value(self, value, env):
        return env.get(value)

    def op(self, op: Operation, env: dict) -> float:
        name = op.name
        if name == "arith.constant":
            value = getattr(op.attr("value"), "value", None)
            if isinstance(value, (int, bool)) and not getattr(op.results[0].type, "is_float", False):
                env[op.results[0]] = int(value)
            return 0.0
        if isinstance(op, loop.DimOp):
            t, axis = op.operands[0].type, op.attr("axis")
            size = self.sizes.get((op.operands[0], axis)) if axis in getattr(t, "dynamic_axes", ()) else t.shape[axis]
            if size is not None:
                env[op.results[0]] = int(size)
            return 0.0
        if name == "arith.select" and not getattr(op.results[0].type, "is_float", False):
            condition, a, b = (self._value(v, env) for v in op.operands)
            if condition is not None and (a if condition else b) is not None:
                env[op.results[0]] = a if condition else b
            return 0.0
        if name in _INDEX_ARITH and not getattr(op.results[0].type, "is_float", False):
            a, b = (self._value(v, env) for v in op.operands)
            if a is not None and b is not None:
                env[op.results[0]] = _INDEX_ARITH[name](a, b)
            return 0.0
        if name == "arith.cmp":
            a, b = (self._value(v, env) for v in op.operands)
            if a is not None and b is not None:
                env[op.results[0]] = int(_CMP[op.attr("predicate")](a, b))
            return 0.0
        if isinstance(op, loop.ParallelOp):
            return self.parallel(op, env)
        if isinstance(op, loop.ForOp):
            return self.for_(op, env)
        if isinstance(op, loop.IfOp):
            condition = self._value(op.operands[0], env)
            if condition is None:
                self.exact = False  # counted as the costlier branch
                return max(self.block(op.then_block, dict(env)), self.block(op.else_block, dict(env)))
            return self.block(op.then_block if condition else op.else_block, env)
        flops = float(flops_of(op)) if is_flop(op) else 0.0
        for region in op.regions:
            for block in region.blocks:
                flops += self.block(block, dict(env))
        return flops

    def _iterations(self, body: Block, points: list[tuple], trip: int, env: dict) -> float:
        """The work of `body` over `trip` iterations, `points` giving the
        induction values of the first and last ones (and all of them when
        the two differ and there are few)."""
        if trip <= 0:
            return 0.0

        def at(point) -> float:
            inner = dict(env)
            inner.update(zip(body.args, point))
            return self.block(body, inner)

        first, last = at(points[0]), at(points[-1])
        if first == last or trip <= 2:
            return first * (trip - 1) + last if trip > 1 else first
        if trip <= MAX_WALKED:
            return sum(at(p) for p in points_all(points, trip))
        return (first + last) / 2 * trip

    def parallel(self, op: loop.ParallelOp, env: dict) -> float:
        upper = [u if isinstance(u, int) else self._value(u, env) for u in op.extents]
        if None in upper:
            self.exact = False  # an extent known only at run time, and no sizes given: one iteration
            upper = [1 if u is None else u for u in upper]
        trip = math.prod(upper)
        first, last = tuple(0 for _ in upper), tuple(u - 1 for u in upper)
        return self._iterations(op.regions[0].block, [first, ("grid", upper), last], trip, env)

    def for_(self, op: loop.ForOp, env: dict) -> float:
        lower, upper, step = (self._value(v, env) for v in op.operands[:3])
        body = op.regions[0].block
        if lower is None or upper is None or not step:
            self.exact = False
            return self.block(body, {**env, body.args[0]: lower or 0})
        trip = max(0, -(-(upper - lower) // step))
        if trip == 0:
            return 0.0
        last = lower + (trip - 1) * step
        return self._iterations(body, [(lower,), ("range", lower, step), (last,)], trip, env)


def points_all(points: list, trip: int):
    """Every induction point of a loop described by `_iterations`' points."""
    spec = points[1]
    if spec[0] == "range":
        _, lower, step = spec
        return [(lower + i * step,) for i in range(trip)]
    upper = spec[1]
    return [tuple(_unravel(i, upper)) for i in range(trip)]


def _unravel(i: int, upper: list[int]) -> list[int]:
    out = []
    for extent in reversed(upper):
        out.append(i % extent)
        i //= extent
    return out[::-1]


def kernel_work(kernel: loop.KernelOp, arg_types=None) -> Work:
    """The floating-point operations one launch of `kernel` executes; for a
    kernel with `?` dims, `arg_types` are its arguments' types at that launch
    (memrefs with every size known)."""
    sizes = {}
    for arg, t in zip(kernel.body.args, arg_types or ()):
        for axis in getattr(arg.type, "dynamic_axes", ()):
            sizes[(arg, axis)] = t.shape[axis]
    counter = _Counter(sizes)
    flops = counter.block(kernel.body, {})
    return Work(flops, counter.exact)


def credited_flops(steps, group_flops: dict) -> list[float]:
    """Per step (objects with .group and .executed_flops), its share of its
    group's `group_flops` (see the module doc); a step of no known group (a
    copy) gets 0. Shares are per launch: a kernel launched once per piece of
    a horizontal group (q, k and v) is credited one piece per launch."""
    executed: dict = {}
    for step in steps:
        executed[step.group] = executed.get(step.group, 0.0) + step.executed_flops
    credited = []
    for step in steps:
        total = executed.get(step.group, 0.0)
        useful = group_flops.get(step.group)
        if useful is None or step.group is None or not total:
            credited.append(0.0)
        else:
            credited.append(useful * step.executed_flops / total)
    return credited


__all__ = ["MAX_WALKED", "Work", "credited_flops", "flops_of", "is_flop", "kernel_work"]
