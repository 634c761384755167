"""place-barriers: make the ordering between a GPU block's thread loops explicit.

The loop level runs one thread-mapped `loop.parallel` to completion before
the block-level code after it starts (the loop interpreter does exactly
that). On a GPU the threads of a block run those sections concurrently, so
where one section, or block-level memory access, may touch what an earlier
one wrote (or write what it read) in memory other threads see, a
`loop.barrier` has to separate them. This pass inserts those barriers at
block level, where the lowering left them implicit; a backend then only
prints `loop.barrier` (CUDA: `__syncthreads()`).

It lives with the lowering, not with the CUDA printer: it is a rewrite of
loop IR to loop IR about the GPU execution model that the loop dialect
defines, its output runs on the loop interpreter, and any GPU backend needs
it. It runs after `plan-memory`: arguments that a launch makes overlap
(views of one arena range) count as one buffer.

Where (per block-level op, in order, with the effects not yet separated
by a barrier):
  * before an op whose cross-thread reads or writes conflict with pending
    ones: shared buffers, global buffers (all possibly-aliased arguments as
    one), never per-thread `local` buffers or constant data;
  * before a block-level `loop.for`/`loop.if` whose body conflicts: one
    barrier before the construct rather than one per iteration;
  * at the end of a `loop.for` body whose end conflicts with its start (the
    next iteration would overwrite what this one still reads).
Barriers already in the IR (the lowering's, inside thread loops) count, so
the pass is idempotent. CPU kernels are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.compiler.types import MemRefType
from fusecc.dialects import loop
from fusecc.dialects.loop_vector import AsyncWaitOp
from fusecc.passes.lowering.buffer_facts import base_buffer, constant_params, restrict_safe_params

ALIASED_ARGUMENTS = "aliased arguments"  # the one key of every argument a launch may overlap with another


@dataclass
class Effects:
    reads: set = field(default_factory=set)
    writes: set = field(default_factory=set)

    def __or__(self, other: "Effects") -> "Effects":
        return Effects(self.reads | other.reads, self.writes | other.writes)

    def conflicts(self, other: "Effects", writes_conflict: bool = True) -> set:
        """The buffers one side writes and the other reads (or also writes, if
        `writes_conflict`)."""
        both_write = self.writes & other.writes if writes_conflict else set()
        return self.writes & other.reads | self.reads & other.writes | both_write


class PlacementError(Exception):
    """A shared-memory hazard under thread-dependent control flow, where no
    barrier can go (a bug in the lowering that produced the kernel)."""


class BarrierPlan:
    """Where one GPU kernel needs barriers: before ops, and at the end of loop bodies.

    Block-level code sees every cross-thread effect (shared and global
    memory); inside a thread loop only shared memory counts, since the
    threads of one section exchange data through shared memory alone."""

    def __init__(self, kernel: loop.KernelOp, restrict: set[int], constant_args: set[int]):
        args = kernel.body.args
        self.aliased = {a for i, a in enumerate(args) if isinstance(a.type, MemRefType) and i not in restrict}
        self.constant = {args[i] for i in constant_args}
        self.before: dict[Operation, set] = {}  # op -> the buffers the barrier orders
        self.at_end: dict[Block, set] = {}
        self.plan(kernel.body, Effects(), shared_only=False)

    def key(self, buffer: Value):
        """What two accesses must share to touch the same memory across threads."""
        base = base_buffer(buffer)
        return ALIASED_ARGUMENTS if base in self.aliased else base

    def effects(self, op: Operation, shared_only: bool) -> Effects:
        """Cross-thread memory effects of `op` and everything nested in it."""
        out = Effects()
        for inner in op.walk():
            if not isinstance(inner, (loop.LoadOp, loop.StoreOp)):
                continue
            space = inner.buffer.type.memory_space
            base = base_buffer(inner.buffer)
            if space == "local" or (shared_only and space != "shared"):
                continue
            if isinstance(base.defining_op, loop.ConstantOp) or base in self.constant:
                continue
            (out.writes if isinstance(inner, loop.StoreOp) else out.reads).add(self.key(inner.buffer))
        return out

    def plan(self, block: Block, pending: Effects, shared_only: bool) -> Effects:
        """Plan the code of `block` (every thread runs it, in step at barriers);
        returns the effects not yet separated from what follows by a barrier."""
        for op in block:
            if isinstance(op, loop.BarrierOp):
                pending = Effects()
            elif isinstance(op, loop.ParallelOp) and op.maps_blocks:
                pending = self.plan(op.body, pending, shared_only)
            elif isinstance(op, loop.ParallelOp) and op.maps_threads:
                pending = self.construct(op, pending, shared_only)
                self.plan(op.body, Effects(), shared_only=True)
            elif self.uniform(op, shared_only):  # every thread takes the same path: barriers may go inside
                pending = self.plan_uniform(op, pending, shared_only)
            else:
                pending = self.construct(op, pending, shared_only)
        return pending

    def plan_uniform(self, op: Operation, pending: Effects, shared_only: bool) -> Effects:
        """A `loop.for`/`loop.if` every thread runs alike. Its body is planned
        first; `pending` then needs a barrier before the construct only if it
        conflicts with what the body does before its own first barrier (one
        barrier before the construct rather than one per iteration)."""
        bodies = [r.block for r in op.regions]
        ends = [self.plan(body, Effects(), shared_only) for body in bodies]
        if isinstance(op, loop.ForOp):
            wrap = ends[0].conflicts(self.effects_until_barrier(op.body, shared_only), not shared_only)
            if wrap:  # the next iteration's start races with this one's end
                self.at_end[op.body] = wrap
                ends = [Effects()]
        entry = Effects()
        for body in bodies:
            entry = entry | self.effects_until_barrier(body, shared_only)
        if self.order(op, pending, entry, shared_only):
            pending = Effects()
        for end in ends:  # a loop may run no iteration, an if may take either branch
            pending = pending | end
        return pending

    def construct(self, op: Operation, pending: Effects, shared_only: bool) -> Effects:
        """`op` as one step no barrier can enter: a barrier before it where it conflicts with `pending`."""
        mine = self.effects(op, shared_only)
        if shared_only and op.regions and self.internal_hazard(op):
            raise PlacementError(f"a shared-memory hazard under thread-dependent control flow at {op.location}: no barrier can order it")
        return (Effects() if self.order(op, pending, mine, shared_only) else pending) | mine

    def internal_hazard(self, op: Operation) -> bool:
        """Whether the shared memory accesses nested in `op` conflict among themselves across threads."""
        pending = Effects()
        for inner in op.walk(include_self=False):
            if isinstance(inner, loop.BarrierOp):
                pending = Effects()
            elif isinstance(inner, (loop.LoadOp, loop.StoreOp)):
                mine = self.effects(inner, shared_only=True)
                if pending.conflicts(mine, False):
                    return True
                pending = pending | mine
        return isinstance(op, loop.ForOp) and bool(pending.conflicts(pending, False))

    @classmethod
    def uniform(cls, op: Operation, shared_only: bool) -> bool:
        """Block-level control flow is uniform; inside a thread loop, a
        `loop.for` whose bounds are the same for every thread is."""
        if not isinstance(op, (loop.ForOp, loop.IfOp)):
            return False
        if not shared_only:
            return True
        if isinstance(op, loop.IfOp):
            return False  # a barrier may not go under a loop.if in thread code
        section = op.parent_of_type(loop.ParallelOp)
        return all(cls.same_for_all_threads(v, section) for v in op.operands[:3])

    @classmethod
    def same_for_all_threads(cls, value: Value, section: loop.ParallelOp) -> bool:
        """Whether `value` cannot differ between the threads of `section`:
        defined outside it, or computed in it from such values alone (not
        loaded, shuffled or derived from a thread index)."""
        op = value.defining_op
        if op is None:  # a block argument: uniform if it is a uniform loop's induction variable or outside
            owner = value.owner.parent_op
            if owner is section:
                return False
            if not section.is_ancestor_of(owner):
                return True
            return isinstance(owner, loop.ForOp) and value is owner.induction_var and cls.uniform(owner, True)
        if not section.is_ancestor_of(op):
            return True
        if op.regions or isinstance(op, (loop.LoadOp, loop.ShuffleXorOp)):
            return False
        return all(cls.same_for_all_threads(v, section) for v in op.operands)

    def order(self, op: Operation, pending: Effects, mine: Effects, shared_only: bool) -> bool:
        """Plan a barrier before `op` if it conflicts with `pending` (in a
        thread loop, stores of different threads go to distinct elements:
        only a read and a write of one buffer need ordering)."""
        ordered = pending.conflicts(mine, not shared_only)
        if ordered:
            self.before[op] = ordered
        return bool(ordered)

    def effects_until_barrier(self, block: Block, shared_only: bool) -> Effects:
        out = Effects()
        for op in block:
            if isinstance(op, loop.BarrierOp) or op in self.before:
                break
            out = out | self.effects(op, shared_only)
        return out


def in_thread_loop(op: Operation) -> bool:
    parent = op.parent_of_type(loop.ParallelOp)
    while parent is not None and not parent.maps_threads:
        parent = parent.parent_of_type(loop.ParallelOp)
    return parent is not None


def right_after_accesses(plan: BarrierPlan, op: Operation) -> Operation:
    """Where a barrier needed before `op` goes: above the ops just before it
    that touch no memory it orders (arithmetic, shuffles, loops over other
    buffers), so that it follows the accesses it orders, as a reader expects."""
    shared_only = in_thread_loop(op)
    while (prev := op.prev_op) is not None and not isinstance(prev, loop.BarrierOp) and not any(isinstance(o, loop.BarrierOp) for o in prev.walk()):
        effects = plan.effects(prev, shared_only)
        if effects.reads or effects.writes or any(isinstance(o, AsyncWaitOp) for o in prev.walk()):
            break  # (a barrier above a wait would order the readers before the copies landed)
        op = prev
    return op


def place_barriers_in(kernel: loop.KernelOp, restrict: set[int] | None = None, constant_args: set[int] = frozenset()) -> int:
    """Insert the barriers GPU `kernel` needs; returns how many. Without a
    schedule (`restrict` None), no two arguments overlap."""
    if restrict is None:
        restrict = {i for i, a in enumerate(kernel.body.args) if isinstance(a.type, MemRefType)}
    plan = BarrierPlan(kernel, restrict, constant_args)
    for op in plan.before:
        anchor = right_after_accesses(plan, op)
        anchor.parent.insert_before(loop.BarrierOp.create(location=op.location), anchor)
    for block in plan.at_end:
        anchor = right_after_accesses(plan, block.last_op)
        block.insert_before(loop.BarrierOp.create(location=block.parent_op.location), anchor)
    return len(plan.before) + len(plan.at_end)


def place_barriers(module: Operation) -> int:
    """Insert the barriers every GPU kernel of `module` needs, knowing which
    arguments its launches make overlap; returns how many."""
    restrict = restrict_safe_params(module)
    constants = constant_params(module)
    kernels = [op for op in module.walk() if isinstance(op, loop.KernelOp) and op.is_gpu]
    return sum(place_barriers_in(k, restrict[k], set(constants.get(k, {}))) for k in kernels)


@dataclass(frozen=True)
class PlaceBarriers(Pass):
    name = "place-barriers"
    summary = "Insert loop.barrier between a GPU block's thread loops where shared or global memory needs ordering"

    def run(self, op: Operation, context: PassContext) -> None:
        placed = place_barriers(op)
        context.statistics["place-barriers.placed"] = context.statistics.get("place-barriers.placed", 0) + placed
