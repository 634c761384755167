"""The shape every backend shares, in tinygrad's renderer way.

After `legalize` (docs/legalize.md) a backend makes no semantic decision:
it is a table from an op key to a handler that renders that op in the
target's most direct form, plus a small driver that walks kernels, loops
and buffers. A key is `(op name, kind)`, the kind being that of the values
the op computes on ("float", "int" (index too) or "i1"), so that e.g.
`("arith.add", "float")` is `fadd` in LLVM and `+` in C. Adding an
elementwise op means one semantics entry (its dialect and the loop
interpreter) and one line per backend table; `missing_entries` is the
test that every table covers every legal key.

The key space is shared; what a handler returns is the backend's: the CUDA
table's `handler(r, op, *args) -> str` returns the C expression of the
result from its operands' expressions; the LLVM table's `handler(k, op)`
binds the result itself, since an LLVM value is a scalar, a `<W x T>`
vector or a lane-linear index (llvm/text.py `Val`) and the handler picks
the instruction's width from its operands'.
"""

from __future__ import annotations

from typing import Callable, Mapping

from fusecc.compiler.ir import Operation
from fusecc.compiler.types import Type, i1

FLOAT, INT, BOOL = "float", "int", "i1"

_BINARY = ("arith.add", "arith.sub", "arith.mul", "arith.div", "arith.max", "arith.min")
_MATH = ("math.exp", "math.log", "math.sqrt", "math.rsqrt", "math.tanh", "math.erf", "math.abs", "math.pow", "math.fma")

# Every (op, kind) that legal loop IR may hold, with its meaning in the loop
# interpreter (runtime/loop_interpreter.py) and docs/legalize.md.
LEGAL_KEYS: frozenset[tuple[str, str]] = frozenset(
    [(name, kind) for name in _BINARY for kind in (FLOAT, INT)]
    + [("arith.rem", INT), ("arith.neg", FLOAT), ("arith.neg", INT)]
    + [(name, kind) for name in ("arith.and", "arith.or", "arith.xor") for kind in (INT, BOOL)]
    + [(name, kind) for name in ("arith.constant", "arith.cmp", "arith.select", "arith.cast") for kind in (FLOAT, INT, BOOL)]
    + [(name, FLOAT) for name in _MATH]
)

# Ops with regions or memory, which each backend's driver handles itself.
KERNEL_OPS = frozenset({"loop.for", "loop.parallel", "loop.if", "loop.load", "loop.store", "loop.alloc", "loop.constant", "loop.view"})
GPU_OPS = frozenset({"loop.barrier", "loop.shuffle_xor"})

Handler = Callable[..., object]


def kind_of(t: Type) -> str:
    if t is i1:
        return BOOL
    return FLOAT if t.is_float else INT


def op_key(op: Operation) -> tuple[str, str]:
    """The table key of an `arith`/`math` op: its name and the kind of the
    values it computes on (a select's: its chosen values'; a cast's and a
    comparison's: their operand's; a constant's: its result's)."""
    if op.name == "arith.select":
        return op.name, kind_of(op.operands[1].type)
    values = op.operands if op.operands else op.results
    return op.name, kind_of(values[0].type)


def missing_entries(table: Mapping[tuple[str, str], Handler]) -> list[tuple[str, str]]:
    """The legal keys `table` cannot render."""
    return sorted(LEGAL_KEYS - set(table))


def handler_for(table: Mapping[tuple[str, str], Handler], op: Operation) -> Handler | None:
    """The handler of an `arith`/`math` op, or None when the op is not legal
    (legalize did not run, or the op is unknown)."""
    return table.get(op_key(op))


__all__ = ["BOOL", "FLOAT", "GPU_OPS", "INT", "KERNEL_OPS", "LEGAL_KEYS", "Handler", "handler_for", "kind_of", "missing_entries", "op_key"]
