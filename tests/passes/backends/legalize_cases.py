"""One small loop-level program per rule of docs/legalize.md, with inputs
that reach the rule's edge cases and the values the chosen behaviour gives.
Used by the loop-level tests (test_legalize.py) and by each backend's
differential tests (tests/runtime/cpu/test_cpu_legalize.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusecc.compiler.parser import parse_module

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NAN, INF = float("nan"), float("inf")


@dataclass(frozen=True)
class Case:
    name: str
    in_type: str  # element type of the inputs %a and %b (loaded as %x, %y)
    out_type: str  # element type of %out (the value %r)
    body: str  # ops computing %r from %x and %y
    a: list
    b: list
    expected: list  # what docs/legalize.md says %r is

    def program(self):
        n = len(self.a)
        t_in, t_out = f"memref<{n}x{self.in_type}>", f"memref<{n}x{self.out_type}>"
        body = "\n".join("        " + line.strip() for line in self.body.strip().splitlines())
        return parse_module(f"""
loop.kernel @k {{
^bb0(%a: {t_in}, %b: {t_in}, %out: {t_out}):
  loop.parallel {{upper = [{n}], mapping = ["vector"]}} {{
  ^bb0(%i: index):
        %x = loop.load %a, %i : ({t_in}, index) -> {self.in_type}
        %y = loop.load %b, %i : ({t_in}, index) -> {self.in_type}
{body}
        loop.store %r, %out, %i : {self.out_type}, {t_out}, index
        loop.yield
  }}
  loop.return
}}
loop.schedule @main {{arena_size = 0, inputs = ["a", "b"], outputs = ["out"]}} {{
^bb0(%a: {t_in}, %b: {t_in}, %out: {t_out}):
  loop.launch @k(%a, %b, %out) : {t_in}, {t_in}, {t_out}
  loop.return
}}
""", "<legalize case>")

    def inputs(self):
        dtype = {"i1": np.bool_, "bf16": np.float32}.get(self.in_type) or np.dtype(self.in_type.replace("f", "float").replace("i", "int"))
        return [np.array(self.a, dtype=dtype), np.array(self.b, dtype=dtype)]


def _ints(t, lo, hi):
    return Case(
        f"div_{t}", t, t, "%r = arith.div %x, %y : ({t}, {t}) -> {t}".format(t=t),
        [7, -7, lo, 5, 0, lo, hi, -9], [0, -1, -1, 2, 0, 0, -1, 4], [0, 7, lo, 2, 0, 0, -hi, -2],
    ), Case(
        f"rem_{t}", t, t, "%r = arith.rem %x, %y : ({t}, {t}) -> {t}".format(t=t),
        [7, -7, lo, 5, 0, lo, hi, -9], [0, -1, -1, 2, 0, 0, -1, 4], [0, 0, 0, 1, 0, 0, 0, -1],
    )


X, Y = [False, False, True, True] * 2, [False, True, False, True] * 2
I1_RULES = {  # docs/legalize.md, rule 2
    "add": lambda x, y: x or y,
    "sub": lambda x, y: x != y,
    "mul": lambda x, y: x and y,
    "div": lambda x, y: x and y,
    "rem": lambda x, y: False,
    "max": lambda x, y: x or y,
    "min": lambda x, y: x and y,
}

CASES = [
    *_ints("i32", INT32_MIN, INT32_MAX),
    *_ints("i64", INT64_MIN, INT64_MAX),
    Case(
        "f32_to_i32", "f32", "i32", "%r = arith.cast %x : (f32) -> i32",
        [NAN, INF, -INF, 3e9, -3e9, 2.75, -2.75, -0.0], [0] * 8,
        [0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 2, -2, 0],
    ),
    Case(
        "f32_to_i64", "f32", "i64", "%r = arith.cast %x : (f32) -> i64",
        [NAN, INF, -INF, 1e19, -1e19, 2.75, -2.75, 2.0**62], [0] * 8,
        [0, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 2, -2, 2**62],
    ),
    Case(
        "bf16_to_i32", "bf16", "i32", "%r = arith.cast %x : (bf16) -> i32",
        [NAN, INF, -INF, 3e9, -3e9, 2.75, -2.75, 0.0], [0] * 8,
        [0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 2, -2, 0],
    ),
    Case(
        "f32_to_i1", "f32", "i1", "%r = arith.cast %x : (f32) -> i1",
        [NAN, INF, 0.0, -0.0, 0.5, -1.0, 1e-30, 0.0], [0] * 8, [True, True, False, False, True, True, True, False],
    ),
    *(
        Case(f"i1_{name}", "i1", "i1", f"%r = arith.{name} %x, %y : (i1, i1) -> i1", X, Y, [rule(x, y) for x, y in zip(X, Y)])
        for name, rule in I1_RULES.items()
    ),
    Case("i1_neg", "i1", "i1", "%r = arith.neg %x : (i1) -> i1", X, Y, X),
    Case(
        "nan_select", "f32", "f32",
        """%ge = arith.cmp %x, %y {predicate = "ge"} : (f32, f32) -> i1
        %nan = arith.cmp %x, %x {predicate = "ne"} : (f32, f32) -> i1
        %keep = arith.or %ge, %nan : (i1, i1) -> i1
        %r = arith.select %keep, %x, %y : (i1, f32, f32) -> f32""",
        # numpy's maximum: a NaN on either side wins, -0.0 kept as it is
        [NAN, 1.0, NAN, -0.0, 0.0, -INF, 2.0, -1.0], [1.0, NAN, NAN, 0.0, -0.0, INF, 2.0, -3.0],
        [NAN, NAN, NAN, -0.0, 0.0, INF, 2.0, -1.0],
    ),
    Case(
        "fmax_ignores_nan", "f32", "f32", "%r = arith.max %x, %y : (f32, f32) -> f32",
        [NAN, 1.0, -1.0, 3.0, -INF, 0.5, 2.0, NAN], [1.0, NAN, -2.0, 4.0, 1.0, 0.25, 2.0, -5.0],
        [1.0, 1.0, -1.0, 4.0, 1.0, 0.5, 2.0, -5.0],
    ),
    Case(
        # bug 16.B at the loop level: (x + 2^-9) - x in bf16 is 0 for x in [1, 2)
        "bf16_chain", "bf16", "bf16",
        """%c = arith.constant {value = 0.001953125} : () -> f32
        %cb = arith.cast %c : (f32) -> bf16
        %s = arith.add %x, %cb : (bf16, bf16) -> bf16
        %r = arith.sub %s, %x : (bf16, bf16) -> bf16""",
        [1.0, 1.5, 1.0078125, 1.9921875, 0.5, 256.0, 0.0, -1.0], [0] * 8,
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.001953125, 0.0]  # 0.5 + 2^-9 is a tie: to even, 0.5,
    ),
    Case(
        "bf16_exp_rounds", "bf16", "f32",
        """%e = math.exp %x : (bf16) -> bf16
        %r = arith.cast %e : (bf16) -> f32""",
        [1.1171875, 1.0, 0.5, 2.0, 0.0, -1.0, 10.0, -INF], [0] * 8,
        [3.0625, 2.71875, 1.6484375, 7.375, 1.0, 0.3671875, 22016.0, 0.0],
    ),
    Case(
        "f16_chain", "f16", "f16",
        """%c = arith.constant {value = 0.0001} : () -> f32
        %ch = arith.cast %c : (f32) -> f16
        %s = arith.add %x, %ch : (f16, f16) -> f16
        %r = arith.sub %s, %x : (f16, f16) -> f16""",
        [1.0, 1.5, 2.0, 1000.0, 60000.0, -1.0, 0.0, 0.5], [0] * 8,
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, float(np.float16(0.0001)), 0.0],
    ),
    Case(
        "int_to_bf16", "i32", "bf16", "%r = arith.cast %x : (i32) -> bf16",
        [1, 257, -257, 16777217, INT32_MAX, INT32_MIN, 0, 3], [0] * 8,
        [1.0, 256.0, -256.0, 16777216.0, 2147483648.0, -2147483648.0, 0.0, 3.0],
    ),
    Case(
        # docs/semantics.md: C99 pow (Annex F) on every target
        "pow_special_values", "f32", "f32", "%r = math.pow %x, %y : (f32, f32) -> f32",
        [-INF, -0.0, NAN, 1.0, 2.0, -8.0, 0.0, -2.0], [0.5, 0.5, 0.0, NAN, 3.0, 1 / 3, -1.0, 2.0],
        [INF, 0.0, 1.0, 1.0, 8.0, NAN, INF, 4.0],
    ),
]
