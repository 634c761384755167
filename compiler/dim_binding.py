"""Binding the `?` dims of a parsed function to named symbols.

The text spells a dynamic dim `?` (MLIR). While a function is read, each `?`
of its arguments becomes a symbol: the name the function's `fusecc.dims`
attribute gives it, or a fresh `s0, s1, ...`. Each `?` of an op result then
becomes the expression its shape inference derives (`B*S` after a reshape
of `?x?x384` to `?x384`), so that every type of the function is an
expression of its arguments' symbols (compiler/dims.py).
"""

from __future__ import annotations

from typing import Sequence

from fusecc.compiler import attributes as A
from fusecc.compiler.dims import dim_symbol, dims_equal, is_unbound, normalize_dim, sympy, unbound_dim
from fusecc.compiler.ir import VerifyError
from fusecc.compiler.types import FunctionType, ShapedType, TensorType, Type, dim_compatible, type_compatible

DIMS_ATTR = "fusecc.dims"


def has_unbound(t: Type) -> bool:
    if isinstance(t, FunctionType):
        return any(has_unbound(x) for x in (*t.inputs, *t.results))
    return isinstance(t, ShapedType) and not t.is_static and any(is_unbound(d) for d in t.shape if type(d) is not int)


def _argument_names(dims_attr, arg_types: Sequence[Type]) -> list[list[str]]:
    """The names `fusecc.dims` gives each argument's `?` dims, checked."""
    if not isinstance(dims_attr, A.ArrayAttr) or len(dims_attr.elements) != len(arg_types):
        raise ValueError(
            f"'{DIMS_ATTR}' must be an array with one entry per argument ({len(arg_types)}), each an array of the "
            f"names of that argument's '?' dims, e.g. [[\"B\", \"S\"], []]"
        )
    names = []
    for index, (entry, t) in enumerate(zip(dims_attr.elements, arg_types)):
        wanted = sum(1 for d in getattr(t, "shape", ()) if type(d) is not int)
        if not isinstance(entry, A.ArrayAttr) or not all(isinstance(e, A.StringAttr) for e in entry.elements):
            raise ValueError(f"'{DIMS_ATTR}' entry {index} must be an array of dim names (strings), but is {entry}")
        given = [e.value for e in entry.elements]
        if len(given) != wanted:
            raise ValueError(f"'{DIMS_ATTR}' names {len(given)} dims of argument {index}, which has {wanted} '?' dims ({t})")
        for name in given:
            if not name.isidentifier() or name == "_":
                raise ValueError(f"dim name '{name}' in '{DIMS_ATTR}' must be an identifier")
        names.append(given)
    return names


def bind_arguments(arg_types: Sequence[Type], dims_attr=None) -> list[Type]:
    """The argument types with each `?` bound to its symbol. Raises
    ValueError for a malformed `fusecc.dims`."""
    if dims_attr is None and not any(has_unbound(t) for t in arg_types):
        return list(arg_types)
    if dims_attr is not None:
        names = _argument_names(dims_attr, arg_types)
    else:
        counter = iter(range(1 << 30))
        names = [[f"s{next(counter)}" for d in getattr(t, "shape", ()) if type(d) is not int] for t in arg_types]
    bound = []
    for t, arg_names in zip(arg_types, names):
        if not isinstance(t, TensorType) or t.is_static:
            bound.append(t)
            continue
        queue = iter(arg_names)
        bound.append(TensorType([d if type(d) is int else dim_symbol(next(queue)) for d in t.shape], t.element_type))
    return bound


def same_spelling(a: Type, b: Type) -> bool:
    """Equal up to the names of dynamic dims: what the text can tell apart
    (a call's argument `B` may stand for the callee's `s0`)."""
    return a is b or str(a) == str(b)


def parse_dim(text: str):
    """A dim written in `fusecc.dims` on an op: a name (`S`) or an
    expression of names (`B*S`), read by sympy with every name a dim."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9_*+\-/ (),]+", text):
        raise ValueError(f"'{text}' is not a dim name or an expression of dim names")
    functions = {"Min": sympy().Min, "Max": sympy().Max, "floor": sympy().floor, "ceiling": sympy().ceiling, "Mod": sympy().Mod}
    names = {n: dim_symbol(n) for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text) if n not in functions}
    names.update(functions)
    try:
        return normalize_dim(sympy().sympify(text, locals=names))
    except (sympy().SympifyError, TypeError, SyntaxError) as exc:
        raise ValueError(f"'{text}' is not a dim expression: {exc}") from None


def bind_named_results(declared: list[Type], dims_attr) -> list[Type]:
    """An op's `fusecc.dims = ["B", "S"]` names the `?` dims of its (first)
    result, left to right, where its operands cannot tell them (a
    broadcast to a batch dim, a reshape that splits B*S). Raises ValueError."""
    if not declared:
        raise ValueError(f"'{DIMS_ATTR}' names result dims, but the op has no result")
    if not isinstance(dims_attr, A.ArrayAttr) or not all(isinstance(e, A.StringAttr) for e in dims_attr.elements):
        raise ValueError(f"'{DIMS_ATTR}' on an op must be an array of dim names or expressions, e.g. [\"B\", \"S\"]")
    t = declared[0]
    unbound = sum(1 for d in getattr(t, "shape", ()) if type(d) is not int)
    if unbound != len(dims_attr.elements):
        raise ValueError(f"'{DIMS_ATTR}' names {len(dims_attr.elements)} dims, but the result {t} has {unbound} '?' dims")
    queue = iter(parse_dim(e.value) for e in dims_attr.elements)
    return [TensorType([d if type(d) is int else next(queue) for d in t.shape], t.element_type), *declared[1:]]


def call_dim_mapping(params: Sequence[Type], args: Sequence[Type]) -> dict:
    """The callee's dim symbols as the caller's dims, from the types of a
    call's parameters and arguments (`s0 -> N`)."""
    mapping = {}
    for param, arg in zip(params, args):
        for p, a in zip(getattr(param, "shape", ()), getattr(arg, "shape", ())):
            if type(p) is not int and p.is_Symbol and p not in mapping:
                mapping[p] = sympy().Integer(a) if type(a) is int else a
    return mapping


def substitute_dims(t: Type, mapping: dict) -> Type:
    """`t` with the symbols of `mapping` replaced (an inlined callee's types)."""
    if not mapping or not isinstance(t, TensorType) or t.is_static:
        return t
    return TensorType([d if type(d) is int else normalize_dim(d.xreplace(mapping)) for d in t.shape], t.element_type)


def printed_attributes(op) -> dict:
    """The attributes to print: an op whose result dims the text could not
    tell again (a reshape a pass made from B*S rows back to B x S) gets the
    `fusecc.dims` that names them, so that what is printed reads back."""
    attributes = op.attributes
    refine = getattr(type(op), "refine_result_types", None)
    if refine is None or len(op.results) != 1 or DIMS_ATTR in attributes:
        return attributes
    t = op.results[0].type
    if not isinstance(t, TensorType) or t.is_static:
        return attributes
    written = TensorType([d if type(d) is int else unbound_dim() for d in t.shape], t.element_type)
    try:
        if list(refine([v.type for v in op.operands], attributes, [written])) == [t]:
            return attributes
    except VerifyError:
        pass
    return {**attributes, DIMS_ATTR: A.from_python([str(d) for d in t.shape if type(d) is not int])}


def refine_results(op_class, operand_types: list[Type], attributes: dict, declared: list[Type]) -> list[Type]:
    """The result types of an op whose written types have `?` dims: the
    inferred ones (checked against what is written) or, for ops without
    inference, the op's own `refine_result_types`. Raises VerifyError."""
    if op_class.has_type_inference:
        inferred = list(op_class.infer_result_types(operand_types, attributes))
        if len(inferred) != len(declared) or not all(type_compatible(i, d) for i, d in zip(inferred, declared)):
            written = ", ".join(map(str, declared))
            raise VerifyError(f"result type {written} does not match the inferred type {', '.join(map(str, inferred))}")
        return inferred
    refine = getattr(op_class, "refine_result_types", None)
    if refine is None:
        return list(declared)
    return list(refine(operand_types, attributes, declared))


__all__ = ["DIMS_ATTR", "bind_arguments", "bind_named_results", "call_dim_mapping", "printed_attributes", "substitute_dims", "parse_dim", "dim_compatible", "has_unbound", "refine_results", "same_spelling", "type_compatible"]
