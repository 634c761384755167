"""The `loop` dialect: kernels over explicit buffers, and the host schedule.

This is the level both targets consume: the CPU target compiles it through
llvmlite, the CUDA target prints it as CUDA C. Shapes are static, so
buffers are `memref<...xT, space>` with a memory space — `global` (device
or host memory), `shared` (per GPU block), `local` (per thread, registers).

Kernels
-------
    loop.kernel @fused_0 {group = 0, kind = "elementwise"} {
    ^bb0(%in: memref<4096xf32>, %out: memref<4096xf32>):
      loop.parallel {upper = [16], mapping = ["block.x"]} {
      ^bb0(%b: index):
        loop.parallel {upper = [256], mapping = ["thread.x"]} {
        ^bb0(%t: index):
          ...  loads, arith/math, stores
          loop.yield
        }
        loop.yield
      }
      loop.return
    }

`loop.parallel` runs its body once per point of `[0, upper)`, iterations
independent, with a mapping per dimension:
  * GPU: `block.{x,y,z}` (the grid) and `thread.{x,y,z}` (threads of a
    block). A GPU kernel is one block-mapped loop at its top; inside it,
    block-level code (uniform: index arithmetic, `loop.alloc` of shared
    buffers, barriers) and thread-mapped loops, all with the same extents
    (the block size). The iterations of a thread loop run concurrently and
    may meet at `loop.barrier` and exchange values with
    `loop.shuffle_xor` (both at uniform control flow only).
  * CPU: `worker` (spread over cores; outermost), `vector` (innermost,
    contiguous, to be vectorised), and `sequential` (anywhere).
`loop.for %lb, %ub, %step, %inits...` is a sequential loop with
loop-carried values; `loop.if` is a conditional with optional results;
`loop.load`/`loop.store` take one index per dimension and an optional
trailing i1 guard (a guarded-off load gives `padding`).

Host schedule
-------------
    loop.schedule @main {arena_size = 65536, inputs = ["x"], outputs = ["result0"]} {
    ^bb0(%x: memref<64x256xf32>, %result0: memref<64x256xf32>):
      %t0 = loop.arena_view {offset = 0} : () -> memref<64x256xf32>
      loop.launch @fused_0(%x, %t0) : memref<64x256xf32>, memref<64x256xf32>
      loop.launch @fused_1(%t0, %result0) : ...
      loop.return
    }

Its arguments are the program's inputs then its outputs; every other
buffer is a view at a byte offset of one arena (`loop.arena_view`) or an
aliasing view of another buffer (`loop.view`, e.g. a reshape). Launches run
in order. Kernel arguments are thus an arena offset, an input or an output.
"""

from __future__ import annotations

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import (
    ANY,
    AttrKind,
    DENSE,
    INT,
    INT_ARRAY,
    REQUIRED,
    STRING,
    STRING_ARRAY,
    SYMBOL,
    AttrDef,
    Block,
    Operation,
    OperandDef,
    Region,
    ResultDef,
    VerifyError,
    lookup_symbol,
    register_op,
)
from fusecc.compiler.shape_expr import ShapeExprError, parse_shape_expr
from fusecc.compiler.traits import IsolatedFromAbove, Pure, Symbol, Terminator
from fusecc.compiler.types import MemRefType, ScalarType, i1, index

GPU_BLOCK = ("block.x", "block.y", "block.z")
GPU_THREAD = ("thread.x", "thread.y", "thread.z")
CPU_MAPPINGS = ("worker", "vector")
MAPPINGS = GPU_BLOCK + GPU_THREAD + CPU_MAPPINGS + ("sequential",)


# `upper` entry of a `loop.parallel` dimension whose extent is an operand.
DYNAMIC_EXTENT = -1

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


def expect_memref(t, what: str) -> MemRefType:
    if not isinstance(t, MemRefType):
        raise VerifyError(f"{what} must be a memref, but has type {t}")
    return t


def expect_index(values, what: str) -> None:
    for i, v in enumerate(values):
        if v.type is not index:
            raise VerifyError(f"{what} {i} must be an index, but has type {v.type}")


# --------------------------------------------------------------------------- kernels


@register_op
class KernelOp(Operation):
    name = "loop.kernel"
    traits = frozenset({Symbol, IsolatedFromAbove})
    custom_symbol = "sym_name"
    attr_defs = (
        AttrDef("sym_name", STRING, REQUIRED),
        AttrDef("group", INT, None, doc="the fusion group this kernel implements"),
        AttrDef("kind", STRING, None, doc="the group's kind"),
        AttrDef("source", STRING, None, doc="the source locations of the group's ops, for comments"),
    )
    region_count = 1

    @classmethod
    def build(cls, name: str, arg_types, attributes=None, location=None) -> "KernelOp":
        attrs = {"sym_name": A.StringAttr(name)}
        attrs.update({k: A.from_python(v) for k, v in (attributes or {}).items()})
        kwargs = {} if location is None else {"location": location}
        return cls([], [], attrs, [Region([Block(arg_types)])], **kwargs)

    @property
    def sym_name(self) -> str:
        return self.attr("sym_name")

    def parallel_loops(self) -> list["ParallelOp"]:
        return [op for op in self.walk() if isinstance(op, ParallelOp)]

    @property
    def is_gpu(self) -> bool:
        return any(m in GPU_BLOCK + GPU_THREAD for loop in self.parallel_loops() for m in loop.mapping)

    def launch_dims(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid, block) of a GPU kernel, from its mapped loops."""
        grid, block = [1, 1, 1], [1, 1, 1]
        for loop in self.parallel_loops():
            for extent, mapping in zip(loop.upper, loop.mapping):
                if mapping in GPU_BLOCK:
                    grid[GPU_BLOCK.index(mapping)] = extent
                elif mapping in GPU_THREAD:
                    block[GPU_THREAD.index(mapping)] = extent
        return tuple(grid), tuple(block)

    def shared_memory_bytes(self) -> int:
        return sum(op.result.type.byte_size for op in self.walk() if isinstance(op, AllocOp) and op.result.type.memory_space == "shared")

    def verify_(self) -> None:
        for i, arg in enumerate(self.body.args):
            if not isinstance(arg.type, (MemRefType, ScalarType)):
                raise VerifyError(f"argument {i} must be a memref or a scalar, not {arg.type}")
        if not isinstance(self.body.last_op, ReturnOp):
            raise VerifyError("body must end with 'loop.return'")
        loops = self.parallel_loops()
        gpu = {m for loop in loops for m in loop.mapping if m in GPU_BLOCK + GPU_THREAD}
        cpu = {m for loop in loops for m in loop.mapping if m in CPU_MAPPINGS}
        if gpu and cpu:
            raise VerifyError("mixes GPU mappings (block/thread) with CPU mappings (worker/vector)")
        if gpu:
            # `?` sizes reach a GPU kernel as arguments; the grid is computed at launch, the block is fixed.
            if any(loop.maps_threads and loop.dynamic_upper for loop in loops):
                raise VerifyError("thread-mapped loops need static extents (the block size is fixed when the kernel is compiled)")
            self._verify_gpu_structure(loops)

    def _verify_gpu_structure(self, loops) -> None:
        thread_extents = set()
        for loop in loops:
            kinds = {"block" if m in GPU_BLOCK else "thread" if m in GPU_THREAD else "other" for m in loop.mapping}
            if len(kinds) != 1:
                raise VerifyError("a parallel loop maps either blocks or threads, not both")
            kind = kinds.pop()
            enclosing = enclosing_parallel(loop)
            if kind == "block" and enclosing is not None:
                raise VerifyError("block-mapped loops must be at the top of the kernel")
            if kind == "thread":
                if enclosing is None or not enclosing.maps_blocks:
                    raise VerifyError("thread-mapped loops must be directly inside the block-mapped loop")
                thread_extents.add(tuple(loop.upper))
        if len(thread_extents) > 1:
            raise VerifyError(f"thread-mapped loops must all have the block's extents, but have {sorted(thread_extents)}")


def enclosing_parallel(op: Operation) -> "ParallelOp | None":
    return op.parent_of_type(ParallelOp)


@register_op
class ReturnOp(Operation):
    name = "loop.return"
    traits = frozenset({Terminator})


@register_op
class ParallelOp(Operation):
    name = "loop.parallel"
    operand_defs = (OperandDef("dynamic_upper", variadic=True),)
    attr_defs = (
        AttrDef("upper", INT_ARRAY, REQUIRED, doc="extent of each dimension (lower bound 0, step 1); -1: the next operand"),
        AttrDef("mapping", STRING_ARRAY, REQUIRED, doc="hardware dimension of each loop dimension"),
    )
    region_count = 1

    @classmethod
    def build(cls, upper, mapping, location=None) -> "ParallelOp":
        """`upper`: ints, or index Values for extents known at run time."""
        block = Block([index] * len(upper))
        kwargs = {} if location is None else {"location": location}
        static = [u if isinstance(u, int) else DYNAMIC_EXTENT for u in upper]
        dynamic = [u for u in upper if not isinstance(u, int)]
        return cls(dynamic, [], {"upper": A.from_python(static), "mapping": A.from_python(list(mapping))}, [Region([block])], **kwargs)

    @property
    def extents(self) -> list:
        """Each dimension's extent: an int, or the index Value giving it."""
        dynamic = iter(self.operands)
        return [next(dynamic) if u == DYNAMIC_EXTENT else u for u in self.upper]

    @property
    def induction_vars(self):
        return self.body.args

    @property
    def maps_blocks(self) -> bool:
        return any(m in GPU_BLOCK for m in self.mapping)

    @property
    def maps_threads(self) -> bool:
        return any(m in GPU_THREAD for m in self.mapping)

    def verify_(self) -> None:
        upper, mapping = self.upper, self.mapping
        if len(upper) != len(mapping) or not upper:
            raise VerifyError(f"'upper' has {len(upper)} entries but 'mapping' has {len(mapping)}")
        for m in mapping:
            if m not in MAPPINGS:
                raise VerifyError(f"unknown mapping '{m}'; expected one of {', '.join(MAPPINGS)}")
        if len(set(m for m in mapping if m != "sequential")) != len([m for m in mapping if m != "sequential"]):
            raise VerifyError(f"mapping {mapping} uses a hardware dimension twice")
        if any(u < 0 and u != DYNAMIC_EXTENT for u in upper):
            raise VerifyError("extents must not be negative")
        if upper.count(DYNAMIC_EXTENT) != len(self.operands):
            raise VerifyError(f"has {upper.count(DYNAMIC_EXTENT)} dynamic extents (-1) but {len(self.operands)} extent operands")
        expect_index(self.operands, "extent")
        args = self.body.args
        if len(args) != len(upper) or any(a.type is not index for a in args):
            raise VerifyError(f"body must take {len(upper)} index arguments")
        terminator = self.body.last_op
        if not isinstance(terminator, YieldOp) or terminator.operands:
            raise VerifyError("body must end with 'loop.yield' without values")


@register_op
class ForOp(Operation):
    """`%r = loop.for %lb, %ub, %step, %init : (index, index, index, T) -> T { ^bb0(%i: index, %acc: T): ... }`"""

    name = "loop.for"
    operand_defs = (OperandDef("lower"), OperandDef("upper"), OperandDef("step"), OperandDef("inits", variadic=True))
    result_defs = (ResultDef("outputs", variadic=True),)
    attr_defs = (AttrDef("unroll", INT, None, doc="unroll hint"),)
    region_count = 1

    @classmethod
    def build(cls, lower, upper, step, inits=(), location=None) -> "ForOp":
        block = Block([index] + [v.type for v in inits])
        kwargs = {} if location is None else {"location": location}
        return cls([lower, upper, step, *inits], [v.type for v in inits], {}, [Region([block])], **kwargs)

    @property
    def induction_var(self):
        return self.body.args[0]

    @property
    def iter_args(self):
        return self.body.args[1:]

    def verify_(self) -> None:
        expect_index(self.operands[:3], "bound")
        inits = self.operands[3:]
        if [v.type for v in inits] != self.result_types:
            raise VerifyError("result types must match the initial values' types")
        args = self.body.args
        if len(args) != 1 + len(inits) or args[0].type is not index or [a.type for a in args[1:]] != self.result_types:
            raise VerifyError("body must take an index and one argument per loop-carried value")
        terminator = self.body.last_op
        if not isinstance(terminator, YieldOp) or [v.type for v in terminator.operands] != self.result_types:
            raise VerifyError("body must end with 'loop.yield' of the loop-carried values")


@register_op
class IfOp(Operation):
    """`%r = loop.if %cond : (i1) -> T { ... loop.yield %a : T } { ... loop.yield %b : T }`"""

    name = "loop.if"
    operand_defs = (OperandDef("condition"),)
    result_defs = (ResultDef("outputs", variadic=True),)
    region_count = 2

    @classmethod
    def build(cls, condition, result_types=(), location=None) -> "IfOp":
        kwargs = {} if location is None else {"location": location}
        return cls([condition], list(result_types), {}, [Region([Block()]), Region([Block()])], **kwargs)

    @property
    def then_block(self) -> Block:
        return self.regions[0].block

    @property
    def else_block(self) -> Block:
        return self.regions[1].block

    def verify_(self) -> None:
        if self.condition.type is not i1:
            raise VerifyError(f"condition must be i1, not {self.condition.type}")
        for region in self.regions:
            terminator = region.block.last_op
            if not isinstance(terminator, YieldOp) or [v.type for v in terminator.operands] != self.result_types:
                raise VerifyError("each branch must end with 'loop.yield' of the results")


@register_op
class YieldOp(Operation):
    name = "loop.yield"
    traits = frozenset({Terminator})
    operand_defs = (OperandDef("values", variadic=True),)

    def verify_(self) -> None:
        if not isinstance(self.parent_op, (ParallelOp, ForOp, IfOp)):
            raise VerifyError("must end a 'loop.parallel', 'loop.for' or 'loop.if' body")


@register_op
class BarrierOp(Operation):
    """All threads of the block wait here (CUDA `__syncthreads()`)."""

    name = "loop.barrier"

    def verify_(self) -> None:
        kernel = self.parent_of_type(KernelOp)
        if kernel is None or not kernel.is_gpu:
            raise VerifyError("is only valid in a GPU kernel")
        if self.parent_of_type(IfOp) is not None and _inside(self.parent_of_type(IfOp), enclosing_parallel(self)):
            raise VerifyError("must not be under a 'loop.if': every thread has to reach it")


def _inside(inner: Operation, outer: Operation | None) -> bool:
    return outer is None or outer.is_ancestor_of(inner)


@register_op
class ShuffleXorOp(Operation):
    """The value held by the thread whose lane is `lane ^ offset` in the same
    warp (CUDA `__shfl_xor_sync(0xffffffff, v, offset)`)."""

    name = "loop.shuffle_xor"
    operand_defs = (OperandDef("value"),)
    result_defs = (ResultDef("result"),)
    attr_defs = (AttrDef("offset", INT, REQUIRED),)
    has_type_inference = True

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        if not isinstance(operand_types[0], ScalarType):
            raise VerifyError("shuffles a scalar")
        return [operand_types[0]]

    def verify_(self) -> None:
        loop = enclosing_parallel(self)
        if loop is None or not loop.maps_threads:
            raise VerifyError("must be inside a thread-mapped 'loop.parallel'")
        if not 0 < self.offset < 32:
            raise VerifyError(f"offset {self.offset} must be within a warp (1..31)")


@register_op
class AllocOp(Operation):
    """A kernel-local buffer: `shared` (per block) or `local` (per thread)."""

    name = "loop.alloc"  # not Pure: two allocations must never be merged by CSE
    result_defs = (ResultDef("result"),)

    def verify_(self) -> None:
        t = expect_memref(self.result.type, "result")
        if t.memory_space == "global":
            raise VerifyError("global buffers come from the schedule's arena, not from 'loop.alloc'")
        if self.parent_of_type(KernelOp) is None:
            raise VerifyError("must be inside a 'loop.kernel'")
        if t.memory_space == "shared":
            loop = enclosing_parallel(self)
            if loop is None or not loop.maps_blocks:
                raise VerifyError("shared buffers are allocated at block level, directly in the block-mapped loop")


@register_op
class ConstantOp(Operation):
    """A read-only global buffer holding `value` (emitted as static data)."""

    name = "loop.constant"
    traits = frozenset({Pure})
    result_defs = (ResultDef("result"),)
    attr_defs = (AttrDef("value", DENSE, REQUIRED),)
    has_type_inference = True

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        value = attributes.get("value")
        if not isinstance(value, A.DenseElementsAttr):
            raise VerifyError("requires a dense 'value'")
        return [MemRefType(value.type.shape, value.type.element_type)]


@register_op
class DimOp(Operation):
    """`%n = loop.dim %buf {axis = 0} : (memref<?x384xf32>) -> index`: the size
    of one axis of a buffer; a `?` axis's size is carried by the buffer value
    (set where the buffer is made: a schedule argument, a view)."""

    name = "loop.dim"
    traits = frozenset({Pure})
    operand_defs = (OperandDef("source"),)
    result_defs = (ResultDef("result"),)
    attr_defs = (AttrDef("axis", INT, REQUIRED),)
    has_type_inference = True

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        return [index]

    def verify_(self) -> None:
        t = expect_memref(self.source.type, "source")
        if not 0 <= self.axis < t.rank:
            raise VerifyError(f"axis {self.axis} is out of range for {t}")


class _Access(Operation):
    """Shared by load and store: buffer, one index per dimension, optional guard."""

    buffer_position = 0

    @property
    def buffer(self):
        return self.operands[self.buffer_position]

    @property
    def indices(self):
        rank = self.buffer.type.rank
        start = self.buffer_position + 1
        return self.operands[start : start + rank]

    @property
    def guard(self):
        extra = self.operands[self.buffer_position + 1 + self.buffer.type.rank :]
        return extra[0] if extra else None

    def _verify_access(self) -> MemRefType:
        t = expect_memref(self.buffer.type, "buffer")
        extra = len(self.operands) - self.buffer_position - 1 - t.rank
        if extra not in (0, 1):
            raise VerifyError(f"takes {t.rank} indices for {t} and an optional guard, but got {len(self.operands) - self.buffer_position - 1} operands")
        expect_index(self.indices, "index")
        if extra and self.guard.type is not i1:
            raise VerifyError(f"the guard must be i1, not {self.guard.type}")
        return t


@register_op
class LoadOp(_Access):
    """`%v = loop.load %buf, %i, %j[, %guard] {padding = 0.0} : (memref<..>, index, index[, i1]) -> f32`"""

    name = "loop.load"
    operand_defs = (OperandDef("buffer_and_indices", variadic=True),)
    result_defs = (ResultDef("result"),)
    attr_defs = (AttrDef("padding", ANY, None, doc="value of a guarded-off load (default 0)"),)

    def verify_(self) -> None:
        if not self.operands:
            raise VerifyError("needs a buffer")
        t = self._verify_access()
        if self.result.type is not t.element_type:
            raise VerifyError(f"result type {self.result.type} differs from the element type {t.element_type}")


@register_op
class StoreOp(_Access):
    """`loop.store %v, %buf, %i, %j[, %guard] : f32, memref<..>, index, index[, i1]`"""

    name = "loop.store"
    operand_defs = (OperandDef("value_buffer_and_indices", variadic=True),)
    buffer_position = 1

    @property
    def value(self):
        return self.operands[0]

    def verify_(self) -> None:
        if len(self.operands) < 2:
            raise VerifyError("needs a value and a buffer")
        t = self._verify_access()
        if self.value.type is not t.element_type:
            raise VerifyError(f"stores a {self.value.type} into a buffer of {t.element_type}")


# --------------------------------------------------------------------------- host schedule


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
    attr_defs = (AttrDef("kernel", SYMBOL, REQUIRED),)

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
