"""The `loop` dialect's host schedule: `loop.schedule` and its ops.

A schedule takes the program's inputs then its outputs; every other buffer
is a view at a byte offset of one arena (`loop.arena_view`) or an aliasing
view of another buffer (`loop.view`); `loop.launch` runs a kernel and
`loop.copy` copies between global buffers, in order. With dynamic shapes,
sizes and offsets are expressions of the schedule's named dims
(compiler/shape_expr.py), bound per call from the inputs' shapes
(`DimBinding`). The dialect's overview is `loop.py`; kernels are
`loop_kernel.py`.
"""

from __future__ import annotations

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Block, Operation, Region, VerifyError
from fusecc.compiler.op_definitions import (
    ANY,
    INT,
    REQUIRED,
    STRING,
    STRING_ARRAY,
    SYMBOL,
    AttrDef,
    AttrKind,
    OperandDef,
    ResultDef,
    register_op,
)
from fusecc.compiler.symbols import lookup_symbol
from fusecc.compiler.shape_expr import ShapeExprError, parse_shape_expr
from fusecc.compiler.traits import IsolatedFromAbove, Pure, Symbol
from fusecc.compiler.types import MemRefType
from fusecc.dialects.loop_kernel import KernelOp, ReturnOp, expect_memref


# A byte count or offset: an integer, or (dynamic shapes) an expression over
# the schedule's named dims, compiler/shape_expr.py.
INT_OR_EXPR = AttrKind("integer or shape expression", lambda a: isinstance(a, (A.IntegerAttr, A.StringAttr)))


def expect_expr(text, what: str):
    try:
        return parse_shape_expr(text)
    except ShapeExprError as exc:
        raise VerifyError(f"{what}: {exc}") from None


class ShapeMismatch(ValueError):
    """A call's input shapes disagree with the schedule's types or dims."""


@register_op
class ScheduleOp(Operation):
    name = "loop.schedule"
    traits = frozenset({Symbol, IsolatedFromAbove})
    custom_symbol = "sym_name"
    attr_defs = (
        AttrDef("sym_name", STRING, REQUIRED),
        AttrDef("arena_size", INT_OR_EXPR, 0, doc="bytes of the one arena holding every intermediate (an expression of the dims when dynamic)"),
        AttrDef("inputs", STRING_ARRAY, REQUIRED, doc="names of the leading arguments"),
        AttrDef("outputs", STRING_ARRAY, REQUIRED, doc="names of the trailing arguments"),
        AttrDef("arg_sizes", ANY, None, doc="per argument, the size of each '?' axis: a dim name (inputs) or an expression of the dims"),
        AttrDef("dim_checks", ANY, None, doc="[lhs, rhs, where, what]: dims that must be equal at run time (shape inference could not tell)"),
    )
    region_count = 1

    @classmethod
    def build(cls, name: str, input_types, output_types, input_names, output_names, location=None) -> "ScheduleOp":
        attrs = {
            "sym_name": A.StringAttr(name),
            "arena_size": A.IntegerAttr(0),
            "inputs": A.from_python(list(input_names)),
            "outputs": A.from_python(list(output_names)),
        }
        block = Block(list(input_types) + list(output_types))
        for arg, hint in zip(block.args, list(input_names) + list(output_names)):
            arg.name_hint = hint
        kwargs = {} if location is None else {"location": location}
        return cls([], [], attrs, [Region([block])], **kwargs)

    @property
    def sym_name(self) -> str:
        return self.attr("sym_name")

    @property
    def input_args(self):
        return self.body.args[: len(self.inputs)]

    @property
    def output_args(self):
        return self.body.args[len(self.inputs) :]

    def launches(self) -> list["LaunchOp"]:
        return [op for op in self.body if isinstance(op, LaunchOp)]

    @property
    def is_dynamic(self) -> bool:
        return any(arg.type.has_dynamic_shape for arg in self.body.args if isinstance(arg.type, MemRefType))

    def argument_sizes(self) -> list[list[str]]:
        """Per argument, the expressions of its '?' axes ([] when static)."""
        found = self.attributes.get("arg_sizes")
        if found is None:
            return [[] for _ in self.body.args]
        if not isinstance(found, A.ArrayAttr):
            return [None for _ in self.body.args]
        return [[str(e.value) for e in entry.elements] if isinstance(entry, A.ArrayAttr) else None for entry in found.elements]

    def dim_sources(self) -> dict[str, tuple[int, int]]:
        """Each named dim -> (input, axis) that defines it: the first input
        axis spelled with the bare name. Others naming it are checked."""
        sources: dict[str, tuple[int, int]] = {}
        for i, (arg, sizes) in enumerate(zip(self.input_args, self.argument_sizes())):
            for axis, size in zip(arg.type.dynamic_axes, sizes):
                if size.isidentifier():
                    sources.setdefault(size, (i, axis))
        return sources

    def bind_dims(self, input_shapes) -> dict[str, int]:
        """The named dims of one call, from its inputs' shapes; raises
        ShapeMismatch when the shapes disagree with the types or each other.
        (Runtimes that call this per call keep a `DimBinding` instead.)"""
        return DimBinding(self).bind(input_shapes)

    def _verify_sizes(self) -> None:
        sizes = self.argument_sizes()
        if len(sizes) != len(self.body.args):
            raise VerifyError(f"'arg_sizes' has {len(sizes)} entries for {len(self.body.args)} arguments")
        for i, (arg, entry) in enumerate(zip(self.body.args, sizes)):
            if entry is None or len(entry) != len(arg.type.dynamic_axes):
                raise VerifyError(f"'arg_sizes' entry {i} must list one size per '?' of {arg.type}")
        defined = self.dim_sources()
        checks = self.attributes.get("dim_checks")
        for entry in checks.elements if isinstance(checks, A.ArrayAttr) else ():
            if not isinstance(entry, A.ArrayAttr) or len(entry.elements) != 4 or not all(isinstance(e, A.StringAttr) for e in entry.elements):
                raise VerifyError("'dim_checks' entries are [lhs, rhs, where, what], all strings")
            sizes = sizes + [[entry.elements[0].value, entry.elements[1].value]]
        for entry in sizes:
            for size in entry:
                missing = [n for n in expect_expr(size, "arg_sizes").names if n not in defined]
                if missing:
                    raise VerifyError(f"dim {missing[0]} is not the size of any input axis")

    def verify_(self) -> None:
        if len(self.body.args) != len(self.inputs) + len(self.outputs):
            raise VerifyError(f"takes {len(self.body.args)} arguments but names {len(self.inputs)} inputs and {len(self.outputs)} outputs")
        for arg in self.body.args:
            t = expect_memref(arg.type, "argument")
            if t.memory_space != "global":
                raise VerifyError("arguments live in global memory")
        if self.is_dynamic or "arg_sizes" in self.attributes:
            self._verify_sizes()
        if not isinstance(self.arena_size, int):
            expect_expr(self.arena_size, "arena_size")
        if not isinstance(self.body.last_op, ReturnOp):
            raise VerifyError("body must end with 'loop.return'")


class DimBinding:
    """A schedule's dims bound from input shapes: what to read and what to
    check, worked out once, so a call pays only for the comparisons."""

    def __init__(self, schedule: ScheduleOp):
        sizes = schedule.argument_sizes()
        sources = schedule.dim_sources()
        self.input_names = list(schedule.inputs)
        self.types = [arg.type for arg in schedule.input_args]
        self.defines = [(name, i, axis) for name, (i, axis) in sources.items()]
        self.names = tuple(sorted(sources))
        self.checks = []  # (input, axis, static size or ShapeExpr, text of the expression or None)
        for i, t in enumerate(self.types):
            expected = dict(zip(t.dynamic_axes, sizes[i]))
            for axis, want in enumerate(t.shape):
                if type(want) is int:
                    self.checks.append((i, axis, want, None))
                elif sources.get(expected[axis]) != (i, axis):
                    self.checks.append((i, axis, parse_shape_expr(expected[axis]), expected[axis]))
        self.sources = sources
        found = schedule.attributes.get("dim_checks")
        self.dim_checks = []  # (lhs, rhs, where, what)
        for entry in found.elements if isinstance(found, A.ArrayAttr) else ():
            lhs, rhs, where, what = (e.value for e in entry.elements)
            self.dim_checks.append((parse_shape_expr(lhs), parse_shape_expr(rhs), where, what))

    def bind(self, input_shapes) -> dict[str, int]:
        for i, (t, shape) in enumerate(zip(self.types, input_shapes)):
            if len(shape) != t.rank:
                raise ShapeMismatch(f"input {self.input_names[i]} has shape {list(shape)}, expected rank {t.rank} ({t})")
        dims = {name: int(input_shapes[i][axis]) for name, i, axis in self.defines}
        for name, i, axis in self.defines:
            if dims[name] == 0:
                raise ShapeMismatch(f"input {self.input_names[i]} axis {axis} is 0, but a dynamic dim ('{name}') must be at least 1 (docs/dynamic-shapes.md)")
        for i, axis, want, text in self.checks:
            got = input_shapes[i][axis]
            if text is None:
                if got != want:
                    raise ShapeMismatch(f"input {self.input_names[i]} has shape {list(input_shapes[i])}, expected {list(self.types[i].shape)}")
                continue
            value = want.evaluate(dims)
            if got != value:
                origin = self.sources.get(text)
                where = f" (from input {self.input_names[origin[0]]} axis {origin[1]})" if origin else ""
                raise ShapeMismatch(f"input {self.input_names[i]} axis {axis} has size {got}, but {text} = {value}{where}")
        for lhs, rhs, where, what in self.dim_checks:
            if lhs.evaluate(dims) != rhs.evaluate(dims):
                sizes = ", ".join(f"{n} = {dims[n]}" for n in sorted(set(lhs.names) | set(rhs.names)))
                raise ShapeMismatch(f"{where}: {what}, which fails at run time with {sizes}")
        return dims


@register_op
class ArenaViewOp(Operation):
    """A buffer at byte `offset` of the schedule's arena."""

    name = "loop.arena_view"
    traits = frozenset({Pure})
    result_defs = (ResultDef("result"),)
    attr_defs = (
        AttrDef("offset", INT_OR_EXPR, REQUIRED),
        AttrDef("sizes", STRING_ARRAY, (), doc="the size of each '?' axis of the result, an expression of the schedule's dims"),
    )

    @property
    def byte_range(self) -> tuple[int, int]:
        return self.offset, self.offset + self.result.type.byte_size

    def verify_(self) -> None:
        t = expect_memref(self.result.type, "result")
        schedule = self.parent_op
        if not isinstance(schedule, ScheduleOp):
            raise VerifyError("must be directly inside a 'loop.schedule'")
        _verify_view_sizes(self, t)
        if t.has_dynamic_shape or not isinstance(self.offset, int) or not isinstance(schedule.arena_size, int):
            expect_expr(self.offset, "offset")  # placed by a symbolic plan: memory_check proves it at sizes
            return
        if self.offset < 0 or self.offset % t.element_type.byte_size:
            raise VerifyError(f"offset {self.offset} is not aligned to {t.element_type.byte_size} bytes")
        if self.offset + t.byte_size > schedule.arena_size:
            raise VerifyError(f"bytes [{self.offset}, {self.offset + t.byte_size}) exceed the arena of {schedule.arena_size} bytes")


@register_op
class ViewOp(Operation):
    """Another shape for (part of) a buffer: `loop.view %b {offset = 0}`; used for reshapes."""

    name = "loop.view"
    traits = frozenset({Pure})
    operand_defs = (OperandDef("source"),)
    result_defs = (ResultDef("result"),)
    attr_defs = (
        AttrDef("offset", INT_OR_EXPR, 0, doc="byte offset into the source"),
        AttrDef("sizes", STRING_ARRAY, (), doc="the size of each '?' axis of the result, an expression of the schedule's dims"),
    )

    def verify_(self) -> None:
        source = expect_memref(self.source.type, "source")
        t = expect_memref(self.result.type, "result")
        if t.memory_space != source.memory_space:
            raise VerifyError("a view stays in its source's memory space")
        _verify_view_sizes(self, t)
        if t.has_dynamic_shape or source.has_dynamic_shape or not isinstance(self.offset, int):
            if not isinstance(self.parent_op, ScheduleOp):
                raise VerifyError("views of dynamic shape are made in a 'loop.schedule' (their sizes are expressions of its dims)")
            expect_expr(self.offset, "offset")
            return
        if self.offset < 0 or self.offset + t.byte_size > source.byte_size:
            raise VerifyError(f"view of {t.byte_size} bytes at offset {self.offset} exceeds the {source.byte_size}-byte source")


def evaluate_size(value, dims) -> int:
    """An int attribute as is; an expression of the dims, evaluated."""
    return value if isinstance(value, int) else parse_shape_expr(value).evaluate(dims)


def concrete_type(op: Operation, dims) -> MemRefType:
    """The type of a view's (or arena view's) result at one call's dims."""
    t = op.result.type
    return t.with_sizes([evaluate_size(e, dims) for e in op.sizes]) if t.has_dynamic_shape else t


def _verify_view_sizes(op: Operation, t: MemRefType) -> None:
    sizes = op.sizes
    if len(sizes) != len(t.dynamic_axes):
        raise VerifyError(f"'sizes' must give one expression per '?' of {t}, but has {len(sizes)}")
    for size in sizes:
        expect_expr(size, "sizes")


@register_op
class LaunchOp(Operation):
    """`loop.launch @kernel(%a, %b) : memref<..>, memref<..>`: run a kernel."""

    name = "loop.launch"
    custom_symbol = "kernel"
    operand_defs = (OperandDef("args", variadic=True),)
    attr_defs = (
        AttrDef("kernel", SYMBOL, REQUIRED),
        AttrDef("group", INT, None, doc="the fusion group this launch computes, where its kernel was lowered for another, identical one (a model's repeated layers)"),
    )

    @property
    def kernel_name(self) -> str:
        return self.attributes["kernel"].value

    def resolve(self) -> KernelOp | None:
        found = lookup_symbol(self, self.kernel_name)
        return found if isinstance(found, KernelOp) else None

    def verify_(self) -> None:
        kernel = self.resolve()
        if kernel is None:
            raise VerifyError(f"launches @{self.kernel_name}, which is not a kernel of this module")
        expected = [a.type for a in kernel.body.args]
        actual = [v.type for v in self.operands]
        if expected != actual:
            raise VerifyError(f"argument types ({', '.join(map(str, actual))}) differ from @{self.kernel_name}'s ({', '.join(map(str, expected))})")


@register_op
class CopyOp(Operation):
    """Host-side copy between two global buffers of the same size."""

    name = "loop.copy"
    operand_defs = (OperandDef("source"), OperandDef("target"))

    def verify_(self) -> None:
        a = expect_memref(self.source.type, "source")
        b = expect_memref(self.target.type, "target")
        if a.has_dynamic_shape or b.has_dynamic_shape:
            return  # sizes known per call: the runtimes check them
        if a.byte_size != b.byte_size:
            raise VerifyError(f"copies {a.byte_size} bytes into a {b.byte_size}-byte buffer")
