"""kernels.json with `?` sizes (version 3; docs/dynamic-shapes.md, CUDA).

A program compiled once for every size writes its sizes as expressions of
named dims (compiler/shape_expr.py: `B*S`, `(B*S + 255)//256`):

  * an input's shape names the dims it defines: `"shape": ["B", "S", 64]`
    (the first input axis spelled with a bare name defines that dim; every
    other size is checked or computed from the dims); `dims` lists them;
  * a launch's `grid` holds the expression of each dimension computed at
    launch; its kernel's `?` extents are `{"size": "B*S"}` arguments;
  * `arena_bytes`, arena arguments' `arena` offsets and shapes are the
    symbolic memory plan's expressions;
  * `checks` are the runtime dim checks shape inference left (lhs == rhs,
    with the op's location and message).

The host binds the dims from the inputs' shapes once per call and
`specialize`s: the ordinary static manifest at those sizes, which the GPU
runtime and the CPU harness run as before.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

from fusecc.compiler.shape_expr import ShapeExprError, from_sympy, parse_shape_expr

# (manifest.py builds on this module, not the other way round: manifests are
# handled here through their fields and dataclasses.replace.)


class ManifestError(ValueError):
    """A kernels.json that does not follow the schema."""


@dataclass(frozen=True)
class SizeArg:
    """A `?` size passed by value (`long long`): an expression of the named
    dims, or its value once the manifest is specialised to one call."""

    size: str | int
    dtype: str = "i64"

    def to_dict(self) -> dict:
        return {"size": self.size, "dtype": self.dtype}


MAX_GRID = (2**31 - 1, 65535, 65535)  # CUDA's grid limits, checked where a `?` size makes a grid


def _symbolic(value) -> bool:
    return isinstance(value, str)


def _is_arena(arg) -> bool:
    return hasattr(arg, "offset")


def is_dynamic(manifest) -> bool:
    if _symbolic(manifest.arena_bytes) or any(s.is_symbolic for s in (*manifest.inputs, *manifest.outputs)):
        return True
    for launch in manifest.launches:
        if any(_symbolic(g) for g in launch.grid):
            return True
        if any(isinstance(a, SizeArg) and _symbolic(a.size) or _is_arena(a) and (_symbolic(a.offset) or a.is_symbolic) for a in launch.args):
            return True
    return False


def dim_sources(manifest) -> dict[str, tuple[str, int]]:
    sources: dict[str, tuple[str, int]] = {}
    for spec in manifest.inputs:
        for axis, size in enumerate(spec.shape):
            if _symbolic(size) and size.isidentifier():
                sources.setdefault(size, (spec.name, axis))
    return sources


def evaluate(value, dims) -> int:
    return value if isinstance(value, int) else parse_shape_expr(value).evaluate(dims)


def _expressions(manifest):
    """(where, expression) of every symbolic size of the document."""
    for spec in (*manifest.inputs, *manifest.outputs):
        yield from ((f"tensor '{spec.name}'.shape", d) for d in spec.shape if _symbolic(d))
    if _symbolic(manifest.arena_bytes):
        yield "arena_bytes", manifest.arena_bytes
    for i, launch in enumerate(manifest.launches):
        where = f"launches[{i}] ({launch.kernel})"
        yield from ((f"{where}.grid", g) for g in launch.grid if _symbolic(g))
        for j, arg in enumerate(launch.args):
            if isinstance(arg, SizeArg) and _symbolic(arg.size):
                yield f"{where}.args[{j}].size", arg.size
            elif _is_arena(arg):
                yield from ((f"{where}.args[{j}]", d) for d in (arg.offset, *arg.shape) if _symbolic(d))
    for i, check in enumerate(manifest.checks):
        yield from ((f"checks[{i}]", e) for e in check[:2])


def validate_dynamic(manifest) -> None:
    """Every expression parses and names only dims the inputs define; the
    document is a valid static manifest at a sample size (every dim 64:
    large enough for the sizes a slice or a runtime check leaves)."""
    dims = dim_sources(manifest)
    for where, text in _expressions(manifest):
        try:
            expr = parse_shape_expr(text)
        except ShapeExprError as exc:
            raise ManifestError(f"{where}: {exc}") from None
        unknown = [n for n in expr.names if n not in dims]
        if unknown:
            raise ManifestError(f"{where}: '{text}' names {', '.join(unknown)}, which no input's shape defines (dims: {', '.join(dims) or 'none'})")
    specialize(manifest, dict.fromkeys(dims, 64))


def specialize(manifest, dims: dict[str, int]):
    """The static manifest of one call: every expression evaluated at `dims`;
    a launch whose grid is empty there is left out."""

    def sized(buffer):
        return dataclasses.replace(buffer, shape=tuple(evaluate(d, dims) for d in buffer.shape))

    launches = []
    for launch in manifest.launches:
        grid = tuple(evaluate(g, dims) for g in launch.grid)
        if 0 in grid:
            continue
        for axis, (g, limit) in enumerate(zip(grid, MAX_GRID)):
            if g > limit:
                raise ManifestError(f"launch of {launch.kernel}: grid dimension {'xyz'[axis]} = {g} exceeds {limit} at {dims}")
        args = []
        for arg in launch.args:
            if isinstance(arg, SizeArg):
                arg = SizeArg(evaluate(arg.size, dims), arg.dtype)
            elif _is_arena(arg):
                arg = dataclasses.replace(sized(arg), offset=evaluate(arg.offset, dims))
            args.append(arg)
        launches.append(dataclasses.replace(launch, grid=grid, args=tuple(args)))
    return dataclasses.replace(
        manifest,
        inputs=tuple(sized(s) for s in manifest.inputs),
        outputs=tuple(sized(s) for s in manifest.outputs),
        launches=tuple(launches),
        arena_bytes=evaluate(manifest.arena_bytes, dims),
        checks=(),
        version=None,
    )


# --------------------------------------------------------------------------- building


def _to_sympy(node: ast.AST, names: dict):
    import sympy

    from fusecc.compiler.dims import dim_symbol

    if isinstance(node, ast.Expression):
        return _to_sympy(node.body, names)
    if isinstance(node, ast.Constant):
        return sympy.Integer(node.value)
    if isinstance(node, ast.Name):
        return names[node.id] if node.id in names else dim_symbol(node.id)
    if isinstance(node, ast.UnaryOp):
        return -_to_sympy(node.operand, names)
    if isinstance(node, ast.Call):
        args = [_to_sympy(a, names) for a in node.args]
        return (sympy.Max if node.func.id == "max" else sympy.Min)(*args)
    a, b = _to_sympy(node.left, names), _to_sympy(node.right, names)
    if isinstance(node.op, ast.Add):
        return a + b
    if isinstance(node.op, ast.Sub):
        return a - b
    if isinstance(node.op, ast.Mult):
        return a * b
    if isinstance(node.op, ast.FloorDiv):
        return sympy.floor(a / b)
    return sympy.Mod(a, b)


def in_dims(text: str, sizes: dict[str, str | int]) -> str | int:
    """The expression `text` over a kernel's argument sizes (`a0_1`) as an
    expression of the program's dims, given each argument size's expression
    (`sizes`); simplified, an int when it is constant."""
    parse_shape_expr(text)  # the grammar is checked before anything is built from it
    substituted = {name: _to_sympy(ast.parse(str(size), mode="eval"), {}) for name, size in sizes.items()}
    expr = _to_sympy(ast.parse(text, mode="eval"), substituted)
    try:
        out = from_sympy(int(expr) if expr.is_Integer else expr)
    except ShapeExprError:  # a form from_sympy cannot write: substitute as text instead
        out = ast.unparse(_Substitute(sizes).visit(ast.parse(text, mode="eval")))
    out = parse_shape_expr(out)
    return out.constant if out.constant is not None else out.text


class _Substitute(ast.NodeTransformer):
    def __init__(self, sizes):
        self.sizes = sizes

    def visit_Name(self, node):
        if node.id in self.sizes:
            return ast.parse(f"({self.sizes[node.id]})", mode="eval").body
        return node


__all__ = ["ManifestError", "SizeArg", "dim_sources", "evaluate", "in_dims", "is_dynamic", "specialize", "validate_dynamic"]
