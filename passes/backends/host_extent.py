"""A kernel's launch extent as an expression the host evaluates per call.

With `?` dims a kernel computes its extents at its top from `loop.dim`s of
its arguments, constants and index arithmetic (docs/dynamic-shapes.md). The
runtime needs the same number before the launch: the CPU runtime to split a
`worker` loop, the CUDA manifest for a grid dimension. `host_extent` reads
that computation back as a ShapeExpr over the arguments' sizes, `a{i}_{axis}`
for axis `axis` of argument `i`.
"""

from __future__ import annotations

from fusecc.compiler.diagnostics import error
from fusecc.compiler.ir import Value
from fusecc.compiler.shape_expr import parse_shape_expr
from fusecc.dialects import loop

_HOST_OPS = {"arith.add": "+", "arith.sub": "-", "arith.mul": "*", "arith.div": "//", "arith.rem": "%", "arith.max": "max", "arith.min": "min"}


def arg_size_name(arg_index: int, axis: int) -> str:
    """The name of an argument's axis size in a host extent."""
    return f"a{arg_index}_{axis}"


def host_extent(value: Value, kernel: loop.KernelOp, what: str = "worker extent"):
    """The extent `value` as a ShapeExpr over the arguments' sizes: it must be
    computed at the kernel's top from `loop.dim`, constants and index
    arithmetic (sizes are not negative, so truncating division is floor
    division)."""
    args = {arg: i for i, arg in enumerate(kernel.body.args)}

    def text(v: Value) -> str:
        op = v.defining_op
        if op is None or op.parent_op is not kernel:
            raise error(kernel.location, f"kernel @{kernel.sym_name}: the {what} must be computed at the kernel's top from loop.dim and constants")
        if isinstance(op, loop.DimOp) and op.source in args:
            return arg_size_name(args[op.source], op.axis)
        if op.name == "arith.constant":
            return str(op.attr("value").value)
        symbol = _HOST_OPS.get(op.name)
        if symbol is None:
            raise error(op.location, f"kernel @{kernel.sym_name}: '{op.name}' cannot compute a {what} on the host")
        a, b = (text(o) for o in op.operands)
        return f"{symbol}({a}, {b})" if symbol.isalpha() else f"({a} {symbol} {b})"

    return parse_shape_expr(text(value))


__all__ = ["arg_size_name", "host_extent"]
