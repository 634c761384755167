"""From tensor values to scalar loop IR: the core of fused kernel generation.

Given a fusion group's body and an index into one of its values, the
emitter writes the scalar `arith`/`math`/`loop.load` code that computes that
element, following producers back to the group's inputs:

  * elementwise ops become their scalar formula (one table, `SCALAR_FORMULAS`
    in scalar_formulas.py),
  * broadcasting and injective (layout) ops only transform the index
    (transpose permutes it, reshape re-linearises it, slice scales and
    shifts it, concat selects an input by range, broadcast drops or zeroes
    dimensions),
  * group inputs become loads from their buffers,
  * constants become scalars (splats) or loads from a `loop.constant`,
  * values the template computes itself (a reduction's result, a matmul's
    accumulator) are supplied through `bind`, so epilogues are emitted by
    the same code as everything else.

Intermediates therefore never reach memory: they are recomputed per element
as scalars (registers). An element computed twice at the same index is
emitted once (memoised on the value and the index values).
"""

from __future__ import annotations

from typing import Callable, Sequence

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.traits import IsolatedFromAbove
from fusecc.compiler.types import TensorType, bf16, f16, f32, index
from fusecc.dialects import arith, loop
from fusecc.dialects import tensor as T
from fusecc.passes.lowering.scalar_formulas import (  # noqa: F401 (_number_attr: re-exported for kernel_builder)
    SCALAR_FORMULAS,
    Scalars,
    _compute_type,
    _number_attr,
)
from fusecc.passes.tiling.shapes import concat_boundaries  # noqa: F401 (re-exported: the templates import it here)

Index = Sequence[Value]


class LoweringError(Exception):
    """The emitter met an op it cannot express per element; names the op."""


class IndexMath:
    """Index arithmetic that folds constants as it goes, so simple kernels
    stay readable without a later canonicalisation.

    It also keeps what a template knows about an index's range (`assume`):
    a concatenation read at an index known to fall in one piece reads that
    piece directly, with no branch (`ScalarEmitter._layout_concat`)."""

    def __init__(self, builder: Builder):
        self.b = builder
        self.known: dict[Value, int] = {}
        self._constants: dict[int, Value] = {}
        self._computed: dict[tuple, Value] = {}
        self._offsets: dict[Value, tuple[Value, int]] = {}  # v = base + constant
        self._ranges: dict[Value, tuple[int, int]] = {}

    def const(self, value: int) -> Value:
        found = self._constants.get(value)
        if found is not None and visible_here(self.b, found):
            return found
        v = self.b.create(arith.ConstantOp, [], {"value": A.IntegerAttr(value, index)}).result
        self.known[v] = value
        self._constants[value] = v
        return v

    def value_of(self, v: Value) -> int | None:
        return self.known.get(v)

    def _op(self, op_class, a: Value, b: Value, predicate: str | None = None) -> Value:
        """`a op b`, reusing the same computation where it is visible (index
        expressions repeat a lot: every access of a tile recomputes its row)."""
        key = (op_class, a, b, predicate)
        found = self._computed.get(key)
        if found is not None and visible_here(self.b, found):
            return found
        result = self.b.create(op_class, [a, b], {"predicate": predicate} if predicate else None).result
        self._computed[key] = result
        return result

    def add(self, a: Value, b: Value) -> Value:
        ka, kb = self.known.get(a), self.known.get(b)
        if ka is not None and kb is not None:
            return self.const(ka + kb)
        if ka is not None:
            a, b, ka, kb = b, a, kb, ka
        if kb == 0:
            return a
        if kb is not None and a in self._offsets:  # (x + c) + d = x + (c + d)
            base, c = self._offsets[a]
            return self.add(base, self.const(c + kb))
        result = self._op(arith.AddOp, a, b)
        if kb is not None:
            self._offsets[result] = (a, kb)
        return result

    def assume(self, v: Value, lower: int, upper: int) -> Value:
        """Record that `v` lies in [lower, upper) wherever the template reads
        memory with it (under the guards it emits there); returns `v`."""
        self._ranges[v] = (lower, upper)
        return v

    def range_of(self, v: Value) -> tuple[int, int] | None:
        """[lower, upper) of an index: a constant, an assumed range, or one
        shifted by a constant."""
        k = self.known.get(v)
        if k is not None:
            return k, k + 1
        found = self._ranges.get(v)
        if found is None and v in self._offsets:
            base, c = self._offsets[v]
            inner = self.range_of(base)
            found = None if inner is None else (inner[0] + c, inner[1] + c)
        return found

    def mul(self, a: Value, b: Value) -> Value:
        ka, kb = self.known.get(a), self.known.get(b)
        if ka is not None and kb is not None:
            return self.const(ka * kb)
        if ka == 1:
            return b
        if kb == 1:
            return a
        if ka == 0 or kb == 0:
            return self.const(0)
        return self._op(arith.MulOp, a, b)

    def div(self, a: Value, divisor: int) -> Value:
        ka = self.known.get(a)
        if ka is not None:
            return self.const(ka // divisor)
        if divisor == 1:
            return a
        return self._op(arith.DivOp, a, self.const(divisor))

    def rem(self, a: Value, divisor: int) -> Value:
        ka = self.known.get(a)
        if ka is not None:
            return self.const(ka % divisor)
        if divisor == 1:
            return self.const(0)
        return self._op(arith.RemOp, a, self.const(divisor))

    def linearize(self, idx: Index, shape: Sequence[int]) -> Value:
        flat = self.const(0)
        for i, d in zip(idx, shape):
            flat = self.add(self.mul(flat, self.const(d)), i)
        return flat

    def delinearize(self, flat: Value, shape: Sequence[int]) -> list[Value]:
        out = []
        for axis in range(len(shape) - 1, -1, -1):
            d = shape[axis]
            out.append(self.rem(flat, d) if axis > 0 else flat)
            if axis > 0:
                flat = self.div(flat, d)
        out.reverse()
        return out

    def less_than(self, a: Value, bound: int) -> Value:
        return self._op(arith.CmpOp, a, self.const(bound), "lt")


def visible_here(builder: Builder, value: Value) -> bool:
    """May `value` be used at the builder's insertion point?

    Kernel templates only ever insert forward, so a value is usable when its
    block encloses the insertion block (within the same isolated op)."""
    home = value.parent_block
    block = builder.insertion_point.block
    while block is not None:
        if block is home:
            return True
        parent = block.parent_op
        if parent is None or parent.has_trait(IsolatedFromAbove):
            return False
        block = parent.parent
    return False


def reshape_groups(a: Sequence[int], b: Sequence[int]) -> list[tuple[slice, slice]]:
    """Runs of axes of `a` and `b` with equal products (the finest such
    split): a reshape only moves elements within each run, so a head split
    [B, S, H*D] -> [B, S, H, D] touches only the last axis."""
    if 0 in a or 0 in b:
        return [(slice(0, len(a)), slice(0, len(b)))]
    groups, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start = (i, j)
        pa, pb = a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if _divides(pa, pb):
                pa, i = pa * a[i], i + 1
            else:
                pb, j = pb * b[j], j + 1
        groups.append((slice(start[0], i), slice(start[1], j)))
    if i < len(a) or j < len(b):  # trailing axes of size 1
        if not groups:
            return [(slice(0, len(a)), slice(0, len(b)))]
        last = groups.pop()
        groups.append((slice(last[0].start, len(a)), slice(last[1].start, len(b))))
    return groups


def _divides(pa, pb) -> bool:
    """Is the run product `pa` the smaller one (it divides `pb`)? With `?`
    sizes (sympy products of dims) by divisibility, which a run ordering
    needs; for ints, by size."""
    if type(pa) is int and type(pb) is int:
        return pa < pb
    from fusecc.compiler.dims import sympy

    return sympy().cancel(pb / pa).as_numer_denom()[1] == 1


def reshape_index(idx: Index, from_shape: Sequence[int], to_shape: Sequence[int], im: IndexMath) -> list[Value]:
    """The index in `to_shape` of the element at `idx` in `from_shape` (same
    elements, row-major), re-linearising only the runs of axes that change."""
    out: list[Value] = []
    for f, t in reshape_groups(from_shape, to_shape):
        if from_shape[f] == to_shape[t]:
            out += idx[f]
        else:
            out += im.delinearize(im.linearize(idx[f], from_shape[f]), to_shape[t])
    return out


def broadcast_index(idx: Index, result_shape: Sequence[int], operand_shape: Sequence[int], im: IndexMath) -> list[Value]:
    """The operand element that numpy broadcasting reads for result index `idx`."""
    offset = len(result_shape) - len(operand_shape)
    return [im.const(0) if d == 1 and result_shape[offset + k] != 1 else idx[offset + k] for k, d in enumerate(operand_shape)]


# --------------------------------------------------------------------------- the emitter


class ScalarEmitter:
    """Emits the scalar computation of group-body values at given indices.

    `buffers` maps the group's block arguments to the memrefs they are read
    from; `bind(value, fn)` supplies values the template computes itself,
    as `fn(index) -> scalar`.
    """

    def __init__(self, builder: Builder, buffers: dict[Value, Value], im: IndexMath | None = None):
        self.b = builder
        self.buffers = dict(buffers)
        self.im = im or IndexMath(builder)
        self.s = Scalars(builder)
        self.bound: dict[Value, Callable[[Index], Value]] = {}
        self._memo: dict[tuple, Value] = {}
        self._constants: dict[Value, Value] = {}

    def bind(self, value: Value, fn: Callable[[Index], Value]) -> None:
        self.bound[value] = fn

    def at(self, value: Value, idx: Index) -> Value:
        """The scalar (in compute precision: f32 for floats) of `value[idx]`."""
        key = (value, tuple(idx))
        found = self._memo.get(key)
        if found is not None and visible_here(self.b, found):
            return found
        result = self._in_storage_precision(value, self._emit(value, list(idx)))
        self._memo[key] = result
        return result

    def _in_storage_precision(self, value: Value, scalar: Value) -> Value:
        """An f16/bf16 tensor value computed in f32 is rounded to its storage
        type where it is computed, as the reference rounds every op's result
        (docs/legalize.md, rule 1): `arith.cast` to the narrow type is the
        loop level's rounding op. Loads and casts from it are already exact."""
        storage = value.type.element_type if isinstance(value.type, TensorType) else None
        if storage not in (bf16, f16) or scalar.type is not f32:
            return scalar
        op = scalar.defining_op
        if isinstance(op, arith.CastOp) and op.input.type is storage:
            return scalar
        return self.s.cast(self.s.cast(scalar, storage), f32)

    def _emit(self, value: Value, idx: list[Value]) -> Value:
        fn = self.bound.get(value)
        if fn is not None:
            return fn(idx)
        buffer = self.buffers.get(value)
        if buffer is not None:
            return self.load(buffer, idx)
        op = value.defining_op
        if op is None:
            raise LoweringError(f"no buffer for a block argument of type {value.type}")
        if isinstance(op, T.ConstantOp):
            return self._constant(op, idx)
        formula = SCALAR_FORMULAS.get(op.name)
        if formula is not None:
            shape = op.result.type.shape
            operands = [self.at(v, broadcast_index(idx, shape, v.type.shape, self.im)) for v in op.operands]
            return formula(self.s, op, *operands)
        layout = getattr(self, "_layout_" + op.name.split(".")[1], None)
        if layout is not None and op.name.startswith("tensor."):
            return layout(op, idx)
        raise LoweringError(f"'{op.name}' at {op.location} cannot be computed element by element; the kernel template must bind it")

    def load(self, buffer: Value, idx: Index) -> Value:
        t = buffer.type
        raw = self.b.create(loop.LoadOp, [buffer, *idx], result_types=[t.element_type]).result
        if t.element_type.is_float and t.element_type is not f32:
            return self.s.cast(raw, f32)
        return raw

    def store(self, scalar: Value, buffer: Value, idx: Index, guard: Value | None = None) -> None:
        t = buffer.type
        if scalar.type is not t.element_type:
            scalar = self.s.cast(scalar, t.element_type)
        self.b.create(loop.StoreOp, [scalar, buffer, *idx, *([guard] if guard is not None else [])])

    def _constant(self, op: Operation, idx: list[Value]) -> Value:
        attr = op.attr("value")
        element = attr.type.element_type
        if attr.is_splat:
            return self.s.const(attr.splat_value(), _compute_type(element))
        buffer = self._constants.get(op.result)
        if buffer is None or not visible_here(self.b, buffer):
            buffer = self.constant_buffer(attr)
            self._constants[op.result] = buffer
        return self.load(buffer, idx)

    def constant_buffer(self, attr: A.DenseElementsAttr) -> Value:
        """A `loop.constant` holding `attr`, here (kernel builders hoist it)."""
        return self.b.create(loop.ConstantOp, [], {"value": attr}).result

    # --- layout ops: index maps ----------------------------------------------
    def _layout_transpose(self, op, idx):
        perm = op.attr("perm")
        source = [None] * len(perm)
        for out_axis, in_axis in enumerate(perm):
            source[in_axis] = idx[out_axis]
        return self.at(op.input, source)

    def _layout_reshape(self, op, idx):
        return self.at(op.input, reshape_index(idx, op.result.type.shape, op.input.type.shape, self.im))

    def _layout_broadcast_to(self, op, idx):
        return self.at(op.input, broadcast_index(idx, op.result.type.shape, op.input.type.shape, self.im))

    def _layout_slice(self, op, idx):
        source = []
        for i, axis in zip(idx, op.bounds()):
            source.append(self.im.add(self.im.mul(i, self.im.const(axis.step)), self.im.const(axis.start)))
        return self.at(op.input, source)

    def _layout_gather(self, op, idx):
        """data[..., clamp(indices[i...]), ...]: the index is loaded first,
        then wrapped (negative counts from the end) and clamped to the axis,
        tensor.gather's rule for indices out of range (`gather_index`)."""
        axis, rank = op.normalized_axis, op.indices.type.rank
        length = op.data.type.shape[axis]
        position = self.s.cast(self.at(op.indices, idx[axis : axis + rank]), index)
        im = self.im
        negative = self.b.create(arith.CmpOp, [position, im.const(0)], {"predicate": "lt"}).result
        wrapped = self.b.create(arith.SelectOp, [negative, im.add(position, im.const(length)), position]).result
        low = self.b.create(arith.MaxOp, [wrapped, im.const(0)]).result
        clamped = im.assume(self.b.create(arith.MinOp, [low, im.const(length - 1)]).result, 0, length)
        return self.at(op.data, [*idx[:axis], clamped, *idx[axis + rank :]])

    def _layout_concat(self, op, idx):
        axis = op.attr("axis") % op.result.type.rank
        pieces = list(op.inputs)
        # Select among the inputs by where idx[axis] falls; each branch loads
        # only its own input, so no load is ever out of bounds.
        return self._concat_from(op, pieces, idx, axis, 0)

    def _concat_from(self, op, pieces, idx, axis, start):
        first, rest = pieces[0], pieces[1:]
        end = start + first.type.shape[axis]
        known = self.im.range_of(idx[axis])
        if rest and known is not None and known[0] >= end:  # past this piece: no branch
            return self._concat_from(op, rest, idx, axis, end)
        local = list(idx)
        local[axis] = self.im.add(idx[axis], self.im.const(-start)) if start else idx[axis]
        if not rest or (known is not None and known[1] <= end):  # within this piece
            return self.at(first, local)
        inside = self.im.less_than(idx[axis], end)
        result_type = _compute_type(op.result.type.element_type)
        branch = self.b.insert(loop.IfOp.build(inside, [result_type]))
        saved = self.b.insertion_point
        self.b.set_insertion_point(InsertionPoint.at_end(branch.then_block))
        self.b.create(loop.YieldOp, [self.at(first, local)])
        self.b.set_insertion_point(InsertionPoint.at_end(branch.else_block))
        self.b.create(loop.YieldOp, [self._concat_from(op, rest, idx, axis, end)])
        self.b.set_insertion_point(saved)
        return branch.results[0]


def is_elementwise_computable(op: Operation) -> bool:
    """Can the emitter compute this op per element without help?"""
    return op.name in SCALAR_FORMULAS or isinstance(op, (T.ConstantOp, T.TransposeOp, T.ReshapeOp, T.BroadcastToOp, T.SliceOp, T.ConcatOp, T.GatherOp))


__all__ = [
    "IndexMath",
    "LoweringError",
    "SCALAR_FORMULAS",
    "ScalarEmitter",
    "Scalars",
    "broadcast_index",
    "concat_boundaries",
    "reshape_index",
    "is_elementwise_computable",
]
