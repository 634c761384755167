"""Lowering functions with `?` dims to loops (docs/dynamic-shapes.md, below
the tensor level).

The templates build kernels over memrefs whose dims are the tensor level's
sympy expressions (`B*S`), so a template asks for a size by its expression
and the kernel builder computes it from its arguments' `loop.dim`s
(`KernelBuilder.runtime_size`). When a function is lowered, `erase_dims`
turns every such memref into the loop level's `memref<?x...>` and writes the
expressions as text where the schedule needs them: `arg_sizes` on the
schedule, `sizes` on its views. Which groups the templates can lower with
`?` dims yet is decided here, up front, with a located error for the rest.
"""

from __future__ import annotations

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import error
from fusecc.compiler.dims import unbound_dim
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.shape_expr import from_sympy
from fusecc.compiler.traits import Elementwise
from fusecc.compiler.types import MemRefType, TensorType
from fusecc.dialects import loop
from fusecc.dialects.fusion import GroupOp

# Group kinds whose templates take `?` dims, with the ops they may hold (on a
# GPU the grid is computed at launch, the block is fixed: SUPPORTED_GPU).
# (A template that meets a size it cannot handle raises; the driver reports
# that as not supported too: `not_supported`.)
SUPPORTED = {
    "elementwise": lambda op: True,
    "injective": lambda op: True,
    "reduction": lambda op: op.name not in ("tensor.matmul", "tensor.attention"),
    "attention": lambda op: True,
    "horizontal": lambda op: op.name != "tensor.attention",
    "matmul": lambda op: True,  # `?` in either operand: runtime M, N, K and batch
}


def _shaped_values(op: Operation):
    for inner in op.walk():
        for v in list(inner.results) + [a for r in inner.regions for b in r.blocks for a in b.args]:
            if isinstance(v.type, (TensorType, MemRefType)):
                yield v


def is_dynamic(group: GroupOp) -> bool:
    return any(not v.type.is_static for v in _shaped_values(group))


def shapes_key(group: GroupOp) -> tuple:
    """The group's shapes with their dim expressions (`?` prints alike)."""
    return tuple(str(tuple(v.type.shape)) for v in list(group.operands) + list(group.results))


def _static_rhs(op: Operation) -> bool:
    return op.name != "tensor.matmul" or all(type(d) is int for d in op.operands[1].type.shape)


# The GPU matmul template takes `?` batch and rows only: K and N static.
SUPPORTED_GPU = {**SUPPORTED, "horizontal": lambda op: SUPPORTED["horizontal"](op) and _static_rhs(op), "matmul": _static_rhs}


def target_words(hw) -> str:
    return f"on target cuda ({hw.name})" if hw.is_gpu else "on the CPU"


def check_supported(func: Operation, hw) -> None:
    """A located error for what cannot be lowered with `?` dims yet."""
    for group in func.walk():
        if not isinstance(group, GroupOp) or not is_dynamic(group):
            continue
        kind = group.attr("kind")
        allowed = (SUPPORTED_GPU if hw.is_gpu else SUPPORTED).get(kind)
        refused = next((op for op in group.body_ops() if allowed is None or not allowed(op)), None)
        if refused is not None:
            raise error(
                refused.location,
                f"'{refused.name}' in a {kind} group with '?' dims is not supported yet {target_words(hw)} (docs/dynamic-shapes.md); "
                "give the dims sizes (--shape) or use --target reference",
            )


def runtime_checks(func: Operation) -> list[list[str]]:
    """The function's runtime dim checks (compiler/dims.py: what shape
    inference could not decide, say B == S for an add), as the schedule's
    `dim_checks`: [lhs, rhs, where, what] with lhs and rhs shape expressions."""
    from fusecc.compiler.dims import runtime_checks as tensor_checks

    out = []
    for check in tensor_checks(func):
        loc = check.location
        where = f"{loc.file}:{loc.line}:{loc.col}" if hasattr(loc, "line") else str(loc)
        out.append([from_sympy(check.lhs), from_sympy(check.rhs), where, f"'{check.op_name}' op {check.message} ({check.lhs} == {check.rhs})"])
    return out


def not_supported(group: GroupOp, reason: Exception, hw=None):
    """The located error for a group a template could not lower with `?`
    sizes (a size it must compare at compile time, say)."""
    where = "on the CPU" if hw is None else target_words(hw)
    return error(group.location, f"group {group.attr('id')} ({group.attr('kind')}) with '?' dims is not supported yet {where} ({reason}); give the dims sizes (--shape) or use --target reference (docs/dynamic-shapes.md)")


def erased(t):
    """The loop level's type: every dynamic dim is the bare `?`."""
    if isinstance(t, MemRefType) and t.has_dynamic_shape:
        return MemRefType([d if type(d) is int else unbound_dim() for d in t.shape], t.element_type, t.memory_space)
    return t


def size_texts(t: MemRefType) -> list[str]:
    return [from_sympy(t.shape[axis]) for axis in t.dynamic_axes]


def _erase(value: Value) -> None:
    value.type = erased(value.type)


def erase_dims(schedule: loop.ScheduleOp, kernels) -> None:
    """The loop level's `memref<?x..>` everywhere, the sizes as text."""
    schedule.attributes["arg_sizes"] = A.from_python([size_texts(a.type) for a in schedule.body.args])
    for arg in schedule.body.args:
        _erase(arg)
    for op in schedule.body:
        if isinstance(op, (loop.ArenaViewOp, loop.ViewOp)) and op.result.type.has_dynamic_shape:
            op.attributes["sizes"] = A.from_python(size_texts(op.result.type))
        for result in op.results:
            _erase(result)
    for kernel in kernels:
        for arg in kernel.body.args:
            _erase(arg)
        for op in kernel.walk():
            for result in op.results:
                _erase(result)


__all__ = ["SUPPORTED", "SUPPORTED_GPU", "check_supported", "runtime_checks", "erase_dims", "erased", "is_dynamic", "shapes_key", "size_texts"]

