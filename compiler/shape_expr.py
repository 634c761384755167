"""Integer expressions over named dimensions: `B*S*1536`, `max(B*S, 8)`.

Dynamic shapes leave sizes, byte offsets and loop extents unknown until a
call binds the named dims (docs/dynamic-shapes.md). Below the tensor level
such a quantity is written as an expression in Python's integer syntax,
restricted to `+ - * // %`, `max`, `min`, integer literals and names. It is
checked once, compiled once to Python bytecode, and evaluated once per call.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Mapping

_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_FUNCTIONS = {"max": max, "min": min}


class ShapeExprError(ValueError):
    """An expression outside the allowed grammar."""


@dataclass(frozen=True)
class ShapeExpr:
    text: str
    names: tuple[str, ...]  # the free dimension names, sorted
    code: object = None  # compiled bytecode

    def evaluate(self, dims: Mapping[str, int]) -> int:
        try:
            return eval(self.code, {"__builtins__": {}, **_FUNCTIONS}, dict(dims))  # noqa: S307 (checked grammar, no builtins)
        except NameError as exc:
            raise ShapeExprError(f"'{self.text}' needs a value for {exc.name}") from None
        except ZeroDivisionError:
            raise ShapeExprError(f"'{self.text}' divides by zero") from None

    @property
    def constant(self) -> int | None:
        """The value when the expression names no dimension."""
        return self.evaluate({}) if not self.names else None

    def __str__(self) -> str:
        return self.text


def _check(node: ast.AST, names: set[str]) -> None:
    if isinstance(node, ast.Expression):
        _check(node.body, names)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, _OPERATORS):
        _check(node.left, names)
        _check(node.right, names)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, names)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        pass
    elif isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
        names.add(node.id)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS and node.args and not node.keywords:
        for arg in node.args:
            _check(arg, names)
    else:
        raise ShapeExprError(f"not allowed in a shape expression: '{ast.unparse(node)}'")


@functools.lru_cache(maxsize=4096)
def parse_shape_expr(text: str | int) -> ShapeExpr:
    """`text` checked and compiled; an int is a constant expression."""
    text = str(text).strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ShapeExprError(f"malformed shape expression '{text}'") from None
    names: set[str] = set()
    _check(tree, names)
    return ShapeExpr(text, tuple(sorted(names)), compile(tree, "<shape expression>", "eval"))


# --------------------------------------------------------------------------- building


def _atom(e: str) -> str:
    """`e` parenthesised unless it is a name, a literal or a call."""
    return e if e.replace("_", "").isalnum() or (e.endswith(")") and e.split("(")[0].isalnum() and _balanced(e)) else f"({e})"


def _balanced(e: str) -> bool:
    depth = 0
    for n, ch in enumerate(e):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and n < len(e) - 1 and ch == ")":
            return False
    return True


def product(factors) -> str:
    """The product of ints and expression texts, constants folded first."""
    constant, rest = 1, []
    for f in factors:
        if isinstance(f, int) or str(f).isdigit():
            constant *= int(f)
        else:
            rest.append(_atom(str(f)))
    if constant == 0:
        return "0"
    if constant != 1 or not rest:
        rest.insert(0, str(constant))
    return "*".join(rest)


def total(terms) -> str:
    """The sum of ints and expression texts, constants folded last."""
    constant, rest = 0, []
    for t in terms:
        if isinstance(t, int) or str(t).isdigit():
            constant += int(t)
        else:
            rest.append(str(t))
    if constant or not rest:
        rest.append(str(constant))
    return " + ".join(rest)


def align_up(e: str, alignment: int) -> str:
    """`e` rounded up to a multiple of `alignment`; exact when a constant
    factor of `e` already is one."""
    if e.isdigit():
        return str(-(-int(e) // alignment) * alignment)
    monomial = re.fullmatch(r"(\d+)(\*[A-Za-z_]\w*)*", e)
    if monomial and int(monomial.group(1)) % alignment == 0:
        return e
    return f"({e} + {alignment - 1})//{alignment}*{alignment}"


def maximum(exprs) -> str:
    unique = list(dict.fromkeys(str(e) for e in exprs))
    return unique[0] if len(unique) == 1 else f"max({', '.join(unique)})"


__all__ = ["ShapeExpr", "ShapeExprError", "align_up", "maximum", "parse_shape_expr", "product", "total"]


def from_sympy(expr) -> str:
    """A dim of the tensor level (an int or a sympy expression of dim
    symbols, compiler/dims.py) as a shape expression's text."""
    if type(expr) is int:
        return str(expr)
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Symbol:
        return parse_shape_expr(expr.name).text
    if expr.func.__name__ not in ("floor", "ceiling"):
        numerator, denominator = expr.as_numer_denom()
        if not denominator.is_Integer or int(denominator) != 1:  # 16*S/3 (a reshape's dim, checked whole at run time): exact
            return f"{_atom(from_sympy(numerator))}//{_atom(from_sympy(denominator))}"
    args = [from_sympy(a) for a in expr.args] if expr.func.__name__ not in ("floor", "ceiling") else None
    name = expr.func.__name__
    if name == "Add":
        return total(args)
    if name == "Mul":
        return product(args)
    if name in ("Max", "Min"):
        return f"{name.lower()}({', '.join(args)})"
    if name == "Mod":
        return f"{_atom(args[0])} % {_atom(args[1])}"
    if name == "Pow" and expr.args[1].is_Integer and int(expr.args[1]) > 0:  # S**2 (a [B, S, S] buffer's bytes): S*S
        return product([args[0]] * int(expr.args[1]))
    if name in ("floor", "ceiling"):
        numerator, denominator = expr.args[0].as_numer_denom()
        n, d = from_sympy(numerator), from_sympy(denominator)
        return f"{_atom(n)}//{_atom(d)}" if name == "floor" else f"-(-{_atom(n)}//{_atom(d)})"
    raise ShapeExprError(f"the dim {expr} has no shape expression yet")


__all__ += ["from_sympy"]
