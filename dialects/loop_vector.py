"""Vector and asynchronous memory ops of the `loop` dialect (GPU kernels).

Templates that stage tiles in shared memory use them for what scalar
`loop.load`/`loop.store` cannot say:

    %a0, %a1, %a2, %a3 = loop.load_vector %tile, %k, %m : (memref<2x32x68xf32, shared>, index, index) -> (f32, f32, f32, f32)

reads `width` (2 or 4, the number of results) consecutive elements of the
last axis at once (CUDA: one float4/float2 load); `loop.store_vector %v0,
.., %v3, %tile, %r, %c` writes them. The last index must be a
multiple of the width and the last axis' stride a multiple of it too: the
access is aligned to width × element bytes (a template proves it; the CPU
harness traps on a misaligned one).

    loop.copy_async %src, %i, %j, %tile, %s, %k, %m[, %guard] : memref<..>, index, index, memref<.., shared>, index, index, index[, i1]

starts copying one element of a global buffer into a shared one (CUDA:
`cp.async`, sm_80+); where `guard` is false it writes 0 and reads nothing.
The copies a thread started since its last `loop.async_commit` form a group;
`loop.async_wait {pending = N}` returns once at most the N most recent
groups of this thread are still in flight. Until then the destination holds
nothing a program may read, and other threads see it only after a
`loop.barrier` that follows the wait. For the barrier placement a copy is a
store into its destination at the point it starts (so it is ordered after
the reads of the previous contents), and place-barriers never lifts a
barrier above a wait (so the readers come after the data landed).

The loop interpreter runs a copy at once (it is sequentially consistent);
the CPU harness emulates the groups exactly (runtime/cuda/cpu_harness/
cuda_cpu_async.h) so that the sanitizer sees a read before the wait.
"""

from __future__ import annotations

from fusecc.compiler.ir import Operation, VerifyError
from fusecc.compiler.op_definitions import INT, AttrDef, OperandDef, ResultDef, register_op
from fusecc.compiler.types import MemRefType, i1
from fusecc.dialects.loop import KernelOp, LoadOp, StoreOp, expect_index, expect_memref

VECTOR_WIDTHS = (2, 4)
VECTOR_BYTES = 16  # the widest access a GPU thread makes at once


def _in_gpu_kernel(op: Operation, what: str) -> None:
    kernel = op.parent_of_type(KernelOp)
    if kernel is not None and not kernel.is_gpu:
        raise VerifyError(f"{what} is only valid in a GPU kernel")


@register_op
class LoadVectorOp(LoadOp):
    """`width` consecutive elements of the last axis (a LoadOp for every
    analysis that asks which buffers an op reads)."""

    name = "loop.load_vector"
    operand_defs = (OperandDef("buffer_and_indices", variadic=True),)
    result_defs = (ResultDef("results", variadic=True),)
    attr_defs = ()

    @property
    def width(self) -> int:
        return len(self.results)

    def verify_(self) -> None:
        if not self.operands:
            raise VerifyError("needs a buffer")
        t = self._verify_access()
        if self.guard is not None:
            raise VerifyError("takes no guard: a vector load reads a whole aligned vector")
        if self.width not in VECTOR_WIDTHS or self.width * t.element_type.byte_size > VECTOR_BYTES:
            raise VerifyError(f"reads {self.width} elements of {t.element_type}; a vector is 2 or 4 elements of at most {VECTOR_BYTES} bytes")
        if any(r.type is not t.element_type for r in self.results):
            raise VerifyError(f"results must all be {t.element_type}")
        if t.shape[-1] % self.width:
            raise VerifyError(f"the last axis ({t.shape[-1]}) is not a multiple of the width {self.width}: rows would not stay aligned")
        _in_gpu_kernel(self, "'loop.load_vector'")


@register_op
class StoreVectorOp(StoreOp):
    """`loop.store_vector %v0, %v1, %v2, %v3, %tile, %i, %j`: `width`
    consecutive elements of the last axis at once (a StoreOp of its buffer
    for every analysis that asks what an op writes). Same alignment rule as
    `loop.load_vector`; no guard."""

    name = "loop.store_vector"
    operand_defs = (OperandDef("values_buffer_and_indices", variadic=True),)

    @property
    def buffer_position(self) -> int:  # the first memref: the values come before it
        return next((i for i, v in enumerate(self.operands) if isinstance(v.type, MemRefType)), len(self.operands))

    @property
    def values(self):
        return self.operands[: self.buffer_position]

    @property
    def width(self) -> int:
        return self.buffer_position

    @property
    def value(self):
        raise AttributeError("loop.store_vector stores several values; see .values")

    def verify_(self) -> None:
        if self.buffer_position >= len(self.operands):
            raise VerifyError("needs values and a buffer")
        t = self._verify_access()
        if self.guard is not None:
            raise VerifyError("takes no guard: a vector store writes a whole aligned vector")
        if self.width not in VECTOR_WIDTHS or self.width * t.element_type.byte_size > VECTOR_BYTES:
            raise VerifyError(f"writes {self.width} elements of {t.element_type}; a vector is 2 or 4 elements of at most {VECTOR_BYTES} bytes")
        if any(v.type is not t.element_type for v in self.values):
            raise VerifyError(f"values must all be {t.element_type}")
        if t.shape[-1] % self.width:
            raise VerifyError(f"the last axis ({t.shape[-1]}) is not a multiple of the width {self.width}: rows would not stay aligned")
        _in_gpu_kernel(self, "'loop.store_vector'")


@register_op
class CopyAsyncOp(StoreOp):
    """An element of a global buffer copied into a shared buffer, asynchronously
    (a StoreOp of its destination for every analysis that asks what an op writes)."""

    name = "loop.copy_async"
    operand_defs = (OperandDef("source_indices_destination_indices", variadic=True),)

    @property
    def source(self):
        return self.operands[0]

    @property
    def source_indices(self):
        return self.operands[1 : 1 + self.source.type.rank]

    @property
    def buffer_position(self) -> int:  # the destination
        return 1 + self.source.type.rank

    @property
    def value(self):
        raise AttributeError("loop.copy_async has no value operand; see .source")

    def verify_(self) -> None:
        if not self.operands:
            raise VerifyError("needs a source and a destination")
        source = expect_memref(self.source.type, "source")
        if len(self.operands) <= self.buffer_position:
            raise VerifyError("needs a destination buffer after the source's indices")
        expect_index(self.source_indices, "source index")
        t = self._verify_access()
        if source.memory_space != "global" or t.memory_space != "shared":
            raise VerifyError(f"copies global to shared memory, not {source.memory_space} to {t.memory_space}")
        if source.element_type is not t.element_type or t.element_type.byte_size not in (4, 8, 16):
            raise VerifyError(f"copies 4, 8 or 16-byte elements of one type, not {source.element_type} to {t.element_type}")
        if self.guard is not None and self.guard.type is not i1:
            raise VerifyError("the guard must be i1")
        _in_gpu_kernel(self, "'loop.copy_async'")


@register_op
class AsyncCommitOp(Operation):
    """Close this thread's group of `loop.copy_async`s (CUDA `cp.async.commit_group`)."""

    name = "loop.async_commit"

    def verify_(self) -> None:
        _in_gpu_kernel(self, "'loop.async_commit'")


@register_op
class AsyncWaitOp(Operation):
    """Wait until at most `pending` of this thread's groups are in flight
    (CUDA `cp.async.wait_group pending`)."""

    name = "loop.async_wait"
    attr_defs = (AttrDef("pending", INT, 0, doc="groups that may still be in flight"),)

    def verify_(self) -> None:
        if self.attr("pending") < 0:
            raise VerifyError("'pending' must be 0 or more")
        _in_gpu_kernel(self, "'loop.async_wait'")
