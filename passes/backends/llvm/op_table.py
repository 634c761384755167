"""The CPU backend's op table: each legal `arith`/`math` op (see
passes/backends/table.py) as the LLVM instruction or intrinsic call that
computes it, on a scalar or on `<W x T>` lanes.

The IR is legal (docs/legalize.md), so these are the direct forms: integer
division never sees 0 or -1, float -> int casts only see values in range,
i1 is never added, bf16/f16 never computed on. `arith.cast` to bf16 is the
one rounding op (round to nearest even, NaN stays NaN; bf16 values live in
`float` registers). No fast-math flags, no contraction: numbers match the
loop interpreter. exp/log/tanh/erf are inline polynomial expansions
(math_functions.py); f64 ones call libm per lane.
"""

from __future__ import annotations

import math

from fusecc.compiler.types import ScalarType, bf16, f64, i1, index
from fusecc.passes.backends.llvm import math_functions as llvm_math
from fusecc.passes.backends.llvm.text import BITS, REGISTER, UNIFORM, VECTOR, Val, const_val, float_literal, mangle, scalar_literal, vty
from fusecc.passes.backends.table import BOOL, FLOAT, INT

FLOAT_PREDICATES = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
SIGNED_PREDICATES = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
UNSIGNED_PREDICATES = {"eq": "eq", "ne": "ne", "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}
BITS_OF_FLOAT = {"half": 16, "float": 32, "double": 64}


def operands(k, op):
    """(width, the operands as refs of that width) of an elementwise op."""
    args = [k.get(v) for v in op.operands]
    width = k.lanes_of(args)
    return width, [k.vec(a) if width > 1 else a.ref for a in args]


def bind(k, op, ref: str, width: int, **facts) -> None:
    k.bind(op.result, Val(ref, REGISTER[op.result.type.name], VECTOR if width > 1 else UNIFORM, **facts))


def instruction(opcode: str):
    """`%r = opcode <ty> %a, %b` (fadd, sdiv, and, ...)."""

    def handler(k, op):
        width, (a, b) = operands(k, op)
        ty = vty(REGISTER[op.result.type.name], width)
        bind(k, op, k.fb.emit(f"{opcode} {ty} {a}, {b}"), width)

    return handler


def intrinsic(name: str):
    """`%r = call @llvm.<name>.<ty>(args)` (maxnum, smax, pow, sqrt, fabs)."""

    def handler(k, op):
        width, refs = operands(k, op)
        reg = REGISTER[op.result.type.name]
        ty = vty(reg, width)
        bind(k, op, k.fb.call(f"llvm.{name}.{mangle(reg, width)}", ty, [(ty, r) for r in refs]), width)

    return handler


def index_aware(index_rule, general):
    """Index arithmetic stays symbolic (lane-linear) where it can (index_math.py)."""

    def handler(k, op):
        if op.result.type is index:
            a, b = (k.get(v) for v in op.operands)
            result = index_rule(k, a, b)
            if result is not None:
                k.bind(op.result, result)
                return
        general(k, op)

    return handler


def index_extremum(general_name: str):
    base = intrinsic(general_name)

    def handler(k, op):
        base(k, op)
        a, b = (k.get(v) for v in op.operands)
        if op.result.type is index and k.lanes_of((a, b)) == 1:
            nonneg = (a.nonneg or b.nonneg) if general_name == "smax" else (a.nonneg and b.nonneg)
            result = k.get(op.result)
            k.bind(op.result, Val(result.ref, result.ty, UNIFORM, multiple=math.gcd(a.multiple, b.multiple), nonneg=nonneg))

    return handler


def constant(k, op):
    t = op.result.type
    value = op.attr("value").value
    if t is index:
        k.bind(op.result, const_val(int(value)))
    else:
        k.bind(op.result, Val(scalar_literal(value, t), REGISTER[t.name], const=value if t.is_integer else None))


def negate(k, op):
    width, (x,) = operands(k, op)
    t = op.result.type
    ty = vty(REGISTER[t.name], width)
    text = f"fneg {ty} {x}" if t.is_float else f"sub {ty} {k.lit(REGISTER[t.name], '0', width)}, {x}"
    bind(k, op, k.fb.emit(text), width)


def compare(predicates: dict, opcode: str):
    def handler(k, op):
        width, (a, b) = operands(k, op)
        ty = vty(REGISTER[op.lhs.type.name], width)
        k.bind(op.result, Val(k.fb.emit(f"{opcode} {predicates[op.predicate]} {ty} {a}, {b}"), "i1", VECTOR if width > 1 else UNIFORM))

    return handler


def select(k, op):
    c, a, b = k.get(op.condition), k.get(op.true_value), k.get(op.false_value)
    width = k.lanes_of((c, a, b))
    if width == 1:
        k.bind(op.result, Val(k.fb.emit(f"select i1 {c.ref}, {a.ty} {a.ref}, {a.ty} {b.ref}"), a.ty))
        return
    ct = k.full("i1") if c.kind != UNIFORM else "i1"  # a uniform condition selects whole vectors
    t = k.full(a.ty)
    ref = k.fb.emit(f"select {ct} {k.vec(c) if c.kind != UNIFORM else c.ref}, {t} {k.vec(a)}, {t} {k.vec(b)}")
    k.bind(op.result, k.vector(ref, a.ty))


def round_bf16(k, ref: str, width: int) -> str:
    """f32 -> bf16 precision: round to nearest even, NaN stays NaN (a quiet NaN)."""
    fb = k.fb
    it, ft, bt = vty("i32", width), vty("float", width), vty("i1", width)
    bits = fb.emit(f"bitcast {ft} {ref} to {it}")
    high = fb.emit(f"lshr {it} {bits}, {k.lit('i32', '16', width)}")
    odd = fb.emit(f"and {it} {high}, {k.lit('i32', '1', width)}")
    biased = fb.emit(f"add {it} {bits}, {k.lit('i32', '32767', width)}")
    biased = fb.emit(f"add {it} {biased}, {odd}")
    cleared = fb.emit(f"and {it} {biased}, {k.lit('i32', '-65536', width)}")
    rounded = fb.emit(f"bitcast {it} {cleared} to {ft}")
    is_nan = fb.emit(f"fcmp uno {ft} {ref}, {ref}")
    return fb.emit(f"select {bt} {is_nan}, {ft} {k.lit('float', '0x7FF8000000000000', width)}, {ft} {rounded}")


def cast(k, op):
    x = k.get(op.input)
    source, target = op.input.type, op.result.type
    width = k.lanes_of((x,))
    ref = k.vec(x) if width > 1 else x.ref
    facts = dict(multiple=x.multiple, nonneg=x.nonneg) if source.is_integer and target is index and width == 1 else {}
    bind(k, op, convert(k, source, target, ref, width), width, **facts)


def convert(k, source: ScalarType, target: ScalarType, ref: str, width: int) -> str:
    """A legal arith.cast: float<->float through the legal pairs (f32<->bf16
    rounds, bf16 -> f32 is exact), int -> float, in-range float -> int
    (truncating), int -> int (i1 zero-extends)."""
    fb = k.fb
    s, d = REGISTER[source.name], REGISTER[target.name]
    st, dt = vty(s, width), vty(d, width)
    if target is bf16:
        return round_bf16(k, ref, width)
    if s == d and source is not i1 and target is not i1:  # bf16 -> f32, index <-> i64
        return ref
    if source.is_float and target.is_float:
        return fb.emit(f"{'fpext' if BITS_OF_FLOAT[s] < BITS_OF_FLOAT[d] else 'fptrunc'} {st} {ref} to {dt}")
    if target.is_float:
        # integers reach a float through f32, as the interpreter defines
        as_f32 = fb.emit(f"{'uitofp' if source is i1 else 'sitofp'} {st} {ref} to {vty('float', width)}")
        return as_f32 if d == "float" else fb.emit(f"fpext {vty('float', width)} {as_f32} to {dt}")
    if source.is_float:
        return fb.emit(f"fptosi {st} {ref} to {dt}")
    if source is i1:
        return fb.emit(f"zext {st} {ref} to {dt}")
    return fb.emit(f"{'sext' if BITS[s] < BITS[d] else 'trunc'} {st} {ref} to {dt}")


def math_function(k, op):
    width, refs = operands(k, op)
    t = op.result.type
    reg = REGISTER[t.name]
    ty = vty(reg, width)
    name = op.name
    if t is f64:
        out = scalarised_libm(k, name.split(".")[1], ty, refs, width)
    else:
        out = llvm_math.EXPANSIONS[name](llvm_math.F32Ops(k.fb, width, k.isa), refs[0])
    bind(k, op, out, width)


def rsqrt(k, op):
    width, (x,) = operands(k, op)
    reg = REGISTER[op.result.type.name]
    ty = vty(reg, width)
    root = k.fb.call(f"llvm.sqrt.{mangle(reg, width)}", ty, [(ty, x)])
    bind(k, op, k.fb.emit(f"fdiv {ty} {k.lit(reg, float_literal(1.0, reg), width)}, {root}"), width)


def scalarised_libm(k, function: str, ty: str, refs, width: int) -> str:
    fb = k.fb
    if width == 1:
        return fb.call(function, "double", [("double", r) for r in refs])
    out = "poison"
    for lane in range(width):
        x = [fb.emit(f"extractelement {ty} {r}, i64 {lane}") for r in refs]
        y = fb.call(function, "double", [("double", v) for v in x])
        out = fb.emit(f"insertelement {ty} {out}, double {y}, i64 {lane}")
    return out


def _index_add(k, a, b):
    return k.ix_add(a, b)


def _index_sub(k, a, b):
    return k.ix_add(a, b, subtract=True)


# (op, kind) -> handler(emitter, op). One line per legal key (passes/backends/table.py).
TABLE = {
    ("arith.constant", FLOAT): constant,
    ("arith.constant", INT): constant,
    ("arith.constant", BOOL): constant,
    ("arith.add", FLOAT): instruction("fadd"),
    ("arith.sub", FLOAT): instruction("fsub"),
    ("arith.mul", FLOAT): instruction("fmul"),
    ("arith.div", FLOAT): instruction("fdiv"),
    ("arith.max", FLOAT): intrinsic("maxnum"),
    ("arith.min", FLOAT): intrinsic("minnum"),
    ("arith.neg", FLOAT): negate,
    ("arith.add", INT): index_aware(_index_add, instruction("add")),
    ("arith.sub", INT): index_aware(_index_sub, instruction("sub")),
    ("arith.mul", INT): index_aware(lambda k, a, b: k.ix_mul(a, b), instruction("mul")),
    ("arith.div", INT): index_aware(lambda k, a, b: k.ix_divrem(a, b, rem=False), instruction("sdiv")),
    ("arith.rem", INT): index_aware(lambda k, a, b: k.ix_divrem(a, b, rem=True), instruction("srem")),
    ("arith.max", INT): index_extremum("smax"),
    ("arith.min", INT): index_extremum("smin"),
    ("arith.neg", INT): negate,
    ("arith.and", INT): instruction("and"),
    ("arith.or", INT): instruction("or"),
    ("arith.xor", INT): instruction("xor"),
    ("arith.and", BOOL): instruction("and"),
    ("arith.or", BOOL): instruction("or"),
    ("arith.xor", BOOL): instruction("xor"),
    ("arith.cmp", FLOAT): compare(FLOAT_PREDICATES, "fcmp"),
    ("arith.cmp", INT): compare(SIGNED_PREDICATES, "icmp"),
    ("arith.cmp", BOOL): compare(UNSIGNED_PREDICATES, "icmp"),
    ("arith.select", FLOAT): select,
    ("arith.select", INT): select,
    ("arith.select", BOOL): select,
    ("arith.cast", FLOAT): cast,
    ("arith.cast", INT): cast,
    ("arith.cast", BOOL): cast,
    ("math.exp", FLOAT): math_function,
    ("math.log", FLOAT): math_function,
    ("math.tanh", FLOAT): math_function,
    ("math.erf", FLOAT): math_function,
    ("math.sqrt", FLOAT): intrinsic("sqrt"),
    ("math.abs", FLOAT): intrinsic("fabs"),
    ("math.pow", FLOAT): intrinsic("pow"),
    ("math.fma", FLOAT): intrinsic("fma"),
    ("math.rsqrt", FLOAT): rsqrt,
}
