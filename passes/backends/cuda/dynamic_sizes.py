"""`?` sizes in CUDA kernels (docs/dynamic-shapes.md, CUDA).

A kernel argument whose memref type has `?` axes is passed as its pointer
and, after all the pointers and scalars, one `long long` per `?` axis
(`x_d0`, `x_d1`): the kernel's extents are parameters, not baked. `loop.dim`
reads one, and row-major strides are products of them. The grid of a kernel
whose block-mapped loop has an SSA extent is that extent's computation read
back as an expression of the arguments' sizes (`host_extent`); the manifest
turns it into an expression of the program's named dims, which the host
evaluates per call. The block stays fixed: thread-mapped extents are static.
"""

from __future__ import annotations

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType
from fusecc.dialects import loop
from fusecc.passes.backends.cuda.c_text import EmitError
from fusecc.passes.backends.host_extent import arg_size_name, host_extent


def is_dynamic_kernel(kernel: loop.KernelOp) -> bool:
    if any(isinstance(a.type, MemRefType) and a.type.has_dynamic_shape for a in kernel.body.args):
        return True
    return any(p.dynamic_upper for p in kernel.parallel_loops())


def launch_grid(kernel: loop.KernelOp, block_loop: loop.ParallelOp | None, grid: list) -> list:
    """`grid` with each dynamic block extent as its host expression's text
    (over `a{i}_{axis}`, the arguments' sizes)."""
    if block_loop is None:
        return grid
    for extent, mapping in zip(block_loop.extents, block_loop.mapping):
        if isinstance(extent, Value):
            grid[loop.GPU_BLOCK.index(mapping)] = host_extent(extent, kernel, "grid size").text
    return grid


def size_params(renderer) -> list[tuple[str, str, str]]:
    """(name, C type, IR type) of the `long long` parameters of the arguments' `?` axes, in argument
    order; records their C names (`renderer.sizes`) and (argument, axis)
    pairs (`renderer.size_args`)."""
    params = []
    for i, arg in enumerate(renderer.kernel.body.args):
        if i in renderer.baked or not isinstance(arg.type, MemRefType):
            continue
        for axis in arg.type.dynamic_axes:
            name = renderer.names.claim(f"{renderer.c[arg]}_d{axis}")
            renderer.sizes[arg, axis] = name
            renderer.size_args.append((i, axis))
            params.append((name, "long long", "index"))
    return params


def c_shape(renderer, buffer: Value) -> list:
    """The buffer's sizes for index arithmetic: ints, or C names of `?` sizes."""
    t = buffer.type
    if not t.has_dynamic_shape:
        return list(t.shape)
    shape = []
    for axis, size in enumerate(t.shape):
        if axis in t.dynamic_axes:
            name = renderer.sizes.get((buffer, axis))
            if name is None:
                raise EmitError(f"kernel @{renderer.kernel.sym_name}: a '?'-sized buffer that is not a kernel argument ({t})")
            shape.append(name)
        else:
            shape.append(size)
    return shape


def render_dim(renderer, op) -> None:
    name = renderer.sizes.get((op.source, op.axis))
    if name is None:
        t = op.source.type
        if op.axis in t.dynamic_axes:
            raise EmitError(f"kernel @{renderer.kernel.sym_name}: loop.dim of a '?' axis of a buffer that is not a kernel argument ({t})")
        name = str(t.shape[op.axis])
    renderer.c[op.result] = name  # `long long`, as every index of a dynamic kernel


def grid_in_params(renderer) -> tuple:
    """The grid for the kernel's comment: a dimension computed at launch as
    an expression of the kernel's size parameters (`(in0_d0*in0_d1 + 255)//256`)."""
    if all(isinstance(g, int) for g in renderer.grid):
        return renderer.grid
    from fusecc.passes.backends.cuda.manifest_dims import in_dims

    names = {}
    for i, arg in enumerate(renderer.kernel.body.args):
        if isinstance(arg.type, MemRefType):
            for axis, size in enumerate(arg.type.shape):
                names[arg_size_name(i, axis)] = renderer.sizes.get((arg, axis), size if type(size) is int else f"a{i}_{axis}")
    return tuple(g if isinstance(g, int) else in_dims(g, names) for g in renderer.grid)


__all__ = ["c_shape", "grid_in_params", "is_dynamic_kernel", "launch_grid", "render_dim", "size_params"]
