"""The CUDA backend's table: each legal `arith`/`math` op (docs/legalize.md)
as C text, keyed like every backend's table (passes/backends/table.py).

An entry is `handler(r, op, *args) -> str`: `r` is the kernel renderer
(C types, literals), `op` the op, `args` its operands as C expressions; it
returns the expression of the op's result. Nothing here decides semantics:
legalize has guarded integer division, saturated float -> int casts,
turned i1 arithmetic into logic and made every f16/bf16 rounding an
explicit cast. f16/bf16 values live in `float` registers (exact there), so
a cast from f32 to them is the rounding, and a cast back is free.

Adding an elementwise op: one line here (and its meaning in the loop
interpreter, and a line in the LLVM table).
"""

from __future__ import annotations

from fusecc.compiler.types import bf16, f16, f64, i1
from fusecc.passes.backends.table import BOOL, FLOAT, INT

ROUND_TO = {f16: "fusecc_round_f16", bf16: "fusecc_round_bf16"}  # from the prelude: f32 -> the nearest f16/bf16, as a float


def infix(symbol: str):
    return lambda r, op, a, b: f"{a} {symbol} {b}"


def libm(name: str):
    """A C math function: `expf` on f32, `exp` on f64."""
    return lambda r, op, *args: f"{name}{'' if op.result.type is f64 else 'f'}({', '.join(args)})"


def int_extreme(symbol: str):
    return lambda r, op, a, b: f"{a} {symbol} {b} ? {a} : {b}"


def cast(r, op, x: str) -> str:
    source, target = op.input.type, op.result.type
    if target is i1:
        return f"{x} != 0"
    if target is source or (source in ROUND_TO and target.is_float):
        return x  # a float register holds the f16/bf16 value exactly (legalize widens only to f32)
    if target in ROUND_TO:
        r.uses_narrow(target)
        return f"{ROUND_TO[target]}({x})"
    return f"({r.value_type(target)}){x}"


def constant(r, op) -> str:
    return r.literal(op.attr("value").value, op.result.type)


COMPARE_C = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

CODE_FOR_OP = {
    **{(name, kind): infix(symbol) for name, symbol in (("arith.add", "+"), ("arith.sub", "-"), ("arith.mul", "*"), ("arith.div", "/")) for kind in (FLOAT, INT)},
    ("arith.rem", INT): infix("%"),
    ("arith.max", FLOAT): libm("fmax"),
    ("arith.min", FLOAT): libm("fmin"),
    ("arith.max", INT): int_extreme(">"),
    ("arith.min", INT): int_extreme("<"),
    ("arith.neg", FLOAT): lambda r, op, x: f"-{x}",
    ("arith.neg", INT): lambda r, op, x: f"-{x}",
    ("arith.and", INT): infix("&"),
    ("arith.or", INT): infix("|"),
    ("arith.xor", INT): infix("^"),
    ("arith.and", BOOL): infix("&&"),
    ("arith.or", BOOL): infix("||"),
    ("arith.xor", BOOL): infix("!="),
    **{("arith.cmp", kind): (lambda r, op, a, b: f"{a} {COMPARE_C[op.predicate]} {b}") for kind in (FLOAT, INT, BOOL)},
    **{("arith.select", kind): (lambda r, op, c, a, b: f"{c} ? {a} : {b}") for kind in (FLOAT, INT, BOOL)},
    **{("arith.cast", kind): cast for kind in (FLOAT, INT, BOOL)},
    **{("arith.constant", kind): constant for kind in (FLOAT, INT, BOOL)},
    ("math.exp", FLOAT): libm("exp"),
    ("math.log", FLOAT): libm("log"),
    ("math.sqrt", FLOAT): libm("sqrt"),
    ("math.rsqrt", FLOAT): libm("rsqrt"),
    ("math.tanh", FLOAT): libm("tanh"),
    ("math.erf", FLOAT): libm("erf"),
    ("math.abs", FLOAT): libm("fabs"),
    ("math.pow", FLOAT): libm("pow"),
    ("math.fma", FLOAT): libm("fma"),
}
