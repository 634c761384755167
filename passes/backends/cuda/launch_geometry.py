"""A CUDA kernel's launch, decided before it is rendered: its C index type,
its grid and block (checked against the GPU's limits), and where its shared
buffers go (static `__shared__` arrays, or offsets in dynamic shared memory
past 48 KB and for attention's tiles)."""

from __future__ import annotations

from fusecc.compiler.types import MemRefType, i64, index
from fusecc.dialects import loop
from fusecc.passes.backends.cuda.c_text import INT32_MAX, EmitError
from fusecc.passes.backends.cuda.dynamic_sizes import is_dynamic_kernel, launch_grid

STATIC_SHARED_LIMIT = 48 * 1024  # bytes of static __shared__ per block; beyond it, dynamic shared memory
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)


def choose_index_type(kernel: loop.KernelOp) -> str:
    """`int` when every buffer and extent fits in 31 bits (cheaper on the GPU), else `long long`
    (always with `?` sizes: they are known only at launch)."""
    if is_dynamic_kernel(kernel):
        return "long long"
    for op in kernel.walk():
        for v in list(op.results) + [a for r in op.regions for b in r.blocks for a in b.args]:
            if isinstance(v.type, MemRefType) and v.type.num_elements > INT32_MAX:
                return "long long"
        if isinstance(op, loop.ParallelOp) and any(u > INT32_MAX for u in op.upper):
            return "long long"
        if op.name == "arith.constant" and op.result.type is index and not -(2**31) < op.attr("value").value <= INT32_MAX:
            return "long long"
        if op.name == "arith.cast" and op.result.type is index and op.input.type is i64:
            return "long long"
    for a in kernel.body.args:
        if isinstance(a.type, MemRefType) and a.type.num_elements > INT32_MAX:
            return "long long"
    return "int"


def gpu_structure(kernel: loop.KernelOp) -> tuple[tuple, tuple[int, int, int]]:
    """(grid, block), after checking the kernel is mapped for a GPU within its limits.
    A grid dimension computed at launch is its expression's text (dynamic_sizes.py)."""
    loops = kernel.parallel_loops()
    blocks = [p for p in loops if p.maps_blocks]
    for p in loops:
        bad = [m for m in p.mapping if m in loop.CPU_MAPPINGS]
        if bad:
            raise EmitError(f"kernel @{kernel.sym_name} is mapped for the CPU ({bad[0]}), not the GPU")
    if len(blocks) > 1:
        raise EmitError(f"kernel @{kernel.sym_name} has {len(blocks)} block-mapped loops; a GPU kernel has one")
    grid, block = kernel.launch_dims()
    grid = tuple(launch_grid(kernel, blocks[0] if blocks else None, list(grid)))
    for axis, (g, limit) in enumerate(zip(grid, MAX_GRID)):
        if isinstance(g, int) and g > limit:
            raise EmitError(f"kernel @{kernel.sym_name}: grid dimension {'xyz'[axis]} = {g} exceeds {limit}")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise EmitError(f"kernel @{kernel.sym_name}: {threads} threads per block exceed {MAX_THREADS_PER_BLOCK}")
    return grid, block


def plan_shared(kernel: loop.KernelOp) -> tuple[dict, int, int]:
    """(offset of each shared buffer in the dynamic block, static bytes, dynamic bytes)."""
    allocs = [op for op in kernel.walk() if isinstance(op, loop.AllocOp) and op.result.type.memory_space == "shared"]
    total = sum(op.result.type.byte_size for op in allocs)
    # The attention template's tiles go to dynamic shared memory at any size:
    # with them as static __shared__ arrays ptxas for sm_80 keeps more
    # addresses live (the A100's 1-warp (8,32) kernel of examples/attention.ir:
    # 106 registers static, 72 dynamic, the estimate 80).
    if total <= STATIC_SHARED_LIMIT and kernel.attr("kind") != "attention":
        return {}, total, 0
    layout, offset = {}, 0
    for op in allocs:
        offset = (offset + 15) // 16 * 16
        layout[op] = offset
        offset += op.result.type.byte_size
    return layout, 0, offset
