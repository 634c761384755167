"""Dynamic dimensions: sizes known only when the program runs (`tensor<?x384xf32>`).

A shape entry is an `int` (static) or a sympy expression over dim symbols
(`B`, `S`, `B*S`, `Min(4, S)`), never a sympy number: those become ints. The
text spells every non-int dim `?`, as MLIR does; the names live in the
function (`fusecc.dims`, docs/dynamic-shapes.md) and each op's shape inference
derives its results' expressions from its operands'. Every dim of a function
is thus an expression of its arguments' symbols, bound once per call.

What inference cannot decide statically (is `B` equal to `S`?) becomes a
runtime check: inference calls `require_equal`, which fails at once when the
two sides provably differ and otherwise records the check while
`runtime_checks` listens. The IR stores no check: they are re-derived from
the ops, so every rewrite of the tensor level keeps them right.

sympy is imported only when a program has a dynamic dim.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from fusecc.compiler.errors import VerifyError


@functools.lru_cache(maxsize=1)
def sympy():
    import sympy as _sympy

    return _sympy


def is_static(d) -> bool:
    return type(d) is int


def shape_is_static(shape: Iterable) -> bool:
    return all(type(d) is int for d in shape)


def dim_symbol(name: str):
    """The symbol of the dim called `name` (equal names give equal symbols)."""
    return sympy().Symbol(name, integer=True, positive=True)


@functools.lru_cache(maxsize=1)
def _unbound():
    return sympy().Symbol("?", integer=True, positive=True)


def unbound_dim():
    """A `?` not yet bound to an expression: the type parser yields it and the
    function's binding replaces it. A sympy symbol named '?' (so arithmetic on
    it works) that no comparison calls equal to anything."""
    return _unbound()


def is_unbound(d) -> bool:
    return not is_static(d) and _unbound() in d.free_symbols


def normalize_dim(d):
    """An int for numbers (Python, numpy or sympy), the expression otherwise."""
    if type(d) is int:
        return d
    if hasattr(d, "free_symbols"):
        return int(d) if d.is_Integer else d
    return operator.index(d)


def dims_equal(a, b) -> bool | None:
    """True or False when known statically, None when only the run can tell."""
    if type(a) is int and type(b) is int:
        return a == b
    if is_unbound(a) or is_unbound(b):
        return None
    difference = sympy().expand(a - b)
    if difference == 0:
        return True
    if difference.is_number or difference.is_zero is False:  # N vs 2*N: never equal for N >= 1
        return False
    return None


def product(dims: Iterable):
    result = 1
    for d in dims:
        result = result * d
    return normalize_dim(result)


def format_dim(d) -> str:
    return str(d) if type(d) is int else "?"


def evaluate_dim(d, bindings: dict) -> int:
    """The size of `d` once its symbols are bound (symbol -> int)."""
    if type(d) is int:
        return d
    value = d.xreplace({s: sympy().Integer(bindings[s]) for s in d.free_symbols if s in bindings})
    if not value.is_number:
        raise KeyError(f"dim {d} has unbound symbols {sorted(map(str, value.free_symbols))}")
    if not value.is_integer:
        raise ValueError(f"dim {d} is {value}, not a whole number")
    return int(value)


def evaluate_shape(shape: Sequence, bindings: dict) -> tuple[int, ...]:
    return tuple(evaluate_dim(d, bindings) for d in shape)


def free_symbols(shape: Iterable) -> set:
    found: set = set()
    for d in shape:
        if type(d) is not int:
            found |= d.free_symbols
    return found


# --------------------------------------------------------------------------- size hints

# The size a cost model assumes for a dynamic dim nobody gave a hint for.
DEFAULT_HINT = 64
_hints: list[dict[str, int]] = [{}]


@contextlib.contextmanager
def shape_hints(hints: dict[str, int] | None) -> Iterator[dict[str, int]]:
    """Sizes (`{"B": 8, "S": 128}`) that cost models assume for dynamic dims
    while the block runs (`--shape-hint B=8,S=128`). They never change what
    a program computes, only which fusion and tiling choices look cheapest."""
    _hints.append(dict(hints or {}))
    try:
        yield _hints[-1]
    finally:
        _hints.pop()


def set_shape_hints(hints: dict[str, int]) -> None:
    """The hints of a whole process (a command line's --shape-hint)."""
    _hints[0] = dict(hints)


def active_hints() -> dict[str, int]:
    return dict(_hints[-1])


def hinted(d) -> int:
    """`d` at the active hints (DEFAULT_HINT for a dim without one)."""
    if type(d) is int:
        return d
    hints = _hints[-1]
    value = d.xreplace({s: sympy().Integer(hints.get(str(s), DEFAULT_HINT)) for s in d.free_symbols})
    return max(0, int(sympy().floor(value)))


def hinted_shape(shape: Sequence) -> tuple[int, ...]:
    return tuple(hinted(d) for d in shape)


def describe_hints(symbols: Iterable) -> str:
    """`B=8 (--shape-hint), S=64 (default)` for the dims of a program."""
    hints = _hints[-1]
    names = sorted({str(s) for s in symbols} - {"?"})
    return ", ".join(f"{n}={hints[n]} (--shape-hint)" if n in hints else f"{n}={DEFAULT_HINT} (default)" for n in names)


def parse_hints(text: str) -> dict[str, int]:
    """`B=8,S=128` -> {"B": 8, "S": 128}; ValueError names what is wrong."""
    hints = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, equals, value = item.partition("=")
        name = name.strip()
        if not equals or not name.isidentifier() or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"shape hint '{item}' must read NAME=SIZE with a size of at least 1, e.g. B=8,S=128")
        hints[name] = int(value)
    return hints


# --------------------------------------------------------------------------- runtime checks


class DimCheck(NamedTuple):
    """`lhs == rhs` must hold when the program runs; `op_name` at `location`
    is the op that needs it, `message` says why."""

    lhs: Any
    rhs: Any
    op_name: str
    location: Any
    message: str

    def holds(self, bindings: dict) -> bool:
        return evaluate_dim(self.lhs, bindings) == evaluate_dim(self.rhs, bindings)

    def describe(self, bindings: dict) -> str:
        """The failure message, with the sizes seen at run time."""
        symbols = sorted(free_symbols((self.lhs, self.rhs)), key=str)
        sizes = ", ".join(f"{s} = {bindings[s]}" for s in symbols if s in bindings)
        return f"'{self.op_name}' op {self.message} ({self.lhs} == {self.rhs}), which fails at run time with {sizes}"


_recorders: list[list] = []


@contextlib.contextmanager
def recording() -> Iterator[list]:
    """Collect the (lhs, rhs, message) checks shape inference requires."""
    found: list = []
    _recorders.append(found)
    try:
        yield found
    finally:
        _recorders.pop()


def require_equal(a, b, message: str) -> None:
    """Sizes `a` and `b` must be equal: a VerifyError when they provably
    differ, a runtime check when only the run can tell."""
    known = dims_equal(a, b)
    if known is True:
        return
    if known is False:
        raise VerifyError(f"{message}: {a} != {b}")
    if _recorders and not (is_unbound(a) or is_unbound(b)):
        _recorders[-1].append((normalize_dim(a), normalize_dim(b), message))


def require_whole(d, message: str) -> None:
    """`d` (perhaps a quotient such as 100*B/3) must be a whole number."""
    if type(d) is int:
        return
    numerator, denominator = sympy().fraction(sympy().together(d))
    if denominator == 1:
        return
    require_equal(normalize_dim(sympy().Mod(numerator, denominator)), 0, message)


def runtime_checks(root) -> list[DimCheck]:
    """The checks the ops under `root` (a function) need at run time, in
    program order, without duplicates."""
    checks: list[DimCheck] = []
    seen = set()
    for op in root.walk():
        if op is root:
            continue
        with recording() as found:
            # What the verifier runs that can require dims: inference and the op's own checks.
            if type(op).has_type_inference:
                type(op).infer_result_types([v.type for v in op.operands], op.attributes)
            op.verify_()
        for lhs, rhs, message in found:
            key = (lhs, rhs, message, id(op))
            if key not in seen:
                seen.add(key)
                checks.append(DimCheck(lhs, rhs, op.name, op.location, message))
    return checks


def function_is_dynamic(func) -> bool:
    """Whether any value in `func` has a non-static shape."""
    types = list(func.function_type.inputs) + list(func.function_type.results)
    for op in func.walk():
        types.extend(r.type for r in op.results)
    return any(hasattr(t, "shape") and not shape_is_static(t.shape) for t in types)


__all__ = [
    "DEFAULT_HINT",
    "DimCheck",
    "active_hints",
    "describe_hints",
    "hinted",
    "hinted_shape",
    "parse_hints",
    "set_shape_hints",
    "shape_hints",
    "dim_symbol",
    "dims_equal",
    "evaluate_dim",
    "evaluate_shape",
    "format_dim",
    "free_symbols",
    "function_is_dynamic",
    "is_static",
    "is_unbound",
    "normalize_dim",
    "product",
    "recording",
    "require_equal",
    "require_whole",
    "runtime_checks",
    "shape_is_static",
    "unbound_dim",
]
