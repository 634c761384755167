"""A tensor program's `?` dims fixed to sizes: `--shape` on a `.ir` program.

`--shape B=8` fixes the dim named B (by `fusecc.dims`, or s0, s1, ... for
dims nobody named); `--shape x=8x128x64` fixes every `?` of the argument
`%x` (its static dims must match). Every function whose arguments carry a
named dim is specialised: each value's type has those dims replaced by the
sizes, op attributes that name them (a slice's `stop`, an op's
`fusecc.dims`) follow, and the module is verified again, so that a check
only a run could make before (a reshape's row count must be whole, two
dims must be equal) is now made, with the op's location. Dims left out stay
`?`. bisect writes its reproducer of a `?` group this way, at the sizes of
the call that showed the fault.
"""

from __future__ import annotations

from typing import Mapping

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import UsageError, error
from fusecc.compiler.dim_binding import DIMS_ATTR, parse_dim, substitute_dims
from fusecc.compiler.dims import dim_symbol, normalize_dim, sympy
from fusecc.compiler.ir import Operation
from fusecc.compiler.types import FunctionType
from fusecc.dialects import func as F


def dims_of_shapes(module: Operation, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """`--shape` entries (a dim's name -> (size,), an argument's name -> its
    shape) as sizes of named dims. Raises UsageError for a name that is
    neither, or a shape that does not fit its argument."""
    dims: dict[str, int] = {}
    known_dims: set[str] = set()
    arguments: dict[str, list] = {}
    for function in module.walk():
        if not isinstance(function, F.FuncOp):
            continue
        for arg in function.body.args:
            shape = getattr(arg.type, "shape", ())
            known_dims |= {str(d) for d in shape if type(d) is not int and d.is_Symbol}
            if arg.name_hint:
                arguments.setdefault(arg.name_hint, []).append(arg)
    for name, values in shapes.items():
        if name in arguments:
            for arg in arguments[name]:
                shape = arg.type.shape
                if len(values) != len(shape) or any(type(d) is int and d != v for d, v in zip(shape, values)):
                    raise UsageError(f"--shape {name}={'x'.join(map(str, values))} does not fit %{name}: {arg.type}")
                for d, v in zip(shape, values):
                    if type(d) is not int and d.is_Symbol:
                        _bind(dims, str(d), v, name)
        elif name in known_dims:
            if len(values) != 1:
                raise UsageError(f"--shape {name}=N gives one size for the dim {name}, not {'x'.join(map(str, values))}")
            _bind(dims, name, values[0], name)
        else:
            known = ", ".join(sorted(known_dims)) or "none"
            raise UsageError(f"--shape {name}: no argument or dynamic dim of this program is named '{name}' (dims: {known}; or an argument's name, e.g. --shape x=8x128)")
    return dims


def _bind(dims: dict[str, int], name: str, value: int, given: str) -> None:
    if dims.get(name, value) != value:
        raise UsageError(f"--shape {given} gives {name} = {value}, another --shape gave {dims[name]}")
    dims[name] = value


def specialise(module: Operation, dims: Mapping[str, int]) -> None:
    """`module`'s dims named in `dims` at those sizes, in place (see the
    module doc); the caller verifies it again. Raises DiagnosticError when a dim
    of some value is then not a whole number (a reshape's 16*S/3 at S=4),
    a located error."""
    if not dims:
        return
    mapping = {dim_symbol(n): sympy().Integer(v) for n, v in dims.items()}
    for op in module.walk():
        if isinstance(op, F.FuncOp):
            inputs = [substitute_dims(t, mapping) for t in op.function_type.inputs]
            op.attributes["function_type"] = A.TypeAttr(FunctionType(inputs, [substitute_dims(t, mapping) for t in op.function_type.results]))
            if DIMS_ATTR in op.attributes:
                left = [[str(d) for d in getattr(arg.type, "shape", ()) if type(d) is not int and d not in mapping] for arg in op.body.args]
                op.attributes[DIMS_ATTR] = A.from_python(left)
                if not any(left):
                    del op.attributes[DIMS_ATTR]
        else:
            op.attributes.pop(DIMS_ATTR, None)  # the printer names what is still `?` (dim_binding.printed_attributes)
            for key, value in list(op.attributes.items()):
                if isinstance(value, A.ArrayAttr) and any(isinstance(e, A.StringAttr) for e in value.elements):
                    op.attributes[key] = _bounds(value, mapping)
        for value in (*op.results, *(a for r in op.regions for b in r.blocks for a in b.args)):
            value.type = substitute_dims(value.type, mapping)
            for d in getattr(value.type, "shape", ()):
                if type(d) is not int and not d.free_symbols:
                    at = ", ".join(f"{n}={v}" for n, v in sorted(dims.items()))
                    raise error(op.location, f"'{op.name}' gets a dim of {d}, not a whole number, at --shape {at}")


def _bounds(value: A.ArrayAttr, mapping: dict) -> A.Attribute:
    """An array attribute whose strings are dim expressions (a slice's
    `stop = [1, "S"]`) with the fixed dims replaced: a fixed entry becomes its int."""
    if not all(isinstance(e, (A.StringAttr, A.IntegerAttr)) for e in value.elements):
        return value
    out = []
    for e in value.elements:
        if isinstance(e, A.StringAttr):
            try:
                d = normalize_dim(parse_dim(e.value).xreplace(mapping))
            except (ValueError, AttributeError):
                out.append(e.value)
                continue
            out.append(d if type(d) is int else e.value if not (d.free_symbols & set(mapping)) else str(d))
        else:
            out.append(e.value)
    return A.from_python(out)


__all__ = ["dims_of_shapes", "specialise"]
