"""Hand-written CPU loop IR for the benchmark patterns, and small kernels
that exercise each construct of the LLVM emitter.

These are the loop structures the CPU backend compiles to fast code (see
docs/cpu-target.md): a `worker` loop over rows or tiles on the outside, a
`vector` loop over contiguous elements inside, reductions as per-lane
partial sums (a vector loop around a sequential `loop.for`), matmuls as a
register tile (a vector loop over NR columns around a `loop.for` over K
that carries MR accumulators). Each builder returns a verified module with
kernels and a `loop.schedule @main`; `reference(...)` functions give the
numbers numpy computes for the same pattern.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Sequence

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import MemRefType, ScalarType, f32, index
from fusecc.compiler.verifier import verify
from fusecc.dialects import arith, loop
from fusecc.dialects import math as m
from fusecc.dialects.builtin import ModuleOp
from fusecc.dialects.tensor import formulas
from fusecc.passes.lowering.scalar_formulas import FormulaScalars, Scalars


def memref(*shape_and_type) -> MemRefType:
    *shape, t = shape_and_type
    return MemRefType(tuple(shape), t)


class Writer:
    """A small front end over the compiler's builder for writing loop IR."""

    def __init__(self):
        self.b = Builder()
        self.ops: list[Operation] = []

    # --- structure ---------------------------------------------------------------
    @contextmanager
    def kernel(self, name: str, arg_types: Sequence, kind: str = "hand-written"):
        op = loop.KernelOp.build(name, list(arg_types), {"kind": kind})
        self.ops.append(op)
        saved = self.b.insertion_point
        self.b.set_insertion_point(InsertionPoint.at_end(op.body))
        yield list(op.body.args)
        self.b.insert(loop.ReturnOp())
        self.b.set_insertion_point(saved)

    @contextmanager
    def parallel(self, upper: Sequence[int], mapping: Sequence[str]):
        op = self.b.insert(loop.ParallelOp.build(list(upper), list(mapping)))
        saved = self.b.insertion_point
        self.b.set_insertion_point(InsertionPoint.at_end(op.body))
        yield list(op.body.args)
        self.b.insert(loop.YieldOp())
        self.b.set_insertion_point(saved)

    def for_(self, lower, upper, step, inits: Sequence[Value], body: Callable, unroll: int | None = None) -> list[Value]:
        """body(iv, *carried) -> the next carried values."""
        op = self.b.insert(loop.ForOp.build(self.ix(lower), self.ix(upper), self.ix(step), list(inits)))
        if unroll:
            op.attributes["unroll"] = A.IntegerAttr(unroll)
        saved = self.b.insertion_point
        self.b.set_insertion_point(InsertionPoint.at_end(op.body))
        yielded = body(*op.body.args) or []
        self.b.insert(loop.YieldOp.create(list(yielded)))
        self.b.set_insertion_point(saved)
        return list(op.results)

    def if_(self, cond: Value, then: Callable, otherwise: Callable, result_types=()) -> list[Value]:
        op = self.b.insert(loop.IfOp.build(cond, list(result_types)))
        saved = self.b.insertion_point
        for block, fn in ((op.then_block, then), (op.else_block, otherwise)):
            self.b.set_insertion_point(InsertionPoint.at_end(block))
            self.b.insert(loop.YieldOp.create(list(fn() or [])))
        self.b.set_insertion_point(saved)
        return list(op.results)

    def module(self, schedule: Operation | None = None) -> ModuleOp:
        module = ModuleOp.build(self.ops + ([schedule] if schedule is not None else []))
        verify(module)
        return module

    # --- values ------------------------------------------------------------------
    def c(self, value, t: ScalarType = f32) -> Value:
        return self.b.insert(arith.ConstantOp.of(value, t)).result

    def ix(self, value) -> Value:
        return value if isinstance(value, Value) else self.c(int(value), index)

    def _op(self, cls, *operands, **attrs) -> Value:
        operands = [self.ix(v) if isinstance(v, int) else v for v in operands]
        return self.b.create(cls, operands, attrs or None).result

    def add(self, a, b):
        return self._op(arith.AddOp, a, b)

    def sub(self, a, b):
        return self._op(arith.SubOp, a, b)

    def mul(self, a, b):
        return self._op(arith.MulOp, a, b)

    def div(self, a, b):
        return self._op(arith.DivOp, a, b)

    def rem(self, a, b):
        return self._op(arith.RemOp, a, b)

    def max(self, a, b):
        return self._op(arith.MaxOp, a, b)

    def min(self, a, b):
        return self._op(arith.MinOp, a, b)

    def binary(self, name: str, a, b):
        """`and`, `or`, `xor` (integers) or `pow` (floats)."""
        cls = {"and": arith.AndOp, "or": arith.OrOp, "xor": arith.XorOp, "pow": m.PowOp}[name]
        return self._op(cls, a, b)

    def cmp(self, predicate: str, a, b):
        return self._op(arith.CmpOp, a, b, predicate=predicate)

    def select(self, c, a, b):
        return self._op(arith.SelectOp, c, a, b)

    def cast(self, x: Value, t: ScalarType) -> Value:
        return self.b.create(arith.CastOp, [x], None, [t]).result

    def unary(self, name: str, x: Value) -> Value:
        cls = {"exp": m.ExpOp, "log": m.LogOp, "sqrt": m.SqrtOp, "rsqrt": m.RsqrtOp, "tanh": m.TanhOp, "erf": m.ErfOp, "abs": m.AbsOp, "neg": arith.NegOp}[name]
        return self._op(cls, x)

    def load(self, buffer: Value, *indices, guard: Value | None = None, padding=None) -> Value:
        operands = [buffer] + [self.ix(i) for i in indices] + ([guard] if guard is not None else [])
        attrs = {}
        if padding is not None:
            attrs["padding"] = A.FloatAttr(float(padding), buffer.type.element_type) if buffer.type.element_type.is_float else A.IntegerAttr(int(padding), buffer.type.element_type)
        op = loop.LoadOp(operands, [buffer.type.element_type], attrs)
        return self.b.insert(op).result

    def store(self, value: Value, buffer: Value, *indices, guard: Value | None = None) -> None:
        operands = [value, buffer] + [self.ix(i) for i in indices] + ([guard] if guard is not None else [])
        self.b.insert(loop.StoreOp(operands, [], {}))

    def alloc(self, t: MemRefType) -> Value:
        return self.b.insert(loop.AllocOp([], [t], {})).result

    # --- formulas ------------------------------------------------------------------
    def gelu(self, x: Value, approximate: str = "tanh") -> Value:
        """The lowering's gelu (the op's one formula), built here."""
        return formulas.gelu(FormulaScalars(Scalars(self.b)), x, approximate)

    def row_reduce(self, row_length: int, partials: int, init: float, combine: Callable, element: Callable) -> Value:
        """combine over j in [0, row_length) of element(j), as per-lane partial
        sums: lane v of a `partials`-wide vector loop accumulates j = v, v +
        partials, ... in order (a sequential loop.for inside the vector loop),
        then the partials are combined in lane order."""
        scratch = self.alloc(MemRefType((partials,), f32, "local"))
        start = self.c(init)
        with self.parallel([partials], ["vector"]) as (lane,):
            def step(j, acc):
                column = self.add(j, lane)
                if row_length % partials:
                    guard = self.cmp("lt", column, self.ix(row_length))
                    value = self.if_(guard, lambda: [element(column)], lambda: [start], [f32])[0]
                else:
                    value = element(column)
                return [combine(acc, value)]

            (total,) = self.for_(0, row_length, partials, [start], step)
            self.store(total, scratch, lane)
        (result,) = self.for_(0, partials, 1, [start], lambda k, acc: [combine(acc, self.load(scratch, k))])
        return result


class ScheduleWriter:
    """`loop.schedule @main` over named inputs/outputs and arena buffers."""

    def __init__(self, inputs: Sequence[tuple[str, MemRefType]], outputs: Sequence[tuple[str, MemRefType]]):
        self.op = loop.ScheduleOp.build("main", [t for _, t in inputs], [t for _, t in outputs], [n for n, _ in inputs], [n for n, _ in outputs])
        self.b = Builder(InsertionPoint.at_end(self.op.body))
        self.args = {name: arg for (name, _), arg in zip(list(inputs) + list(outputs), self.op.body.args)}
        self.arena = 0

    def scratch(self, t: MemRefType) -> Value:
        offset = -(-self.arena // 64) * 64
        self.arena = offset + t.byte_size
        return self.b.insert(loop.ArenaViewOp([], [t], {"offset": A.IntegerAttr(offset)})).result

    def launch(self, kernel: Operation, *args: Value) -> None:
        self.b.insert(loop.LaunchOp(list(args), [], {"kernel": A.SymbolRefAttr(kernel.sym_name)}))

    def finish(self) -> Operation:
        self.b.insert(loop.ReturnOp())
        self.op.attributes["arena_size"] = A.IntegerAttr(self.arena)
        return self.op


def _single_kernel_module(w: Writer, kernel: Operation, inputs, outputs) -> ModuleOp:
    s = ScheduleWriter(inputs, outputs)
    s.launch(kernel, *s.op.body.args)
    return w.module(s.finish())


# --------------------------------------------------------------------------- benchmark patterns


def bias_gelu_residual(rows: int, cols: int, approximate: str = "tanh") -> ModuleOp:
    """out = gelu(x + bias) + residual: worker over rows, vector over columns."""
    x_t, b_t = memref(rows, cols, f32), memref(cols, f32)
    w = Writer()
    with w.kernel("bias_gelu_residual", [x_t, b_t, x_t, x_t]) as (x, bias, res, out):
        with w.parallel([rows], ["worker"]) as (r,):
            with w.parallel([cols], ["vector"]) as (c,):
                g = w.gelu(w.add(w.load(x, r, c), w.load(bias, c)), approximate)
                w.store(w.add(g, w.load(res, r, c)), out, r, c)
    return _single_kernel_module(w, w.ops[-1], [("x", x_t), ("bias", b_t), ("residual", x_t)], [("out", x_t)])


def layernorm_gelu(rows: int, cols: int, partials: int = 64, eps: float = 1e-5, approximate: str = "tanh") -> ModuleOp:
    """gelu(layernorm(x) * gamma + beta): per row a mean pass and a variance
    pass (per-lane partial sums), then one vector pass writing the output."""
    x_t, v_t = memref(rows, cols, f32), memref(cols, f32)
    w = Writer()
    with w.kernel("layernorm_gelu", [x_t, v_t, v_t, x_t]) as (x, gamma, beta, out):
        with w.parallel([rows], ["worker"]) as (r,):
            total = w.row_reduce(cols, partials, 0.0, w.add, lambda j: w.load(x, r, j))
            mean = w.div(total, w.c(float(cols)))

            def squared(j):
                d = w.sub(w.load(x, r, j), mean)
                return w.mul(d, d)

            var = w.div(w.row_reduce(cols, partials, 0.0, w.add, squared), w.c(float(cols)))
            rstd = w.unary("rsqrt", w.add(var, w.c(eps)))
            with w.parallel([cols], ["vector"]) as (c,):
                y = w.mul(w.sub(w.load(x, r, c), mean), rstd)
                y = w.add(w.mul(y, w.load(gamma, c)), w.load(beta, c))
                w.store(w.gelu(y, approximate), out, r, c)
    return _single_kernel_module(w, w.ops[-1], [("x", x_t), ("gamma", v_t), ("beta", v_t)], [("out", x_t)])


def softmax(rows: int, cols: int, partials: int = 64) -> ModuleOp:
    """Row softmax: a max pass, a pass storing exp(x - max) while summing it,
    and a pass scaling by 1/sum (re-reading the row from cache)."""
    x_t = memref(rows, cols, f32)
    w = Writer()
    with w.kernel("softmax", [x_t, x_t]) as (x, out):
        with w.parallel([rows], ["worker"]) as (r,):
            row_max = w.row_reduce(cols, partials, float("-inf"), w.max, lambda j: w.load(x, r, j))

            def exp_and_store(j):
                e = w.unary("exp", w.sub(w.load(x, r, j), row_max))
                w.store(e, out, r, j)
                return e

            total = w.row_reduce(cols, partials, 0.0, w.add, exp_and_store)
            inverse = w.div(w.c(1.0), total)
            with w.parallel([cols], ["vector"]) as (c,):
                w.store(w.mul(w.load(out, r, c), inverse), out, r, c)
    return _single_kernel_module(w, w.ops[-1], [("x", x_t)], [("out", x_t)])


def matmul_tile(w: Writer, a: Value, b: Value, i0: Value, j0: Value, k_extent: int, mr: int, nr: int, epilogue: Callable, packed: bool = False, jt: Value | None = None) -> None:
    """The register tile C[i0:i0+mr, j0:j0+nr] = sum_k A[i, k] B[k, j]: a
    vector loop over the nr columns around a loop.for over K carrying mr
    accumulators (each a row of the tile), then epilogue(row, col, acc)."""
    with w.parallel([nr], ["vector"]) as (v,):
        col = w.add(j0, v)
        rows = [w.add(i0, w.ix(r)) for r in range(mr)]

        def step(k, *acc):
            bv = w.load(b, jt, k, v) if packed else w.load(b, k, col)
            return [w.add(acc[r], w.mul(w.load(a, rows[r], k), bv)) for r in range(mr)]

        accs = w.for_(0, k_extent, 1, [w.c(0.0)] * mr, step)
        for r in range(mr):
            epilogue(rows[r], col, accs[r])


def matmul_bias(m_: int, k_: int, n_: int, activation: str | None = "gelu", mr: int = 8, nr: int = 32, packed: bool = False, name: str = "matmul_bias", w: Writer | None = None):
    """C = act(A @ B + bias). Worker over column panels of nr; inside, the
    row tiles of mr one after another, so a panel of B (K x nr) stays in
    cache across the whole column of tiles. With `packed`, B comes as
    [N/nr, K, nr] (one contiguous panel per worker iteration)."""
    assert m_ % mr == 0 and n_ % nr == 0, "hand-written tiles need exact multiples"
    a_t, c_t, bias_t = memref(m_, k_, f32), memref(m_, n_, f32), memref(n_, f32)
    b_t = memref(n_ // nr, k_, nr, f32) if packed else memref(k_, n_, f32)
    own = w is None
    w = w or Writer()
    with w.kernel(name, [a_t, b_t, bias_t, c_t], kind="matmul") as (a, b, bias, out):
        with w.parallel([n_ // nr], ["worker"]) as (jt,):
            j0 = w.mul(jt, w.ix(nr))
            with w.parallel([m_ // mr], ["sequential"]) as (it,):
                i0 = w.mul(it, w.ix(mr))

                def epilogue(row, col, acc):
                    y = w.add(acc, w.load(bias, col))
                    if activation == "gelu":
                        y = w.gelu(y)
                    w.store(y, out, row, col)

                matmul_tile(w, a, b, i0, j0, k_, mr, nr, epilogue, packed, jt)
    kernel = w.ops[-1]
    if not own:
        return kernel
    return _single_kernel_module(w, kernel, [("a", a_t), ("b", b_t), ("bias", bias_t)], [("c", c_t)])


def pack_panels(b: np.ndarray, nr: int) -> np.ndarray:
    """B [K, N] as [N/nr, K, nr], the layout matmul_bias(packed=True) reads."""
    k_, n_ = b.shape
    return np.ascontiguousarray(b.reshape(k_, n_ // nr, nr).transpose(1, 0, 2))


def mlp(m_: int, d: int, hidden: int, mr: int = 8, nr: int = 32) -> ModuleOp:
    """gelu(x @ w1 + b1) @ w2 + b2: two matmul kernels, the hidden
    activation in the arena."""
    w = Writer()
    up = matmul_bias(m_, d, hidden, "gelu", mr, nr, name="mlp_up", w=w)
    down = matmul_bias(m_, hidden, d, None, mr, nr, name="mlp_down", w=w)
    x_t, h_t = memref(m_, d, f32), memref(m_, hidden, f32)
    s = ScheduleWriter(
        [("x", x_t), ("w1", memref(d, hidden, f32)), ("b1", memref(hidden, f32)), ("w2", memref(hidden, d, f32)), ("b2", memref(d, f32))],
        [("y", x_t)],
    )
    x, w1, b1, w2, b2, y = s.op.body.args
    h = s.scratch(h_t)
    s.launch(up, x, w1, b1, h)
    s.launch(down, h, w2, b2, y)
    return w.module(s.finish())


def attention(heads: int, seq: int, dim: int, partials: int = 64) -> ModuleOp:
    """softmax(q k^T * scale) v per head (batch 1). A first kernel transposes
    K to [H, D, S] so that scores are contiguous in the key index; then per
    (head, query row): scores in a local buffer (vector over keys, loop over
    D), a softmax over it, and the context (vector over D, loop over keys)."""
    qkv_t, kt_t = memref(heads, seq, dim, f32), memref(heads, dim, seq, f32)
    scale = 1.0 / math.sqrt(dim)
    w = Writer()
    with w.kernel("transpose_k", [qkv_t, kt_t], kind="injective") as (k, kt):
        with w.parallel([heads * dim], ["worker"]) as (hd,):
            h, d = w.div(hd, w.ix(dim)), w.rem(hd, w.ix(dim))
            with w.parallel([seq], ["vector"]) as (s_,):
                w.store(w.load(k, h, s_, d), kt, h, d, s_)
    transpose = w.ops[-1]
    with w.kernel("attention_rows", [qkv_t, kt_t, qkv_t, qkv_t], kind="attention") as (q, kt, v, out):
        with w.parallel([heads * seq], ["worker"]) as (hs,):
            h, i = w.div(hs, w.ix(seq)), w.rem(hs, w.ix(seq))
            scores = w.alloc(MemRefType((seq,), f32, "local"))
            with w.parallel([seq], ["vector"]) as (j,):
                (dot,) = w.for_(0, dim, 1, [w.c(0.0)], lambda d, acc: [w.add(acc, w.mul(w.load(q, h, i, d), w.load(kt, h, d, j)))])
                w.store(w.mul(dot, w.c(scale)), scores, j)
            lanes = min(partials, seq)
            row_max = w.row_reduce(seq, lanes, float("-inf"), w.max, lambda j: w.load(scores, j))

            def exp_and_store(j):
                e = w.unary("exp", w.sub(w.load(scores, j), row_max))
                w.store(e, scores, j)
                return e

            total = w.row_reduce(seq, lanes, 0.0, w.add, exp_and_store)
            inverse = w.div(w.c(1.0), total)
            with w.parallel([dim], ["vector"]) as (d,):
                (ctx,) = w.for_(0, seq, 1, [w.c(0.0)], lambda j, acc: [w.add(acc, w.mul(w.load(scores, j), w.load(v, h, j, d)))])
                w.store(w.mul(ctx, inverse), out, h, i, d)
    rows = w.ops[-1]
    s = ScheduleWriter([("q", qkv_t), ("k", qkv_t), ("v", qkv_t)], [("out", qkv_t)])
    q, k, v, out = s.op.body.args
    kt = s.scratch(kt_t)
    s.launch(transpose, k, kt)
    s.launch(rows, q, kt, v, out)
    return w.module(s.finish())


# --------------------------------------------------------------------------- numpy references


def gelu_reference(x: np.ndarray, approximate: str = "tanh") -> np.ndarray:
    return formulas.gelu(formulas.NUMPY64, np.asarray(x, np.float64), approximate)


def reference(pattern: str, *args, **options) -> np.ndarray:
    """The pattern computed by numpy in float64, with the ops' own formulas
    (`dialects/tensor/formulas.py`)."""
    f = formulas.NUMPY64
    a = [np.asarray(x, dtype=np.float64) for x in args]
    if pattern == "bias_gelu_residual":
        return gelu_reference(a[0] + a[1], options.get("approximate", "tanh")) + a[2]
    if pattern == "layernorm_gelu":
        x, gamma, beta = a
        normed = formulas.layernorm(f, x, gamma, beta, options.get("eps", 1e-5), x.ndim - 1)
        return gelu_reference(normed, options.get("approximate", "tanh"))
    if pattern == "softmax":
        return formulas.softmax(f, a[0], a[0].ndim - 1)
    if pattern == "matmul_bias":
        y = a[0] @ a[1] + a[2]
        return gelu_reference(y) if options.get("activation", "gelu") == "gelu" else y
    if pattern == "mlp":
        x, w1, b1, w2, b2 = a
        return gelu_reference(x @ w1 + b1) @ w2 + b2
    if pattern == "attention":
        q, k, v = a
        rows, cols = q.shape[-2], k.shape[-2]
        return formulas.attention(f, q, k, v, None, 1 / math.sqrt(q.shape[-1]), False, rows, cols, q.ndim - 1)
    raise ValueError(pattern)
