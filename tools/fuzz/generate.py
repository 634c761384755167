"""The seeded program generator: `generate(seed) -> Case` (program + inputs).

Each seed picks a few features (an element type for its float chain, empty
tensors, special input values, a called function) and then grows @main op
by op, drawing operands mostly from the last values so that chains are long
enough to fuse, and now and then from older ones (multi-use values). Every
op of the tensor dialect is drawn: elementwise (broadcasting with size-1
dims and rank differences, constants with NaN/±inf/-0), cmp/select and i1
logic, casts between all six element types, reductions (negative axes,
keepdims), softmax/layernorm/rmsnorm, matmul (transposes, batch
broadcasting), attention (masks, causal, often followed by a layout op),
reshape, transpose, broadcast_to, slice (negative steps, stops past 0),
concat, gather (negative and out-of-range indices), calls with several
results. Shapes stay small (256 elements) so that the oracle and the
reference are fast, except on one seed in ten, whose dims (16, 33, 64,
130) reach past a vector, a tile or a reduction's split.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from fusecc.tools.fuzz.program import (
    BINARY,
    FLOATS,
    INTS,
    PREDICATES,
    REDUCTIONS,
    Function,
    Invalid,
    Op,
    Program,
    Type,
    broadcast,
    infer_types,
    result_types,
)

MAX_ELEMENTS = 256
DIMS = (1, 1, 2, 3, 4, 5, 8)
# One seed in ten is large: rows longer than a vector or a tile, matmuls that
# pack, reductions that split, odd sizes that leave remainders.
LARGE_MAX_ELEMENTS = 8192
LARGE_DIMS = (1, 3, 16, 33, 64, 130)
SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 0.0)
UNARY_ANY_FLOAT = ("neg", "abs", "exp", "tanh", "erf", "relu", "sigmoid", "silu", "gelu")
UNARY_DOMAIN = ("log", "sqrt", "rsqrt", "reciprocal")  # NaN/inf outside their domain: fine, compared too
RESOURCE_FRACTION = 0.25  # of the constants drawn: dense_resource (docs/resources.md) instead of dense

FAMILIES = {
    "unary": 14,
    "binary": 18,
    "constant_binary": 5,
    "cmp_select": 7,
    "cast": 6,
    "reduce": 7,
    "row": 6,
    "matmul": 5,
    "attention": 4,
    "reshape": 4,
    "transpose": 4,
    "broadcast_to": 3,
    "slice": 5,
    "concat": 3,
    "gather": 3,
    "int_chain": 4,
    "i1_logic": 3,
}


@dataclass
class Case:
    seed: int
    program: Program
    inputs: list[np.ndarray]
    features: list[str]


class _Builder:
    def __init__(self, rng: random.Random, float_type: str, empty: bool, large: bool = False):
        self.rng = rng
        self.dims, self.max_elements = (LARGE_DIMS, LARGE_MAX_ELEMENTS) if large else (DIMS, MAX_ELEMENTS)
        self.float = float_type
        self.empty = empty
        self.args: list[tuple[str, Type]] = []
        self.ops: list[Op] = []
        self.values: list[tuple[str, Type]] = []
        self.counter = 0
        self.features: set[str] = set()

    # --- names and values -------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def arg(self, t: Type, prefix: str = "a") -> str:
        name = self.fresh(prefix)
        self.args.append((name, t))
        self.values.append((name, t))
        return name

    def emit(self, kind: str, operands: list[str], attrs: dict | None = None, results: int = 1, callee_types=None, callee=None) -> list[str]:
        types = [self.type_of(v) for v in operands]
        op = Op(kind, operands, [self.fresh() for _ in range(results)], attrs or {})
        found = result_types(op, types, callee, callee_types)  # raises Invalid: the caller drew badly
        if any(t.size > self.max_elements * 4 for t in found):
            raise Invalid("too large")
        self.ops.append(op)
        for name, t in zip(op.results, found):
            self.values.append((name, t))
        self.features.add(kind)
        if kind == "pow" and found[0].dtype in INTS:
            self.features.add("pow:int")
        return op.results

    def type_of(self, name: str) -> Type:
        for n, t in reversed(self.values):
            if n == name:
                return t
        raise KeyError(name)

    def pick(self, accept=lambda t: True, recent: int = 4) -> str | None:
        """A value whose type `accept`s: mostly one of the last few."""
        found = [(n, t) for n, t in self.values if accept(t)]
        if not found:
            return None
        if self.rng.random() < 0.75:
            return self.rng.choice(found[-recent:])[0]
        return self.rng.choice(found)[0]

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = self.rng.choice((1, 2, 2, 3, 3, 4)) if rank is None else rank
        dims = [self.rng.choice(self.dims) for _ in range(rank)]
        if self.empty and self.rng.random() < 0.3:
            dims[self.rng.randrange(rank)] = 0
        while int(np.prod(dims)) > self.max_elements:
            dims[dims.index(max(dims))] //= 2
        return tuple(dims)

    def float_value(self, min_rank: int = 0) -> str:
        v = self.pick(lambda t: t.dtype in FLOATS and len(t.shape) >= min_rank)
        return v if v is not None else self.arg(Type(self.shape(self.rng.randint(max(min_rank, 1), 3)), self.float))

    def broadcast_partner(self, t: Type) -> Type:
        """A shape that broadcasts with t's: fewer dims, some set to 1, or t's own."""
        r = self.rng.random()
        if r < 0.4:
            return t
        shape = list(t.shape)
        if r < 0.7 and shape:
            shape = shape[self.rng.randint(0, len(shape)) :]
        shape = [1 if self.rng.random() < 0.35 else d for d in shape]
        if self.rng.random() < 0.15:  # a rank difference the other way: the partner is bigger
            shape = [self.rng.choice((2, 3))] + list(t.shape)
        return Type(tuple(shape), t.dtype)

    def constant(self, t: Type, special: bool) -> str:
        values = self.rng_values(t, special)
        if t.size == 0 or self.rng.random() < 0.4:  # a splat (an empty tensor has no other literal)
            values = np.full(t.shape, values.flat[0] if values.size else 0.0)
        attrs = {"shape": list(t.shape), "dtype": t.dtype, "value": values.tolist()}
        if t.size and t.dtype != "bf16" and self.rng.random() < RESOURCE_FRACTION:
            attrs["resource"] = True  # dense_resource<...> from a file beside the program (an npz has no bf16)
        name = self.emit("constant", [], attrs)[0]
        if attrs.get("resource"):
            self.features.add("dense_resource")
        return name

    def rng_values(self, t: Type, special: bool) -> np.ndarray:
        gen = np.random.default_rng(self.rng.randrange(2**32))
        if t.dtype in FLOATS:
            v = np.round(gen.standard_normal(t.shape) * 4) / 4
            if special and v.size:
                v.flat[gen.integers(0, v.size)] = self.rng.choice(SPECIALS)
            return v
        if t.dtype == "i1":
            return gen.integers(0, 2, t.shape).astype(bool)
        return gen.integers(-6, 7, t.shape)


class Generator:
    def __init__(self, seed: int, num_ops: int | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.num_ops = num_ops if num_ops is not None else self.rng.randint(3, 14)

    def generate(self) -> Case:
        rng = self.rng
        float_type = rng.choice(("f32", "f32", "f32", "f16", "bf16"))
        empty = rng.random() < 0.06
        special = rng.random() < 0.15
        large = rng.random() < 0.1
        b = _Builder(rng, float_type, empty, large)
        functions: list[Function] = []
        self.functions = functions
        if rng.random() < 0.12:
            functions.append(self._callee(b, float_type))
            if rng.random() < 0.5:  # a second callee, which calls the first
                functions.append(self._nested_callee(functions[0]))
        b.arg(Type(b.shape(), float_type))
        attempts = 0
        while len(b.ops) < self.num_ops and attempts < self.num_ops * 20:
            attempts += 1
            family = rng.choices(list(FAMILIES), weights=list(FAMILIES.values()))[0]
            if functions and rng.random() < 0.1:
                family = "call"
            try:
                getattr(self, f"_{family}")(b, rng.choice(functions)) if family == "call" else getattr(self, f"_{family}")(b)
            except Invalid:
                continue
        if not b.ops:
            b.emit("neg", [b.values[-1][0]])
        results = [b.ops[-1].results[0]]
        for _ in range(rng.choice((0, 0, 1, 2))):  # several results
            other = rng.choice([r for op in b.ops for r in op.results])
            if other not in results:
                results.append(other)
        if rng.random() < 0.06:  # an argument returned as it is
            results.insert(rng.randrange(len(results) + 1), rng.choice(b.args)[0])
            b.features.add("return:argument")
        if rng.random() < 0.04:  # one value returned twice
            results.append(rng.choice(results))
            b.features.add("return:twice")
        main = Function("main", b.args, b.ops, results)
        program = Program([*functions, main])
        calls = [op.attrs["callee"] for f in program.functions for op in f.ops if op.kind == "call"]
        if len(set(calls)) > 1:
            b.features.add("call:several-callees")
        if any(calls.count(name) > 1 for name in set(calls)):
            b.features.add("call:twice")
        if any(op.kind == "call" for f in functions for op in f.ops):
            b.features.add("call:nested")
        features = sorted(b.features) + [f"float:{float_type}"] + (["empty"] if empty else []) + (["specials"] if special else []) + (["large"] if large else [])
        inputs = make_inputs(program, np.random.default_rng(self.seed), special)
        return Case(self.seed, program, inputs, features)

    # --- a called function with one or two results ----------------------------------
    def _callee(self, b: _Builder, float_type: str) -> Function:
        inner = _Builder(random.Random(self.rng.randrange(2**32)), float_type, False)
        x = inner.arg(Type(inner.shape(2), float_type), "p")
        y = inner.arg(Type(inner.type_of(x).shape[-1:], float_type), "p")
        s = inner.emit("add", [x, y])[0]
        t = inner.emit(self.rng.choice(("tanh", "sigmoid", "exp", "neg")), [s])[0]
        returns = [t] if self.rng.random() < 0.4 else [t, inner.emit("reduce_sum", [s], {"axes": [-1], "keepdims": self.rng.random() < 0.5})[0]]
        return Function("helper", inner.args, inner.ops, returns)

    def _nested_callee(self, inner_callee: Function) -> Function:
        """helper2(x, y) -> (relu(max(helper(x, y)#0, x)), x): a call inside a
        called function, and an argument returned as it is."""
        inner = _Builder(random.Random(self.rng.randrange(2**32)), inner_callee.args[0][1].dtype, False)
        x, y = (inner.arg(t, "p") for _, t in inner_callee.args)
        returned = infer_types(Program([inner_callee]))
        r = inner.emit("call", [x, y], {"callee": inner_callee.name}, results=len(inner_callee.returns), callee=inner_callee, callee_types=[returned[inner_callee.name, v] for v in inner_callee.returns])[0]
        m = inner.emit("max", [r, x])[0]
        return Function("helper2", inner.args, inner.ops, [inner.emit("relu", [m])[0], x])

    def _call(self, b: _Builder, callee: Function) -> None:
        for _ in range(2 if self.rng.random() < 0.3 else 1):  # now and then the same function twice in a row
            operands = []
            for _, t in callee.args:
                v = b.pick(lambda u, t=t: u == t, recent=8)
                operands.append(v if v is not None else b.arg(t))
            types = infer_types(Program(self.functions))
            b.emit("call", operands, {"callee": callee.name}, results=len(callee.returns), callee=callee, callee_types=[types[callee.name, r] for r in callee.returns])

    # --- families ---------------------------------------------------------------------
    def _unary(self, b: _Builder) -> None:
        x = b.float_value()
        kind = self.rng.choice(UNARY_ANY_FLOAT + UNARY_DOMAIN)
        attrs = {"approximate": self.rng.choice(("none", "tanh"))} if kind == "gelu" and self.rng.random() < 0.7 else {}
        b.emit(kind, [x], attrs)

    def _binary(self, b: _Builder, kind: str | None = None, x: str | None = None) -> None:
        x = x or b.float_value()
        t = b.type_of(x)
        kind = kind or self.rng.choice(BINARY)
        if self.rng.random() < 0.1:
            y = x  # the same value twice: x - x, x / x
        else:
            partner = b.broadcast_partner(t)
            y = b.pick(lambda u: u.dtype == t.dtype and u.shape == partner.shape and u.shape != (), recent=8) or b.arg(partner)
        operands = [x, y] if self.rng.random() < 0.7 else [y, x]
        b.emit(kind, operands)

    def _constant_binary(self, b: _Builder) -> None:
        x = b.float_value()
        t = b.type_of(x)
        c = b.constant(b.broadcast_partner(t), special=self.rng.random() < 0.3)
        b.emit(self.rng.choice(BINARY), [x, c] if self.rng.random() < 0.6 else [c, x])

    def _cmp_select(self, b: _Builder) -> None:
        x = b.float_value() if self.rng.random() < 0.8 else b.pick(lambda t: t.dtype in INTS)
        if x is None:
            return
        t = b.type_of(x)
        partner = b.broadcast_partner(t)
        y = b.pick(lambda u: u.dtype == t.dtype and u.shape == partner.shape, recent=8) or b.arg(partner)
        cond = b.emit("cmp", [x, y], {"predicate": self.rng.choice(PREDICATES)})[0]
        if self.rng.random() < 0.8:
            other = b.pick(lambda u: u.dtype == t.dtype and u.shape == t.shape, recent=8) or x
            b.emit("select", [cond, x, y] if self.rng.random() < 0.5 else [cond, y, other])

    def _cast(self, b: _Builder) -> None:
        x = b.pick() or b.float_value()
        source = b.type_of(x).dtype
        target = self.rng.choice([d for d in FLOATS + INTS + ("i1",) if d != source])
        b.emit("cast", [x], {"to": target})

    def _reduce(self, b: _Builder) -> None:
        x = b.pick(lambda t: len(t.shape) >= 1 and t.dtype != "i1") or b.float_value(1)
        t = b.type_of(x)
        kind = self.rng.choice(REDUCTIONS if t.dtype in FLOATS else ("reduce_sum", "reduce_max", "reduce_min"))
        rank = len(t.shape)
        axes = self.rng.sample(range(rank), self.rng.randint(1, rank))
        axes = [a - rank if self.rng.random() < 0.4 else a for a in axes]  # negative axes
        b.emit(kind, [x], {"axes": axes, "keepdims": self.rng.random() < 0.4})

    def _row(self, b: _Builder) -> None:
        x = b.float_value(1)
        t = b.type_of(x)
        kind = self.rng.choice(("softmax", "softmax", "layernorm", "rmsnorm"))
        if kind == "softmax":
            rank = len(t.shape)
            axis = self.rng.choice([-1, rank - 1, 0, -rank])
            b.emit("softmax", [x], {"axis": axis} if self.rng.random() < 0.7 else {})
            return
        gamma = b.arg(Type(t.shape[-1:], t.dtype), "g") if self.rng.random() < 0.7 else b.constant(Type(t.shape[-1:], t.dtype), special=False)
        operands = [x, gamma] + ([b.arg(Type(t.shape[-1:], t.dtype), "g")] if kind == "layernorm" else [])
        attrs = {"epsilon": self.rng.choice((1e-5, 1e-3))} if self.rng.random() < 0.5 else {}
        b.emit(kind, operands, attrs)

    def _matmul(self, b: _Builder) -> None:
        a = b.float_value(2)
        t = b.type_of(a)
        ta, tb = self.rng.random() < 0.25, self.rng.random() < 0.3
        k = t.shape[-2] if ta else t.shape[-1]
        n = self.rng.choice((1, 2, 3, 4, 8) if b.dims is DIMS else (1, 16, 33, 64))
        batch = t.shape[:-2]
        if batch and self.rng.random() < 0.3:
            batch = batch[1:] if self.rng.random() < 0.5 else tuple(1 for _ in batch)  # batch broadcasting
        rhs = Type(batch + ((n, k) if tb else (k, n)), t.dtype)
        other = a if (tb and not ta and self.rng.random() < 0.3 and b.type_of(a).shape[-1] == k and not batch) else None
        w = other or b.arg(rhs, "w")
        b.emit("matmul", [a, w], {"transpose_a": ta, "transpose_b": tb} if (ta or tb or self.rng.random() < 0.2) else {})

    def _attention(self, b: _Builder) -> None:
        q = b.pick(lambda t: t.dtype in FLOATS and 2 <= len(t.shape) <= 4 and t.shape[-1] > 0)
        if q is None:
            q = b.arg(Type(b.shape(self.rng.choice((2, 3))), b.float))
        t = b.type_of(q)
        batch, s, d = t.shape[:-2], t.shape[-2], t.shape[-1]
        tk = self.rng.choice((1, 2, 4, 5, 8) if b.dims is DIMS else (1, 16, 33, 64))
        dv = self.rng.choice((1, 2, 4, 8) if b.dims is DIMS else (1, 16, 64))
        k = b.arg(Type(batch + (tk, d), t.dtype), "k")
        v = b.arg(Type(batch + (tk, dv), t.dtype), "v")
        operands = [q, k, v]
        if self.rng.random() < 0.3:
            operands.append(b.arg(Type(self.rng.choice(((s, tk), (1, tk), (tk,))), t.dtype), "m"))
        attrs = {}
        if self.rng.random() < 0.3:
            attrs["causal"] = True
        if self.rng.random() < 0.3:
            attrs["scale"] = self.rng.choice((0.125, 0.5, 1.0))
        out = b.emit("attention", operands, attrs)[0]
        if self.rng.random() < 0.6:  # attention feeding a layout op (issue 16.C)
            getattr(self, "_" + self.rng.choice(("slice", "concat", "broadcast_to", "transpose", "reshape")))(b, out)

    def _reshape(self, b: _Builder, x: str | None = None) -> None:
        x = x or b.pick() or b.float_value()
        t = b.type_of(x)
        n = t.size
        dims = []
        rest = n
        for _ in range(self.rng.randint(0, 3)):
            divisors = [d for d in (1, 2, 3, 4, 5, 8) if rest and rest % d == 0]
            if not divisors:
                break
            d = self.rng.choice(divisors)
            dims.append(d)
            rest //= d
        if n == 0:
            dims = [0] + dims
        else:
            dims.append(rest)
        self.rng.shuffle(dims)
        b.emit("reshape", [x], {"shape": dims})

    def _transpose(self, b: _Builder, x: str | None = None) -> None:
        x = x or b.pick(lambda t: len(t.shape) >= 2) or b.float_value(2)
        perm = list(range(len(b.type_of(x).shape)))
        self.rng.shuffle(perm)
        b.emit("transpose", [x], {"perm": perm})

    def _broadcast_to(self, b: _Builder, x: str | None = None) -> None:
        x = x or b.pick()
        if x is None:
            return
        t = b.type_of(x)
        shape = [self.rng.choice((2, 3)) if d == 1 and self.rng.random() < 0.6 else d for d in t.shape]
        if self.rng.random() < 0.5 or shape == list(t.shape):
            shape = [self.rng.choice((1, 2, 3))] + shape
        b.emit("broadcast_to", [x], {"shape": shape})

    def _slice(self, b: _Builder, x: str | None = None) -> None:
        x = x or b.pick(lambda t: len(t.shape) >= 1) or b.float_value(1)
        t = b.type_of(x)
        start, stop, step = [], [], []
        for n in t.shape:
            s = self.rng.choice((1, 1, 1, 2, -1, -1, -2, 3))
            a = self.rng.randint(-n - 2, n + 2)
            e = self.rng.randint(-n - 3, n + 3)
            if self.rng.random() < 0.3:  # the whole axis, possibly reversed (stop past index 0)
                a, e = (n - 1, -n - 1) if s < 0 else (0, n)
            start.append(a)
            stop.append(e)
            step.append(s)
        b.emit("slice", [x], {"start": start, "stop": stop, "step": step})

    def _concat(self, b: _Builder, x: str | None = None) -> None:
        x = x or b.pick(lambda t: len(t.shape) >= 1) or b.float_value(1)
        t = b.type_of(x)
        axis = self.rng.randrange(len(t.shape))
        other_shape = list(t.shape)
        other_shape[axis] = self.rng.choice((0, 1, 2, 3)) if self.rng.random() < 0.5 else t.shape[axis]
        other = x if self.rng.random() < 0.3 else b.arg(Type(tuple(other_shape), t.dtype))
        operands = [x, other] + ([x] if self.rng.random() < 0.2 else [])
        self.rng.shuffle(operands)
        b.emit("concat", operands, {"axis": axis - len(t.shape) if self.rng.random() < 0.4 else axis})

    def _gather(self, b: _Builder) -> None:
        data = b.pick(lambda t: len(t.shape) >= 1 and all(d > 0 for d in t.shape)) or b.arg(Type(b.shape(2), b.float))
        t = b.type_of(data)
        rank = len(t.shape)
        axis = self.rng.randrange(rank)
        n = t.shape[axis]
        index_type = Type(tuple(self.rng.choice((1, 2, 3, 4)) for _ in range(self.rng.randint(0, 2))), self.rng.choice(INTS))
        if self.rng.random() < 0.5:
            gen = np.random.default_rng(self.rng.randrange(2**32))
            values = gen.integers(-n - 3, n + 3, index_type.shape)
            idx = b.emit("constant", [], {"shape": list(index_type.shape), "dtype": index_type.dtype, "value": values.tolist()})[0]
        else:
            idx = b.arg(index_type, "i")
        b.emit("gather", [data, idx], {"axis": axis - rank if self.rng.random() < 0.4 else axis})

    def _int_chain(self, b: _Builder) -> None:
        x = b.pick(lambda t: t.dtype in INTS)
        if x is None:
            x = b.emit("cast", [b.float_value()], {"to": self.rng.choice(INTS)})[0] if self.rng.random() < 0.5 else b.arg(Type(b.shape(), self.rng.choice(INTS)), "n")
        kind = self.rng.choice(("add", "sub", "mul", "div", "max", "min", "pow", "neg", "abs", "relu"))
        if kind in ("neg", "abs", "relu"):
            b.emit(kind, [x])
        else:
            self._binary(b, kind, x)

    def _i1_logic(self, b: _Builder) -> None:
        x = b.pick(lambda t: t.dtype == "i1")
        if x is None:
            x = b.emit("cast", [b.pick() or b.float_value()], {"to": "i1"})[0]
        if self.rng.random() < 0.3:  # eq/ne of booleans: xnor/xor
            partner = b.pick(lambda u: u.dtype == "i1" and u.shape == b.type_of(x).shape, recent=8) or x
            b.emit("cmp", [x, partner], {"predicate": self.rng.choice(PREDICATES)})
            return
        self._binary(b, self.rng.choice(("max", "min")), x)  # or / and: i1 has no arithmetic in the language


def make_inputs(program: Program, rng: np.random.Generator, special: bool) -> list[np.ndarray]:
    """Inputs for @main: normals (steps of 1/8, so exact zeros occur), ints
    from -6 to 6 with the odd extreme, gather indices past both ends; with
    `special`, some NaN, ±inf and -0.0."""
    out = []
    for name, t in program.main.args:
        if t.dtype in FLOATS:
            v = np.round(rng.standard_normal(t.shape) * 8) / 8
            if special and v.size:
                for _ in range(max(1, v.size // 8)):
                    v.flat[rng.integers(0, v.size)] = SPECIALS[rng.integers(0, len(SPECIALS))]
        elif t.dtype == "i1":
            v = rng.integers(0, 2, t.shape).astype(bool)
        elif name.startswith("i"):
            v = rng.integers(-12, 12, t.shape)
        else:
            v = rng.integers(-6, 7, t.shape)
            if v.size and rng.random() < 0.2:
                info = np.iinfo(np.int32 if t.dtype == "i32" else np.int64)
                v.flat[rng.integers(0, v.size)] = rng.choice((info.max, info.min))
        out.append(storage_array(v, t.dtype))
    return out


def storage_array(values, dtype: str) -> np.ndarray:
    """How the project stores a value of `dtype` in numpy (bf16 widened to float32)."""
    if dtype == "bf16":
        import ml_dtypes

        return np.asarray(values, dtype=np.float64).astype(ml_dtypes.bfloat16).astype(np.float32)
    return np.asarray(values).astype({"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "i1": np.bool_}[dtype])


def generate(seed: int, num_ops: int | None = None) -> Case:
    return Generator(seed, num_ops).generate()
