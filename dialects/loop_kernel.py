"""The `loop` dialect's kernel ops: `loop.kernel` and what its body holds.

Structure (`loop.kernel`, `loop.return`, `loop.parallel` with its hardware
mappings, `loop.for`, `loop.if`, `loop.yield`), GPU block-level sync
(`loop.barrier`, `loop.shuffle_xor`), buffers (`loop.alloc`,
`loop.constant`, `loop.dim`) and scalar accesses (`loop.load`,
`loop.store`). The dialect's overview, with examples, is `loop.py`; the
host schedule is `loop_schedule.py`, vector and async copies
`loop_vector.py`.
"""

from __future__ import annotations

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Block, Operation, Region, VerifyError
from fusecc.compiler.op_definitions import (
    ANY,
    DENSE,
    INT,
    INT_ARRAY,
    REQUIRED,
    STRING,
    STRING_ARRAY,
    AttrDef,
    OperandDef,
    ResultDef,
    register_op,
)
from fusecc.compiler.traits import IsolatedFromAbove, Pure, Symbol, Terminator
from fusecc.compiler.types import MemRefType, ScalarType, i1, index

GPU_BLOCK = ("block.x", "block.y", "block.z")
GPU_THREAD = ("thread.x", "thread.y", "thread.z")
CPU_MAPPINGS = ("worker", "vector")
MAPPINGS = GPU_BLOCK + GPU_THREAD + CPU_MAPPINGS + ("sequential",)


# `upper` entry of a `loop.parallel` dimension whose extent is an operand.
DYNAMIC_EXTENT = -1


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
class PrefetchOp(_Access):
    """`loop.prefetch %buf, %i, %j : memref<..>, index, index`: a hint that
    the element will be read soon (CPU: a software prefetch into L2). It
    changes no value, so the indices only name an address: linearised
    row-major like a load's, any of them may lie past its axis and the
    address past the buffer (a CPU prefetch never faults). The interpreter
    skips it; GPU kernels have none."""

    name = "loop.prefetch"
    operand_defs = (OperandDef("buffer_and_indices", variadic=True),)

    def verify_(self) -> None:
        if not self.operands:
            raise VerifyError("needs a buffer")
        self._verify_access()
        if self.guard is not None:
            raise VerifyError("takes no guard: a prefetch never faults")


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
