"""Writing the kernel of one contraction group (matmul, attention).

`KernelWriter` is a `KernelBuilder` (loops from callbacks, hoisted
constants, buffers, barriers) for a kernel whose arguments are its group's
inputs then outputs, with what tiled templates add:

  * `value_at`: a group value at an index through a *guarded* scalar
    emitter, so that a tile overhanging a tensor's edge never reads out of
    bounds and its padding is exactly 0 (it must add nothing to a sum);
  * `cooperative`: the points of a tile each thread of a block stages;
  * guards that exist only where a tile does not divide its extent.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Sequence

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder
from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, f32
from fusecc.dialects import arith, loop
from fusecc.dialects import tensor as T
from fusecc.dialects.fusion import GroupOp

from fusecc.passes.lowering.interface import group_io_kernel, input_buffers, output_buffers
from fusecc.passes.lowering.kernel_builder import KernelBuilder, ceil_div, place_kernel_barriers, prune
from fusecc.passes.lowering.scalar_emitter import Index, IndexMath, ScalarEmitter
from fusecc.passes.tiling.geometry import REGISTERS, SHARED_MEMORY
from fusecc.passes.tiling.resources import streaming_kernel_resources


class GuardedEmitter(ScalarEmitter):
    """A scalar emitter whose loads carry the current guard.

    Inside `guarded(g)`, every load of a group input (or constant) is
    `loop.load ..., g`: a guarded-off load reads 0 instead of touching
    memory. Values are memoised per guard, so a value loaded under one guard
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


class KernelWriter(KernelBuilder):
    """The kernel of one group: arguments are its inputs, then its outputs."""

    def __init__(self, group: GroupOp, hardware: Hardware, name: str | None = None, extra_args: Sequence[MemRefType] = (), with_outputs: bool = True):
        """`extra_args` (scratch buffers) follow the inputs and outputs (the
        outputs are left out without `with_outputs`): `self.extra`."""
        kernel, self.arg_refs = group_io_kernel(group, name, list(extra_args), with_outputs)
        super().__init__(kernel, hardware)
        self.group = group
        self.emitter = GuardedEmitter(self.b, input_buffers(group, kernel), self.im)
        self.emitter.s = self.s
        self.outputs = output_buffers(group, kernel) if with_outputs else []
        self.extra = list(kernel.body.args[len(kernel.body.args) - len(extra_args) :]) if extra_args else []

    def estimate_streaming(self, live: int) -> None:
        """Give this kernel its own resource estimate (a one-element-per-thread
        kernel: resources.streaming_kernel_resources) in place of its group's,
        which sizes the group's tiled kernel."""
        # The kernel has every input of its group as an argument; count those it reads.
        pointers = sum(isinstance(arg.type, MemRefType) and bool(arg.uses) for arg in self.kernel.body.args)
        registers, shared = streaming_kernel_resources(pointers, live)
        self.kernel.attributes[REGISTERS] = A.IntegerAttr(registers)
        self.kernel.attributes[SHARED_MEMORY] = A.IntegerAttr(shared)

    def outer(self, upper: Sequence[int], mapping: Sequence[str], body, names: Sequence[str] = ()) -> None:
        """The kernel's outer loop (the grid, or the workers): `alloc` puts
        shared (and CPU-local) buffers at the top of its body."""

        def enter(*ivs: Value) -> None:
            self._outer_body = self.b.insertion_point.block
            body(*ivs)

        self.parallel(upper, mapping, enter, names)

    def finish(self) -> loop.KernelOp:
        self.b.create(loop.ReturnOp)
        prune(self.kernel)
        place_kernel_barriers(self.kernel)
        return self.kernel

    def store(self, value: Value, buffer: Value, idx: Sequence, guard: Value | None = None) -> None:
        """A store, converting to the buffer's element type (f32 -> f16...)."""
        self.emitter.store(value, buffer, [self.index(i) for i in idx], guard)

    def named_loop(self, results: list[Value], *names: str) -> list[Value]:
        """Name a `for_`'s carried values (one name each, or one for all)."""
        op = results[0].defining_op if results else None
        if op is not None:
            hints = list(names) if len(names) == len(results) else [names[0]] * len(results)
            for values in (op.body.args[1:], op.results):
                for value, hint in zip(values, hints):
                    value.name_hint = hint
        return results

    # --- index arithmetic and guards ---------------------------------------------
    def index_sub(self, a: Value, b: Value) -> Value:
        ka, kb = self.im.value_of(a), self.im.value_of(b)
        if ka is not None and kb is not None:
            return self.im.const(ka - kb)
        return a if kb == 0 else self.b.create(arith.SubOp, [a, b]).result

    def below(self, i: Value, bound: int, needed: bool = True) -> Value | None:
        """`i < bound`, or None (always true) when the caller knows it holds."""
        return self.im.less_than(i, bound) if needed else None

    def all_of(self, *conditions: Value | None) -> Value | None:
        result = None
        for c in conditions:
            result = self.both(result, c)
        return result

    def select(self, condition: Value | None, value: Value, otherwise: Value) -> Value:
        if condition is None:
            return value
        return self.b.create(arith.SelectOp, [condition, value, otherwise]).result

    # --- group values and tiles ----------------------------------------------------
    def value_at(self, value: Value, idx: Index, guard: Value | None = None) -> Value:
        """`value[idx]` computed from the group's inputs; 0 where `guard` is false."""
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
        if total == 0:
            return []  # an empty tile (a head dim of 0): nothing to share out
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
            points.append((im.delinearize(flat, shape), self.below(flat, total, (k + 1) * threads > total)))
        return points
