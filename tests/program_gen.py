"""Random tensor programs built through the builder API, for property tests
and benchmarks.

    from program_gen import programs, random_program
    @given(programs(min_ops=30))            # a hypothesis strategy
    def test_x(program): program.module, program.inputs(seed) ...
    random_program(seed=1, num_ops=5000)    # plain random, for benchmarks

A program is one function `@main` over a few small tensors (f32, plus an
i32 one): elementwise chains whose shapes broadcast, splat and dense
constants (0, -0.0, 1 among them, so identities occur), reshapes,
transposes (often back to back), broadcast_to, casts, slices, concats,
reductions, matmuls, composites (softmax, layernorm, gelu, ...), cmp and
select, integer arithmetic, repeated ops (for CSE, some with swapped
operands) and unused ops (for DCE). Shapes stay small (at most
`MAX_ELEMENTS` elements) so that the reference interpreter runs a
60-op program in milliseconds.

Every choice goes through a `Chooser`, so the same generator serves
hypothesis (which then shrinks failures) and `random.Random`. Operands are
drawn mostly from the last few values, so programs are deep as well as
wide, and each step costs O(1): generating n ops is linear in n. Extend
`ProgramGenerator.KINDS` (a weight per op family) to steer it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.ir import Value
from fusecc.compiler.printer import print_op
from fusecc.compiler.types import FunctionType, TensorType, broadcast_shapes, f16, f32, i32
from fusecc.compiler.verifier import verify
from fusecc.dialects import tensor as T
from fusecc.dialects.builtin import ModuleOp
from fusecc.dialects.func import FuncOp, ReturnOp

MAX_ELEMENTS = 96
SPLAT_VALUES = (0.0, -0.0, 1.0, 0.5, 2.0, -1.5)


class Chooser:
    """Where random choices come from."""

    def integer(self, lo: int, hi: int) -> int:  # inclusive
        raise NotImplementedError

    def choice(self, items: Sequence):
        return items[self.integer(0, len(items) - 1)]

    def chance(self, percent: int) -> bool:
        return self.integer(0, 99) < percent


class RandomChooser(Chooser):
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def integer(self, lo, hi):
        return self.rng.randint(lo, hi)


class DrawChooser(Chooser):
    """Choices drawn by hypothesis, so that it can shrink them."""

    def __init__(self, draw):
        from hypothesis import strategies as st

        self.draw = draw
        self.st = st

    def integer(self, lo, hi):
        return self.draw(self.st.integers(lo, hi))


@dataclass
class Program:
    module: ModuleOp
    entry: str = "main"

    @property
    def function(self) -> FuncOp:
        return self.module.lookup(self.entry)

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        from fusecc.runtime.reference import random_input

        rng = np.random.default_rng(seed)
        return [random_input(t, rng) for t in self.function.function_type.inputs]

    @property
    def num_ops(self) -> int:
        return len(self.function.body)

    def __repr__(self) -> str:  # hypothesis shows failing examples with this
        return "\n" + print_op(self.module)


def factorizations(n: int, rank: int, chooser: Chooser) -> tuple[int, ...]:
    """A random shape of `rank` dims with product n."""
    dims = [1] * rank
    if rank == 0:
        return ()
    m, p = n, 2
    while m > 1:
        while m % p:
            p += 1
        dims[chooser.integer(0, rank - 1)] *= p
        m //= p
    return tuple(dims)


class ProgramGenerator:
    # op family -> weight
    KINDS = {
        "binary": 10,
        "binary_const": 5,
        "identity": 4,
        "unary": 7,
        "reshape": 4,
        "transpose": 4,
        "transpose_pair": 3,
        "broadcast": 3,
        "cast": 2,
        "reduce": 4,
        "slice": 2,
        "concat": 2,
        "matmul": 3,
        "composite": 3,
        "select": 2,
        "integer": 3,
        "repeat": 5,
        "constant_expr": 2,
    }

    def __init__(self, chooser: Chooser, kinds: dict[str, int] | None = None):
        self.c = chooser
        self.kinds = dict(kinds or self.KINDS)
        self.kind_table = [k for k, w in self.kinds.items() for _ in range(w)]
        self.rng = np.random.default_rng(chooser.integer(0, 2**31))

    # --- building ------------------------------------------------------------
    def build(self, num_ops: int, return_all: bool = False) -> Program:
        """A program of at least `num_ops` ops. It returns a few values, so
        that some ops are dead; with `return_all`, every unused value, so
        that every op is live."""
        c = self.c
        base = tuple(c.integer(1, 4) for _ in range(c.integer(1, 3)))
        arg_types = [TensorType(base, f32)]
        arg_types += [TensorType(self.compatible_shape(base, allow_new=False), f32) for _ in range(c.integer(0, 2))]
        arg_types.append(TensorType(base, i32))
        func = FuncOp.build("main", FunctionType(arg_types, []), [f"a{i}" for i in range(len(arg_types))])
        self.b = Builder(InsertionPoint.at_end(func.body))
        self.floats: list[Value] = [a for a in func.body.args if a.type.element_type is f32]
        self.ints: list[Value] = [a for a in func.body.args if a.type.element_type is i32]
        self.ops: list = []
        while len(func.body) < num_ops:
            getattr(self, "gen_" + c.choice(self.kind_table))()
        if return_all:
            results = [r for op in self.ops for r in op.results if not r.has_uses()]
        else:
            results = list(dict.fromkeys([self.floats[-1], c.choice(self.floats), self.ints[-1]]))
        self.b.create(ReturnOp, results, result_types=[])
        func.attributes["function_type"] = A.TypeAttr(FunctionType(arg_types, [v.type for v in results]))
        module = ModuleOp.build([func])
        verify(module)
        return Program(module)

    def emit(self, op_class, operands, attributes=None, result_type=None, pool: bool = True) -> Value:
        """Build an op; its result joins the operand pool of its element type."""
        op = self.b.create(op_class, list(operands), attributes, None if result_type is None else [result_type])
        self.ops.append(op)
        value = op.result
        if pool and value.type.element_type in (f32, i32):
            (self.floats if value.type.element_type is f32 else self.ints).append(value)
        return value

    # --- choosing ------------------------------------------------------------
    def pick(self, pool: list[Value]) -> Value:
        if self.c.chance(70):
            return pool[-1 - self.c.integer(0, min(7, len(pool) - 1))]
        return self.c.choice(pool)

    def pick_broadcastable(self, x: Value) -> Value | None:
        for _ in range(4):
            y = self.pick(self.floats)
            shape = broadcast_shapes(x.type.shape, y.type.shape)
            if shape is not None and math.prod(shape) <= MAX_ELEMENTS:
                return y
        return None

    def compatible_shape(self, shape: tuple[int, ...], allow_new: bool = True) -> tuple[int, ...]:
        """A shape that broadcasts with `shape` without growing past MAX_ELEMENTS."""
        rank = self.c.integer(0, len(shape) + (1 if allow_new and len(shape) < 4 else 0))
        out = []
        for i in range(rank):
            axis = len(shape) - rank + i
            d = shape[axis] if axis >= 0 else 1
            if axis < 0:
                out.append(self.c.integer(1, 2))
            elif d == 1:
                out.append(self.c.choice((1, 1, 2, 3)))
            else:
                out.append(d if self.c.chance(70) else 1)
        full = broadcast_shapes(shape, tuple(out))
        return tuple(out) if math.prod(full) <= MAX_ELEMENTS else tuple(1 for _ in out)

    def constant(self, shape, element=f32, splat: bool | None = None) -> Value:
        t = TensorType(shape, element)
        if splat is None:
            splat = self.c.chance(60)
        if element is i32:
            array = np.full(shape, self.c.choice((0, 1, 2, -3))) if splat else self.rng.integers(-4, 5, size=shape)
        elif splat:
            array = np.full(shape, self.c.choice(SPLAT_VALUES), np.float32)
        else:
            array = self.rng.standard_normal(shape).astype(np.float32)
        return self.emit(T.ConstantOp, [], {"value": A.DenseElementsAttr(array, t)}, pool=False)

    # --- op families ---------------------------------------------------------
    BINARY = (T.AddOp, T.SubOp, T.MulOp, T.DivOp, T.MaxOp, T.MinOp)
    UNARY = (T.NegOp, T.AbsOp, T.TanhOp, T.ReluOp, T.SigmoidOp, T.ExpOp, T.SqrtOp, T.ErfOp, T.SiluOp, T.ReciprocalOp, T.LogOp, T.RsqrtOp)

    def gen_binary(self):
        x = self.pick(self.floats)
        y = self.pick_broadcastable(x)
        if y is None:
            y = self.constant(self.compatible_shape(x.type.shape))
        a, b = (x, y) if self.c.chance(50) else (y, x)
        self.emit(self.c.choice(self.BINARY), [a, b])

    def gen_binary_const(self):
        x = self.pick(self.floats)
        const = self.constant(self.compatible_shape(x.type.shape))
        self.emit(self.c.choice(self.BINARY), [x, const] if self.c.chance(60) else [const, x])

    def gen_identity(self):
        """x+0, x-0, x*1, x/1 with splats of various shapes (and signs of zero)."""
        x = self.pick(self.floats)
        op_class, value = self.c.choice(((T.AddOp, 0.0), (T.AddOp, -0.0), (T.SubOp, 0.0), (T.MulOp, 1.0), (T.DivOp, 1.0), (T.MulOp, 0.0)))
        shape = self.compatible_shape(x.type.shape)
        const = self.emit(T.ConstantOp, [], {"value": A.DenseElementsAttr(np.full(shape, value, np.float32), TensorType(shape, f32))}, pool=False)
        swap = op_class in (T.AddOp, T.MulOp) and self.c.chance(50)
        self.emit(op_class, [const, x] if swap else [x, const])

    def gen_unary(self):
        op_class = self.c.choice(self.UNARY)
        attrs = {"approximate": self.c.choice(("none", "tanh"))} if op_class is T.GeluOp else None
        self.emit(op_class, [self.pick(self.floats)], attrs)

    def gen_reshape(self):
        x = self.pick(self.floats)
        shape = factorizations(x.type.num_elements, self.c.integer(0 if x.type.num_elements == 1 else 1, 4), self.c)
        y = self.emit(T.ReshapeOp, [x], result_type=TensorType(shape, f32))
        if self.c.chance(30):
            self.emit(T.ReshapeOp, [y], result_type=x.type if self.c.chance(50) else TensorType((x.type.num_elements,), f32))

    def random_perm(self, rank: int) -> list[int]:
        perm = list(range(rank))
        for i in range(rank - 1, 0, -1):
            j = self.c.integer(0, i)
            perm[i], perm[j] = perm[j], perm[i]
        return perm

    def gen_transpose(self):
        x = self.pick(self.floats)
        self.emit(T.TransposeOp, [x], {"perm": self.random_perm(x.type.rank)})

    def gen_transpose_pair(self):
        x = self.pick(self.floats)
        p = self.random_perm(x.type.rank)
        y = self.emit(T.TransposeOp, [x], {"perm": p})
        inverse = [p.index(i) for i in range(len(p))]
        self.emit(T.TransposeOp, [y], {"perm": inverse if self.c.chance(50) else self.random_perm(len(p))})

    def gen_broadcast(self):
        x = self.constant(self.compatible_shape((2,)), splat=True) if self.c.chance(30) else self.pick(self.floats)
        shape = list(x.type.shape)
        shape = [self.c.choice((1, 2, 3)) if d == 1 else d for d in shape]
        if len(shape) < 4 and self.c.chance(50):
            shape.insert(0, self.c.integer(1, 3))
        if math.prod(shape) > MAX_ELEMENTS:
            shape = list(x.type.shape)
        self.emit(T.BroadcastToOp, [x], result_type=TensorType(shape, f32))

    def gen_cast(self):
        x = self.pick(self.floats)
        if self.c.chance(50):
            self.emit(T.CastOp, [x], result_type=x.type)
        else:
            narrow = self.emit(T.CastOp, [x], result_type=x.type.with_element_type(f16))
            self.emit(T.CastOp, [narrow], result_type=x.type)

    def gen_reduce(self):
        x = self.pick(self.floats)
        axes = [a for a in range(x.type.rank) if self.c.chance(50)] or None  # None: every axis
        op_class = self.c.choice((T.ReduceSumOp, T.ReduceMaxOp, T.ReduceMinOp, T.ReduceMeanOp))
        self.emit(op_class, [x], {"axes": axes, "keepdims": self.c.chance(50)} if axes else {"keepdims": self.c.chance(50)})

    def gen_slice(self):
        x = self.pick(self.floats)
        if x.type.rank == 0:
            return self.gen_unary()
        start = [self.c.integer(0, d - 1) for d in x.type.shape]
        stop = [self.c.integer(s + 1, d) for s, d in zip(start, x.type.shape)]
        self.emit(T.SliceOp, [x], {"start": start, "stop": stop, "step": [self.c.integer(1, 2) for _ in start]})

    def gen_concat(self):
        x = self.pick(self.floats)
        if x.type.rank == 0 or 2 * x.type.num_elements > MAX_ELEMENTS:
            return self.gen_unary()
        self.emit(T.ConcatOp, [x, x], {"axis": self.c.integer(-x.type.rank, x.type.rank - 1)})

    def gen_matmul(self):
        x = self.pick(self.floats)
        if x.type.rank == 0:
            return self.gen_unary()
        k = x.type.shape[-1]
        n = self.c.integer(1, 4)
        batch = x.type.num_elements // k
        if batch * n > MAX_ELEMENTS:
            n = 1
        transpose_b = self.c.chance(30)
        w = self.constant((n, k) if transpose_b else (k, n), splat=False) if self.c.chance(70) else None
        if w is None:
            found = [v for v in self.floats[-8:] if v.type.rank == 2 and v.type.shape[0] == k and batch * v.type.shape[1] <= MAX_ELEMENTS]
            w = found[0] if found else self.constant((k, n), splat=False)
            transpose_b = False
        self.emit(T.MatmulOp, [x, w], {"transpose_b": True} if transpose_b else None)

    def gen_composite(self):
        x = self.pick(self.floats)
        if x.type.rank == 0:
            return self.gen_unary()
        kind = self.c.choice(("softmax", "layernorm", "rmsnorm", "gelu", "silu", "sigmoid"))
        last = (x.type.shape[-1],)
        if kind == "softmax":
            self.emit(T.SoftmaxOp, [x], {"axis": self.c.integer(-x.type.rank, x.type.rank - 1)})
        elif kind == "layernorm":
            self.emit(T.LayerNormOp, [x, self.constant(last), self.constant(last)])
        elif kind == "rmsnorm":
            self.emit(T.RmsNormOp, [x, self.constant(last)])
        elif kind == "gelu":
            self.emit(T.GeluOp, [x], {"approximate": self.c.choice(("none", "tanh"))})
        else:
            self.emit(T.SiluOp if kind == "silu" else T.SigmoidOp, [x])

    def gen_select(self):
        x = self.pick(self.floats)
        y = self.pick_broadcastable(x) or x
        cond = self.b.create(T.CmpOp, [x, y], {"predicate": self.c.choice(T.CMP_PREDICATES)}).result
        self.emit(T.SelectOp, [cond, x, y])

    def gen_integer(self):
        x = self.pick(self.ints)
        op_class = self.c.choice((T.AddOp, T.SubOp, T.MulOp, T.MaxOp, T.MulOp))
        other = self.constant(self.compatible_shape(x.type.shape), i32) if self.c.chance(60) else self.pick(self.ints)
        if broadcast_shapes(x.type.shape, other.type.shape) is None or math.prod(broadcast_shapes(x.type.shape, other.type.shape)) > MAX_ELEMENTS:
            other = x
        y = self.emit(op_class, [x, other] if self.c.chance(60) else [other, x])
        if self.c.chance(40):
            self.emit(T.CastOp, [y], result_type=y.type.with_element_type(f32))

    def gen_repeat(self):
        """Repeat a recent op (CSE should merge it), commutative ones swapped."""
        if not self.ops:
            return self.gen_unary()
        op = self.ops[-1 - self.c.integer(0, min(5, len(self.ops) - 1))]
        operands = list(op.operands)
        if op.name in ("tensor.add", "tensor.mul", "tensor.max", "tensor.min") and self.c.chance(50):
            operands.reverse()
        self.emit(type(op), operands, dict(op.attributes), op.result.type)

    def gen_constant_expr(self):
        """An expression over constants only (for constant folding)."""
        shape = self.compatible_shape((self.c.integer(1, 4), self.c.integer(1, 4)))
        a, b = self.constant(shape), self.constant(shape)
        y = self.emit(self.c.choice(self.BINARY), [a, b])
        if self.c.chance(50):
            self.emit(T.TransposeOp, [y], {"perm": self.random_perm(y.type.rank)})


def generate_program(chooser: Chooser, num_ops: int = 40, kinds: dict[str, int] | None = None, return_all: bool = False) -> Program:
    return ProgramGenerator(chooser, kinds).build(num_ops, return_all)


def random_program(seed: int, num_ops: int = 40, kinds: dict[str, int] | None = None, return_all: bool = False) -> Program:
    return generate_program(RandomChooser(seed), num_ops, kinds, return_all)


def programs(min_ops: int = 30, max_ops: int = 60, kinds: dict[str, int] | None = None):
    """A hypothesis strategy of `Program`s with min_ops..max_ops ops."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        chooser = DrawChooser(draw)
        return generate_program(chooser, chooser.integer(min_ops, max_ops), kinds)

    return strategy()
