"""Building kernels: loop nests, the GPU and CPU kernel skeletons, and parts.

Every kernel the templates generate has one of two skeletons.

GPU (`hardware.is_gpu`)::

    loop.kernel @name {...} {
    ^bb0(args...):
      loop.parallel {upper = [B], mapping = ["block.x"]} {      // the grid
      ^bb0(%block: index):
        %s = loop.alloc : () -> memref<..., shared>            // hoisted shared buffers
        <dispatch>                                              // one part, or loop.if on %block
        loop.yield
      }
      loop.return
    }

and each part's body is exactly one thread loop `loop.parallel {upper =
[T], mapping = ["thread.x"]}` with the same T in every part, so the kernel
launches with grid (B,1,1) and block (T,1,1). Barriers and shuffles inside
a thread loop are never under a `loop.if` (uniform control flow).

CPU::

    loop.kernel @name {...} {
    ^bb0(args...):
      loop.parallel {upper = [W], mapping = ["worker"]} {      // spread over cores
      ^bb0(%unit: index):
        <dispatch>                                              // one part, or loop.if on %unit
        loop.yield
      }
      loop.return
    }

where a part's body uses `loop.for` (sequential, may carry values) and
innermost `loop.parallel {mapping = ["vector"]}` loops whose body is
straight-line code (no nested loops) over contiguous last-axis indices.

A `Part` is an independent piece of work that owns `units` consecutive
iterations of the outer loop: several parts in one kernel (a horizontal
group, outputs of different shapes) run side by side and the outer index
dispatches among them with a chain of `loop.if`s on ranges of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler.ir import Value
from fusecc.compiler.traits import Pure
from fusecc.compiler.types import MemRefType, ScalarType, f32, i1, index
from fusecc.dialects import arith, loop

from fusecc.passes.lowering.barriers import place_barriers_in
from fusecc.passes.tiling.shapes import ceil_div, compute_type, next_pow2, product
from fusecc.compiler.diagnostics import DiagnosticError, error
from fusecc.passes.lowering.scalar_emitter import IndexMath, ScalarEmitter, Scalars, _number_attr, visible_here

IndexLike = Value | int


def _int_or(size):
    """A sympy number as an int (index constants are ints), else the expression."""
    return int(size) if size.is_Integer else size


class KernelIndexMath(IndexMath):
    """Index arithmetic with constants hoisted to the kernel's entry and
    division/remainder by a constant computed once where visible."""

    def __init__(self, kb: "KernelBuilder"):
        super().__init__(kb.b)
        self.kb = kb
        self._divisions: dict[tuple, Value] = {}

    def const(self, value: int) -> Value:
        """An index constant; a dynamic size (a sympy expression of dim
        symbols) is computed at the kernel's entry from its arguments' sizes."""
        found = self._constants.get(value)
        if found is None:
            if type(value) is not int:
                found = self._constants[value] = self.kb.runtime_size(value)
                return found
            found = self.kb.hoist(arith.ConstantOp, {"value": A.IntegerAttr(value, index)})
            self.known[found] = value
            self._constants[value] = found
        return found

    def _memo(self, kind: str, a: Value, divisor: int, compute) -> Value:
        key = (kind, a, divisor)
        found = self._divisions.get(key)
        if found is None or not visible_here(self.b, found):
            found = compute(a, divisor)
            self._divisions[key] = found
        return found

    def div(self, a: Value, divisor: int) -> Value:
        if type(divisor) is not int:  # a dynamic size
            return self._memo("div", a, divisor, lambda a, d: self._op(arith.DivOp, a, self.const(d)))
        return self._memo("div", a, divisor, super().div)

    def rem(self, a: Value, divisor: int) -> Value:
        if type(divisor) is not int:
            return self._memo("rem", a, divisor, lambda a, d: self._op(arith.RemOp, a, self.const(d)))
        return self._memo("rem", a, divisor, super().rem)

    def delinearize(self, flat: Value, shape) -> list[Value]:
        """Like IndexMath's, without the last (unused) division."""
        out = []
        for axis in range(len(shape) - 1, 0, -1):
            out.append(self.rem(flat, shape[axis]))
            flat = self.div(flat, shape[axis])
        if shape:
            out.append(flat)
        out.reverse()
        return out


class KernelScalars(Scalars):
    """Scalar helpers whose constants are hoisted to the kernel's entry."""

    def __init__(self, kb: "KernelBuilder"):
        super().__init__(kb.b)
        self.kb = kb
        self._constants: dict[tuple, Value] = {}

    def const(self, value, t: ScalarType = f32) -> Value:
        key = (t, float(value).hex() if t.is_float else int(value))
        found = self._constants.get(key)
        if found is None:
            found = self.kb.hoist(arith.ConstantOp, {"value": _number_attr(value, t)})
            self._constants[key] = found
        return found


class KernelEmitter(ScalarEmitter):
    """The scalar emitter of a kernel: constants (scalars and dense
    `loop.constant` buffers) at the kernel's entry, once each."""

    def __init__(self, kb: "KernelBuilder", buffers: dict[Value, Value]):
        super().__init__(kb.b, buffers, kb.im)
        self.s = kb.s
        self.kb = kb
        self._dense: dict = {}

    def constant_buffer(self, attr) -> Value:
        found = self._dense.get(attr)
        if found is None:
            found = self.kb.hoist(loop.ConstantOp, {"value": attr})
            self._dense[attr] = found
        return found


class KernelBuilder:
    """Creates the ops of one kernel at a moving insertion point.

    The scalar emitter shares `b`, so group values computed through it land
    wherever the template currently builds."""

    def __init__(self, kernel: loop.KernelOp, hardware: Hardware):
        self.kernel = kernel
        self.hw = hardware
        self.b = Builder(InsertionPoint.at_end(kernel.body), kernel.location)
        self._last_hoisted = None
        self.im = KernelIndexMath(self)
        self.s = KernelScalars(self)
        self._outer_body = None  # the block (worker) loop's body, where buffers are allocated
        self._dividing: set = set()  # sizes being derived by division (runtime_size), against cycles

    def emitter(self, buffers: dict[Value, Value]) -> ScalarEmitter:
        """A scalar emitter that builds here, with this kernel's constants."""
        return KernelEmitter(self, buffers)

    def hoist(self, op_class, attributes, operands=()) -> Value:
        """A constant (or a size computed from the arguments' sizes) at the
        top of the kernel, visible everywhere in it."""
        op = op_class.create(list(operands), attributes, location=self.kernel.location)
        body = self.kernel.body
        if self._last_hoisted is not None:
            body.insert_after(op, self._last_hoisted)
        elif body.first_op is not None:
            body.insert_before(op, body.first_op)
        else:
            body.append(op)
        self._last_hoisted = op
        return op.result

    # --- values ----------------------------------------------------------------
    def index(self, value: IndexLike) -> Value:
        return value if isinstance(value, Value) else self.im.const(value)

    def runtime_size(self, size) -> Value:
        """A dynamic size (a sympy expression of dim symbols; compiler/dims.py)
        as an index value at the kernel's entry: the `loop.dim` of an argument
        axis of exactly that size, or arithmetic on such sizes."""
        for arg in self.kernel.body.args:
            t = arg.type
            if isinstance(t, MemRefType):
                for axis, d in enumerate(t.shape):
                    if type(d) is not int and d == size:
                        return self.hoist(loop.DimOp, {"axis": axis}, [arg])
        name = size.func.__name__
        if name in ("Add", "Mul"):
            terms = [self.index(_int_or(a)) for a in size.args]
            op = arith.AddOp if name == "Add" else arith.MulOp
            result = terms[0]
            for term in terms[1:]:
                result = self.hoist(op, {}, [result, term])
            return result
        if name == "Pow" and size.args[1].is_Integer and int(size.args[1]) > 0:  # S**2: S * S
            base = self.index(_int_or(size.args[0]))
            result = base
            for _ in range(int(size.args[1]) - 1):
                result = self.hoist(arith.MulOp, {}, [result, base])
            return result
        if name in ("floor", "ceiling"):
            numerator, denominator = size.args[0].as_numer_denom()
            if denominator.is_Integer and denominator > 0:
                # arith.div truncates: round a size (not negative) up by adding
                # d - 1 first; floor(-n/d) is -ceiling(n/d) (ceil_div's spelling)
                negated = not numerator.is_nonnegative and (-numerator).is_nonnegative
                n, d = self.index(_int_or(-numerator if negated else numerator)), int(denominator)
                if (name == "ceiling") != negated:
                    n = self.hoist(arith.AddOp, {}, [n, self.im.const(d - 1)])
                quotient = self.hoist(arith.DivOp, {}, [n, self.im.const(d)])
                return self.hoist(arith.SubOp, {}, [self.im.const(0), quotient]) if negated else quotient
        divided = self._divided_size(size)
        if divided is not None:
            return divided
        raise error(self.kernel.location, f"the size {size} is not the size of an axis of the kernel's buffers: dynamic shapes like this are not supported yet (docs/dynamic-shapes.md)")

    def _divided_size(self, size) -> Value | None:
        """A size no axis has, where an axis holds a multiple of it: that
        axis' size divided by the factor, when the kernel can compute the
        factor. (The B of a [4*B, S, 16] buffer; the S of a [B*S, 192] one
        next to a [B, ...] one: a head split read from a flat projection.)"""
        from fusecc.compiler.dims import sympy

        if size in self._dividing:
            return None
        multiples = []  # (factor, the multiple): constant factors first (legalize guards a division by a size)
        for arg in self.kernel.body.args:
            for d in arg.type.shape if isinstance(arg.type, MemRefType) else ():
                if type(d) is not int:
                    factor, denominator = sympy().cancel(d / size).as_numer_denom()
                    if denominator == 1 and not size.free_symbols & factor.free_symbols:
                        multiples.append((not factor.is_Integer, len(multiples), factor, d))
        self._dividing.add(size)
        try:
            for _, _, factor, d in sorted(multiples):
                try:
                    divisor = self.index(_int_or(factor))
                except DiagnosticError:  # a factor this kernel cannot compute either
                    continue
                return self.hoist(arith.DivOp, {}, [self.runtime_size(d), divisor])
            return None
        finally:
            self._dividing.discard(size)

    def named(self, value: Value, hint: str) -> Value:
        if value.name_hint is None and value.defining_op is not None and not isinstance(value.defining_op, arith.ConstantOp):
            value.name_hint = hint
        return value

    def cmp(self, predicate: str, a: IndexLike, b: IndexLike) -> Value:
        return self.b.create(arith.CmpOp, [self.index(a), self.index(b)], {"predicate": predicate}).result

    def lt(self, a: IndexLike, b: IndexLike) -> Value:
        return self.cmp("lt", a, b)

    def both(self, a: Value | None, b: Value | None) -> Value | None:
        """Conjunction of two optional i1 guards."""
        if a is None or b is None:
            return a if b is None else b
        return self.b.create(arith.AndOp, [a, b]).result

    def min_index(self, a: IndexLike, b: IndexLike) -> Value:
        ka = a if isinstance(a, int) else self.im.value_of(a)
        kb = b if isinstance(b, int) else self.im.value_of(b)
        if ka is not None and kb is not None:
            return self.im.const(min(ka, kb))
        return self.b.create(arith.MinOp, [self.index(a), self.index(b)]).result

    def sub_index(self, a: IndexLike, b: int) -> Value:
        a = self.index(a)
        if type(b) is not int:  # a dynamic size
            return self.b.create(arith.SubOp, [a, self.index(b)]).result
        known = self.im.value_of(a)
        if known is not None or not b:
            return self.im.const(known - b) if known is not None else a
        return self.b.create(arith.SubOp, [a, self.im.const(b)]).result

    def constant(self, value, t: ScalarType) -> Value:
        return self.s.const(value, t)

    # --- memory ------------------------------------------------------------------
    def load(self, buffer: Value, idx: Sequence[IndexLike], guard: Value | None = None) -> Value:
        operands = [buffer, *(self.index(i) for i in idx)] + ([guard] if guard is not None else [])
        return self.b.create(loop.LoadOp, operands, result_types=[buffer.type.element_type]).result

    def store(self, value: Value, buffer: Value, idx: Sequence[IndexLike], guard: Value | None = None) -> None:
        operands = [value, buffer, *(self.index(i) for i in idx)] + ([guard] if guard is not None else [])
        self.b.create(loop.StoreOp, operands)

    def alloc(self, t: MemRefType, hint: str) -> Value:
        """A kernel-local buffer. Shared buffers (GPU) and the local buffers
        of a CPU kernel go to the top of the outer loop's body: once per
        block, once per worker iteration."""
        op = loop.AllocOp([], [t], {}, 0, self.kernel.location)
        hoisted = t.memory_space == "shared" or not self.hw.is_gpu
        if hoisted and self._outer_body is not None:
            anchor = self._outer_body.first_op
            while isinstance(anchor, loop.AllocOp):
                anchor = anchor.next_op
            InsertionPoint(self._outer_body, anchor).insert(op)
        elif t.memory_space == "shared":
            raise ValueError("shared buffers need the GPU block loop")
        else:
            self.b.insert(op)
        op.result.name_hint = hint
        return op.result

    # --- structured control flow ------------------------------------------------
    def _in_block(self, block, body: Callable[[], Sequence[Value] | None]):
        saved = self.b.insertion_point
        self.b.set_insertion_point(InsertionPoint.at_end(block))
        try:
            results = body()
            self.b.create(loop.YieldOp, list(results or []))
        finally:
            self.b.set_insertion_point(saved)

    def parallel(self, upper: Sequence[int], mapping: Sequence[str], body: Callable[..., None], names: Sequence[str] = ()) -> loop.ParallelOp:
        upper = [u if isinstance(u, (int, Value)) else self.index(u) for u in upper]  # a dynamic size: its value
        op = self.b.insert(loop.ParallelOp.build(upper, list(mapping), self.kernel.location))
        for arg, name in zip(op.body.args, names):
            arg.name_hint = name
        self._in_block(op.body, lambda: body(*op.body.args))
        return op

    def for_(
        self,
        lower: IndexLike,
        upper: IndexLike,
        step: IndexLike,
        body: Callable[..., Sequence[Value] | None],
        inits: Sequence[Value] = (),
        name: str = "j",
        unroll: int | None = None,
    ) -> list[Value]:
        """`loop.for`; `body(iv, *iter_args)` returns the next iter values."""
        op = self.b.insert(loop.ForOp.build(self.index(lower), self.index(upper), self.index(step), list(inits), self.kernel.location))
        if unroll is not None:
            op.attributes["unroll"] = A.IntegerAttr(unroll)
        op.body.args[0].name_hint = name
        for arg in op.body.args[1:]:
            arg.name_hint = "acc"
        self._in_block(op.body, lambda: body(*op.body.args))
        return list(op.results)

    def if_(
        self,
        condition: Value,
        then: Callable[[], Sequence[Value] | None],
        otherwise: Callable[[], Sequence[Value] | None] | None = None,
        result_types: Sequence[ScalarType] = (),
    ) -> list[Value]:
        op = self.b.insert(loop.IfOp.build(condition, list(result_types), self.kernel.location))
        self._in_block(op.then_block, then)
        self._in_block(op.else_block, otherwise or (lambda: None))
        return list(op.results)

    # --- GPU cooperation -----------------------------------------------------------
    def shuffle_xor(self, value: Value, offset: int) -> Value:
        return self.b.create(loop.ShuffleXorOp, [value], {"offset": offset}).result


# --------------------------------------------------------------------------- parts and skeletons


@dataclass
class Part:
    """`units` iterations of the kernel's outer (block or worker) loop.

    `emit(kb, unit)` builds the part's body at block (GPU) or worker (CPU)
    level for the part-local unit index `unit`; on the GPU it opens exactly
    one thread loop with `threads(kb, body)`."""

    units: int
    emit: Callable[[KernelBuilder, Value], None]


def build_kernel(kb: KernelBuilder, parts: Sequence[Part], threads: int = 1) -> loop.KernelOp:
    """Wraps `parts` in the GPU or CPU skeleton of `kb.kernel` and returns it."""
    parts = [p for p in parts if type(p.units) is not int or p.units > 0]  # a dynamic count of units may be 0: the loop runs none
    total = sum(p.units for p in parts)
    gpu = kb.hw.is_gpu

    def outer(unit: Value) -> None:
        kb._outer_body = kb.b.insertion_point.block
        dispatch(kb, parts, unit, 0)

    if type(total) is not int:
        kb.parallel([kb.index(total)], ["block.x" if gpu else "worker"], outer, ["block" if gpu else "unit"])
    elif total > 0:
        kb.parallel([total], ["block.x" if gpu else "worker"], outer, ["block" if gpu else "unit"])
    kb.b.create(loop.ReturnOp)
    prune(kb.kernel)
    place_kernel_barriers(kb.kernel)
    return kb.kernel


def place_kernel_barriers(kernel: loop.KernelOp) -> None:
    """Templates write no barriers: the barrier pass places them where the
    kernel's shared memory needs them (again after memory planning, for
    arguments a launch makes overlap)."""
    if kernel.is_gpu:
        place_barriers_in(kernel)


def prune(kernel: loop.KernelOp) -> None:
    """Erase pure ops whose results are unused (index math the templates
    asked for but did not need)."""
    for op in reversed(kernel.walk(include_self=False)):
        if op.results and op.has_trait(Pure) and not any(r.has_uses() for r in op.results):
            op.erase()


def dispatch(kb: KernelBuilder, parts: Sequence[Part], unit: Value, start: int) -> None:
    """Run the part that owns `unit` (an index counted from `start`)."""
    first, rest = parts[0], parts[1:]
    local = kb.sub_index(unit, start)
    if not rest:
        first.emit(kb, local)
        return
    end = start + first.units
    kb.if_(kb.lt(unit, end), lambda: first.emit(kb, local), lambda: dispatch(kb, rest, unit, end))


def threads(kb: KernelBuilder, count: int, body: Callable[[Value], None]) -> None:
    """The thread loop of a GPU part."""
    kb.parallel([count], ["thread.x"], body, ["tid"])


__all__ = [
    "KernelBuilder",
    "Part",
    "build_kernel",
    "ceil_div",
    "compute_type",
    "dispatch",
    "i1",
    "index",
    "next_pow2",
    "product",
    "threads",
]
