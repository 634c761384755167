"""Structured building of kernel bodies, shared by the tiled templates.

`KernelWriter` holds one kernel being written for one fusion group: the
builder, index arithmetic, a guarded scalar emitter over the group's input
buffers, and helpers that build the `loop` dialect's structured ops from
Python callbacks (`parallel`, `for_`, `if_`), cooperative copies of a tile
by all threads of a block, and boundary guards that are only emitted where
a tile does not divide its extent.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.ir import Block, Value
from fusecc.compiler.types import MemRefType, ScalarType, TensorType, f32
from fusecc.dialects import arith, loop
from fusecc.dialects import tensor as T
from fusecc.dialects.fusion import GroupOp

from .interface import group_io_kernel, input_buffers, output_buffers
from .scalar_emitter import Index, IndexMath, ScalarEmitter


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class GuardedEmitter(ScalarEmitter):
    """A scalar emitter whose loads carry the current guard.

    Inside `guarded(g)`, every load of a group input (or constant) is
    `loop.load ..., g`: a guarded-off load reads 0 instead of touching
    memory, so a tile that overhangs a tensor's edge never reads out of
    bounds. Values are memoised per guard, so a value loaded under one guard
    is never reused under another.
    """

    def __init__(self, builder: Builder, buffers: dict[Value, Value], im: IndexMath | None = None):
        super().__init__(builder, buffers, im)
        self.guard: Value | None = None
        self._memo_by_guard: dict[Value | None, dict] = {None: self._memo}

    @contextmanager
    def guarded(self, guard: Value | None) -> Iterator[None]:
        saved = self.guard, self._memo
        self.guard = guard
        self._memo = self._memo_by_guard.setdefault(guard, {})
        try:
            yield
        finally:
            self.guard, self._memo = saved

    def load(self, buffer: Value, idx: Index) -> Value:
        if self.guard is None:
            return super().load(buffer, idx)
        t = buffer.type
        raw = self.b.create(loop.LoadOp, [buffer, *idx, self.guard], result_types=[t.element_type]).result
        if t.element_type.is_float and t.element_type is not f32:
            return self.s.cast(raw, f32)
        return raw


def reads_only_memory(value: Value) -> bool:
    """Is `value` its inputs' elements moved around (no arithmetic)? Then a
    guarded-off element is exactly 0, the padding of a guarded load."""
    op = value.defining_op
    if op is None:
        return True
    if isinstance(op, (T.TransposeOp, T.ReshapeOp, T.BroadcastToOp, T.SliceOp, T.ConcatOp)):
        return all(reads_only_memory(v) for v in op.operands)
    return False


class KernelWriter:
    """One kernel for one fusion group, written top-down."""

    def __init__(self, group: GroupOp, name: str | None = None):
        self.group = group
        self.kernel, self.arg_refs = group_io_kernel(group, name)
        self.b = Builder(InsertionPoint.at_end(self.kernel.body), group.location)
        self.im = IndexMath(self.b)
        self.emitter = GuardedEmitter(self.b, input_buffers(group, self.kernel), self.im)
        self.s = self.emitter.s
        self.outputs = output_buffers(group, self.kernel)

    def finish(self) -> loop.KernelOp:
        self.b.create(loop.ReturnOp)
        return self.kernel

    # --- structure -------------------------------------------------------------
    @contextmanager
    def inside(self, block: Block) -> Iterator[None]:
        saved = self.b.insertion_point
        self.b.set_insertion_point(InsertionPoint.at_end(block))
        try:
            yield
        finally:
            self.b.set_insertion_point(saved)

    @contextmanager
    def parallel(self, upper: Sequence[int], mapping: Sequence[str], names: Sequence[str] = ()) -> Iterator[list[Value]]:
        """`with w.parallel([n], ["worker"]) as (i,):` — the body goes inside."""
        op = self.b.insert(loop.ParallelOp.build(list(upper), list(mapping)))
        for arg, name in zip(op.induction_vars, names):
            arg.name_hint = name
        with self.inside(op.body):
            yield list(op.induction_vars)
            self.b.create(loop.YieldOp)

    def for_(
        self,
        lower: Value,
        upper: Value,
        step: Value,
        inits: Sequence[Value],
        body: Callable[[Value, list[Value]], Sequence[Value]],
        unroll: int | None = None,
        names: tuple[str, str | Sequence[str]] | None = None,
    ) -> list[Value]:
        """A `loop.for` whose body is `body(iv, carried) -> next carried`;
        `names` hints the induction variable's name and the carried values'
        (one name for all, or one each)."""
        op = self.b.insert(loop.ForOp.build(lower, upper, step, list(inits)))
        if names is not None:
            op.induction_var.name_hint = names[0]
            carried = [names[1]] * len(inits) if isinstance(names[1], str) else list(names[1])
            for values in (op.iter_args, op.results):
                for value, name in zip(values, carried):
                    value.name_hint = name or None
        if unroll is not None:
            op.attributes["unroll"] = A.IntegerAttr(unroll)
        with self.inside(op.body):
            carried = body(op.induction_var, list(op.iter_args))
            self.b.create(loop.YieldOp, list(carried))
        return list(op.results)

    def if_(self, condition: Value, result_types: Sequence[ScalarType], then: Callable[[], Sequence[Value]], otherwise: Callable[[], Sequence[Value]]) -> list[Value]:
        op = self.b.insert(loop.IfOp.build(condition, list(result_types)))
        for block, branch in ((op.then_block, then), (op.else_block, otherwise)):
            with self.inside(block):
                self.b.create(loop.YieldOp, list(branch()))
        return list(op.results)

    def alloc(self, shape: Sequence[int], element: ScalarType, space: str, name: str) -> Value:
        value = self.b.create(loop.AllocOp, [], result_types=[MemRefType(shape, element, space)]).result
        value.name_hint = name
        return value

    def barrier(self) -> None:
        self.b.create(loop.BarrierOp)

    def load(self, buffer: Value, idx: Index, guard: Value | None = None) -> Value:
        operands = [buffer, *idx] + ([guard] if guard is not None else [])
        return self.b.create(loop.LoadOp, operands, result_types=[buffer.type.element_type]).result

    def store(self, value: Value, buffer: Value, idx: Index, guard: Value | None = None) -> None:
        self.emitter.store(value, buffer, idx, guard)

    # --- index arithmetic beyond IndexMath ----------------------------------------
    def index_min(self, a: Value, b: Value) -> Value:
        ka, kb = self.im.value_of(a), self.im.value_of(b)
        if ka is not None and kb is not None:
            return self.im.const(min(ka, kb))
        return self.b.create(arith.MinOp, [a, b]).result

    def index_sub(self, a: Value, b: Value) -> Value:
        ka, kb = self.im.value_of(a), self.im.value_of(b)
        if ka is not None and kb is not None:
            return self.im.const(ka - kb)
        if kb == 0:
            return a
        return self.b.create(arith.SubOp, [a, b]).result

    # --- guards ------------------------------------------------------------------
    def below(self, i: Value, bound: int, needed: bool = True) -> Value | None:
        """`i < bound`, or None (always true) when the caller knows it holds."""
        return self.im.less_than(i, bound) if needed else None

    def compare(self, a: Value, b: Value, predicate: str) -> Value:
        return self.b.create(arith.CmpOp, [a, b], {"predicate": predicate}).result

    def all_of(self, *conditions: Value | None) -> Value | None:
        present = [c for c in conditions if c is not None]
        if not present:
            return None
        result = present[0]
        for c in present[1:]:
            result = self.b.create(arith.AndOp, [result, c]).result
        return result

    def select(self, condition: Value | None, value: Value, otherwise: Value) -> Value:
        if condition is None:
            return value
        return self.b.create(arith.SelectOp, [condition, value, otherwise]).result

    # --- group values --------------------------------------------------------------
    def value_at(self, value: Value, idx: Index, guard: Value | None = None) -> Value:
        """`value[idx]` computed from the group's inputs; 0 where `guard` is false
        (so padding contributes nothing to a sum)."""
        with self.emitter.guarded(guard):
            scalar = self.emitter.at(value, idx)
        if guard is not None and not reads_only_memory(value):
            scalar = self.select(guard, scalar, self.s.const(0, scalar.type))
        return scalar

    def cooperative(self, thread: Value, threads: int, shape: Sequence[int]) -> list[tuple[list[Value], Value | None]]:
        """The points of `shape` this thread owns when all `threads` threads of
        a block share them out row-major (last axis fastest, so consecutive
        threads take consecutive points), each with the guard `inside` of a
        last round that the threads do not fill (None when they do).

        When the threads tile whole rows of a 2-D shape (or a row holds whole
        rounds), a thread's points differ by constants, so the indices cost
        an add each and nothing has to stay live across rounds."""
        im = self.im
        total = math.prod(shape)
        rounds = ceil_div(total, threads)
        if len(shape) == 2 and threads % shape[1] == 0:
            rows_per_round = threads // shape[1]
            row, col = im.div(thread, shape[1]), im.rem(thread, shape[1])
            points = []
            for k in range(rounds):
                r = im.add(row, im.const(k * rows_per_round))
                points.append(([r, col], self.below(r, shape[0], (k + 1) * rows_per_round > shape[0])))
            return points
        if len(shape) == 2 and shape[1] % threads == 0:
            return [([im.const(k * threads // shape[1]), im.add(thread, im.const(k * threads % shape[1]))], None) for k in range(rounds)]
        points = []
        for k in range(rounds):
            flat = im.add(thread, im.const(k * threads))
            inside = self.below(flat, total, needed=(k + 1) * threads > total)
            points.append((im.delinearize(flat, shape), inside))
        return points

def compute_type(t: TensorType | ScalarType) -> ScalarType:
    """The scalar type a tensor's elements are computed in (f32 for floats)."""
    element = t.element_type if isinstance(t, TensorType) else t
    return f32 if element.is_float else element
