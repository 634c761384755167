"""The op families a fuzz program grows by, each a function that draws one
op (or a few) into a `ProgramBuilder` from its rng, and `FAMILIES`, their
weights. Every op of the tensor dialect is drawn: elementwise (broadcasting
with size-1 dims and rank differences, constants with NaN/±inf/-0),
cmp/select and i1 logic, casts between all six element types, reductions
(negative axes, keepdims), softmax/layernorm/rmsnorm, matmul (transposes,
batch broadcasting), attention (masks, causal, often followed by a layout
op), reshape, transpose, broadcast_to, slice (negative steps, stops past
0), concat, gather (negative and out-of-range indices). Calls are drawn by
`generate.Generator`, which knows the called functions."""

from __future__ import annotations

import numpy as np

from fusecc.tools.fuzz.builder import DIMS, ProgramBuilder
from fusecc.tools.fuzz.program import BINARY, FLOATS, INTS, PREDICATES, REDUCTIONS, Type

UNARY_ANY_FLOAT = ("neg", "abs", "exp", "tanh", "erf", "relu", "sigmoid", "silu", "gelu")
UNARY_DOMAIN = ("log", "sqrt", "rsqrt", "reciprocal")  # NaN/inf outside their domain: fine, compared too

# Weights of the families (the order is part of the seed's meaning: keep it).
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


def unary(b: ProgramBuilder) -> None:
    x = b.float_value()
    kind = b.rng.choice(UNARY_ANY_FLOAT + UNARY_DOMAIN)
    attrs = {"approximate": b.rng.choice(("none", "tanh"))} if kind == "gelu" and b.rng.random() < 0.7 else {}
    b.emit(kind, [x], attrs)


def binary(b: ProgramBuilder, kind: str | None = None, x: str | None = None) -> None:
    x = x or b.float_value()
    t = b.type_of(x)
    kind = kind or b.rng.choice(BINARY)
    if b.rng.random() < 0.1:
        y = x  # the same value twice: x - x, x / x
    else:
        partner = b.broadcast_partner(t)
        y = b.pick(lambda u: u.dtype == t.dtype and u.shape == partner.shape and u.shape != (), recent=8) or b.arg(partner)
    operands = [x, y] if b.rng.random() < 0.7 else [y, x]
    b.emit(kind, operands)


def constant_binary(b: ProgramBuilder) -> None:
    x = b.float_value()
    t = b.type_of(x)
    c = b.constant(b.broadcast_partner(t), special=b.rng.random() < 0.3)
    b.emit(b.rng.choice(BINARY), [x, c] if b.rng.random() < 0.6 else [c, x])


def cmp_select(b: ProgramBuilder) -> None:
    x = b.float_value() if b.rng.random() < 0.8 else b.pick(lambda t: t.dtype in INTS)
    if x is None:
        return
    t = b.type_of(x)
    partner = b.broadcast_partner(t)
    y = b.pick(lambda u: u.dtype == t.dtype and u.shape == partner.shape, recent=8) or b.arg(partner)
    cond = b.emit("cmp", [x, y], {"predicate": b.rng.choice(PREDICATES)})[0]
    if b.rng.random() < 0.8:
        other = b.pick(lambda u: u.dtype == t.dtype and u.shape == t.shape, recent=8) or x
        b.emit("select", [cond, x, y] if b.rng.random() < 0.5 else [cond, y, other])


def cast(b: ProgramBuilder) -> None:
    x = b.pick() or b.float_value()
    source = b.type_of(x).dtype
    target = b.rng.choice([d for d in FLOATS + INTS + ("i1",) if d != source])
    b.emit("cast", [x], {"to": target})


def reduce(b: ProgramBuilder) -> None:
    x = b.pick(lambda t: len(t.shape) >= 1 and t.dtype != "i1") or b.float_value(1)
    t = b.type_of(x)
    kind = b.rng.choice(REDUCTIONS if t.dtype in FLOATS else ("reduce_sum", "reduce_max", "reduce_min"))
    rank = len(t.shape)
    axes = b.rng.sample(range(rank), b.rng.randint(1, rank))
    axes = [a - rank if b.rng.random() < 0.4 else a for a in axes]  # negative axes
    b.emit(kind, [x], {"axes": axes, "keepdims": b.rng.random() < 0.4})


def row(b: ProgramBuilder) -> None:
    x = b.float_value(1)
    t = b.type_of(x)
    kind = b.rng.choice(("softmax", "softmax", "layernorm", "rmsnorm"))
    if kind == "softmax":
        rank = len(t.shape)
        axis = b.rng.choice([-1, rank - 1, 0, -rank])
        b.emit("softmax", [x], {"axis": axis} if b.rng.random() < 0.7 else {})
        return
    gamma = b.arg(Type(t.shape[-1:], t.dtype), "g") if b.rng.random() < 0.7 else b.constant(Type(t.shape[-1:], t.dtype), special=False)
    operands = [x, gamma] + ([b.arg(Type(t.shape[-1:], t.dtype), "g")] if kind == "layernorm" else [])
    attrs = {"epsilon": b.rng.choice((1e-5, 1e-3))} if b.rng.random() < 0.5 else {}
    b.emit(kind, operands, attrs)


def matmul(b: ProgramBuilder) -> None:
    a = b.float_value(2)
    t = b.type_of(a)
    ta, tb = b.rng.random() < 0.25, b.rng.random() < 0.3
    k = t.shape[-2] if ta else t.shape[-1]
    n = b.rng.choice((1, 2, 3, 4, 8) if b.dims is DIMS else (1, 16, 33, 64))
    batch = t.shape[:-2]
    if batch and b.rng.random() < 0.3:
        batch = batch[1:] if b.rng.random() < 0.5 else tuple(1 for _ in batch)  # batch broadcasting
    rhs = Type(batch + ((n, k) if tb else (k, n)), t.dtype)
    other = a if (tb and not ta and b.rng.random() < 0.3 and b.type_of(a).shape[-1] == k and not batch) else None
    w = other or b.arg(rhs, "w")
    b.emit("matmul", [a, w], {"transpose_a": ta, "transpose_b": tb} if (ta or tb or b.rng.random() < 0.2) else {})


def attention(b: ProgramBuilder) -> None:
    q = b.pick(lambda t: t.dtype in FLOATS and 2 <= len(t.shape) <= 4 and t.shape[-1] > 0)
    if q is None:
        q = b.arg(Type(b.shape(b.rng.choice((2, 3))), b.float))
    t = b.type_of(q)
    batch, s, d = t.shape[:-2], t.shape[-2], t.shape[-1]
    tk = b.rng.choice((1, 2, 4, 5, 8) if b.dims is DIMS else (1, 16, 33, 64))
    dv = b.rng.choice((1, 2, 4, 8) if b.dims is DIMS else (1, 16, 64))
    k = b.arg(Type(batch + (tk, d), t.dtype), "k")
    v = b.arg(Type(batch + (tk, dv), t.dtype), "v")
    operands = [q, k, v]
    if b.rng.random() < 0.3:
        operands.append(b.arg(Type(b.rng.choice(((s, tk), (1, tk), (tk,))), t.dtype), "m"))
    attrs = {}
    if b.rng.random() < 0.3:
        attrs["causal"] = True
    if b.rng.random() < 0.3:
        attrs["scale"] = b.rng.choice((0.125, 0.5, 1.0))
    out = b.emit("attention", operands, attrs)[0]
    if b.rng.random() < 0.6:  # attention feeding a layout op (issue 16.C)
        DRAW[b.rng.choice(("slice", "concat", "broadcast_to", "transpose", "reshape"))](b, out)


def reshape(b: ProgramBuilder, x: str | None = None) -> None:
    x = x or b.pick() or b.float_value()
    t = b.type_of(x)
    n = t.size
    dims = []
    rest = n
    for _ in range(b.rng.randint(0, 3)):
        divisors = [d for d in (1, 2, 3, 4, 5, 8) if rest and rest % d == 0]
        if not divisors:
            break
        d = b.rng.choice(divisors)
        dims.append(d)
        rest //= d
    if n == 0:
        dims = [0] + dims
    else:
        dims.append(rest)
    b.rng.shuffle(dims)
    b.emit("reshape", [x], {"shape": dims})


def transpose(b: ProgramBuilder, x: str | None = None) -> None:
    x = x or b.pick(lambda t: len(t.shape) >= 2) or b.float_value(2)
    perm = list(range(len(b.type_of(x).shape)))
    b.rng.shuffle(perm)
    b.emit("transpose", [x], {"perm": perm})


def broadcast_to(b: ProgramBuilder, x: str | None = None) -> None:
    x = x or b.pick()
    if x is None:
        return
    t = b.type_of(x)
    shape = [b.rng.choice((2, 3)) if d == 1 and b.rng.random() < 0.6 else d for d in t.shape]
    if b.rng.random() < 0.5 or shape == list(t.shape):
        shape = [b.rng.choice((1, 2, 3))] + shape
    b.emit("broadcast_to", [x], {"shape": shape})


def slice_(b: ProgramBuilder, x: str | None = None) -> None:
    x = x or b.pick(lambda t: len(t.shape) >= 1) or b.float_value(1)
    t = b.type_of(x)
    start, stop, step = [], [], []
    for n in t.shape:
        s = b.rng.choice((1, 1, 1, 2, -1, -1, -2, 3))
        a = b.rng.randint(-n - 2, n + 2)
        e = b.rng.randint(-n - 3, n + 3)
        if b.rng.random() < 0.3:  # the whole axis, possibly reversed (stop past index 0)
            a, e = (n - 1, -n - 1) if s < 0 else (0, n)
        start.append(a)
        stop.append(e)
        step.append(s)
    b.emit("slice", [x], {"start": start, "stop": stop, "step": step})


def concat(b: ProgramBuilder, x: str | None = None) -> None:
    x = x or b.pick(lambda t: len(t.shape) >= 1) or b.float_value(1)
    t = b.type_of(x)
    axis = b.rng.randrange(len(t.shape))
    other_shape = list(t.shape)
    other_shape[axis] = b.rng.choice((0, 1, 2, 3)) if b.rng.random() < 0.5 else t.shape[axis]
    other = x if b.rng.random() < 0.3 else b.arg(Type(tuple(other_shape), t.dtype))
    operands = [x, other] + ([x] if b.rng.random() < 0.2 else [])
    b.rng.shuffle(operands)
    b.emit("concat", operands, {"axis": axis - len(t.shape) if b.rng.random() < 0.4 else axis})


def gather(b: ProgramBuilder) -> None:
    data = b.pick(lambda t: len(t.shape) >= 1 and all(d > 0 for d in t.shape)) or b.arg(Type(b.shape(2), b.float))
    t = b.type_of(data)
    rank = len(t.shape)
    axis = b.rng.randrange(rank)
    n = t.shape[axis]
    index_type = Type(tuple(b.rng.choice((1, 2, 3, 4)) for _ in range(b.rng.randint(0, 2))), b.rng.choice(INTS))
    if b.rng.random() < 0.5:
        gen = np.random.default_rng(b.rng.randrange(2**32))
        values = gen.integers(-n - 3, n + 3, index_type.shape)
        idx = b.emit("constant", [], {"shape": list(index_type.shape), "dtype": index_type.dtype, "value": values.tolist()})[0]
    else:
        idx = b.arg(index_type, "i")
    b.emit("gather", [data, idx], {"axis": axis - rank if b.rng.random() < 0.4 else axis})


def int_chain(b: ProgramBuilder) -> None:
    x = b.pick(lambda t: t.dtype in INTS)
    if x is None:
        x = b.emit("cast", [b.float_value()], {"to": b.rng.choice(INTS)})[0] if b.rng.random() < 0.5 else b.arg(Type(b.shape(), b.rng.choice(INTS)), "n")
    kind = b.rng.choice(("add", "sub", "mul", "div", "max", "min", "pow", "neg", "abs", "relu"))
    if kind in ("neg", "abs", "relu"):
        b.emit(kind, [x])
    else:
        binary(b, kind, x)


def i1_logic(b: ProgramBuilder) -> None:
    x = b.pick(lambda t: t.dtype == "i1")
    if x is None:
        x = b.emit("cast", [b.pick() or b.float_value()], {"to": "i1"})[0]
    if b.rng.random() < 0.3:  # eq/ne of booleans: xnor/xor
        partner = b.pick(lambda u: u.dtype == "i1" and u.shape == b.type_of(x).shape, recent=8) or x
        b.emit("cmp", [x, partner], {"predicate": b.rng.choice(PREDICATES)})
        return
    binary(b, b.rng.choice(("max", "min")), x)  # or / and: i1 has no arithmetic in the language


DRAW = {
    "unary": unary,
    "binary": binary,
    "constant_binary": constant_binary,
    "cmp_select": cmp_select,
    "cast": cast,
    "reduce": reduce,
    "row": row,
    "matmul": matmul,
    "attention": attention,
    "reshape": reshape,
    "transpose": transpose,
    "broadcast_to": broadcast_to,
    "slice": slice_,
    "concat": concat,
    "gather": gather,
    "int_chain": int_chain,
    "i1_logic": i1_logic,
}
