"""The `loop` dialect: kernels over explicit buffers, and the host schedule.

This is the level both targets consume: the CPU target compiles it through
llvmlite, the CUDA target prints it as CUDA C. Buffers are
`memref<...xT, space>`; a `?` axis carries its size at run time (`loop.dim`
reads it, docs/dynamic-shapes.md), and each buffer has a memory space — `global` (device
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

The ops live in two modules, by responsibility: `loop_kernel.py` (the
kernel and its body: structure, sync, buffers, loads and stores) and
`loop_schedule.py` (the host schedule: arena and views, launches, copies,
the dims of a dynamic schedule). This module re-exports both, so
`from fusecc.dialects import loop; loop.ScheduleOp` reaches every op, and
importing it registers them all. Vector and async copies: `loop_vector.py`.
"""

from __future__ import annotations

from fusecc.dialects.loop_kernel import *  # noqa: F401,F403
from fusecc.dialects.loop_schedule import *  # noqa: F401,F403
