"""`loop.load_vector`, `loop.copy_async`, `loop.async_commit`/`async_wait`
in CUDA C (dialects/loop_vector.py): one call of a prelude helper each.

    const float4 v = fusecc_load_vector<float4>(&a_tile[i]);   // results: v.x, v.y, v.z, v.w
    fusecc_store_vector<float4>(&c_tile[j], float4{a, b, c, d});
    fusecc_cp_async<4>(&a_tile[j], guard ? &in0[i] : in0, guard);
    fusecc_cp_async_commit();
    fusecc_cp_async_wait<1>();

The helpers (`prelude_lines`, pasted once per kernels.cu that uses them)
are inline PTX on the GPU (`cp.async.ca.shared.global` with a source size
of 0 for a guarded-off copy: zero fill, nothing read; sm_80+) and, under the
CPU harness (FUSECC_CPU_EMULATION), cpu_harness/cuda_cpu_vector.h, which
emulates the groups per thread. A guarded-off copy passes the buffer's base
as its source: the instruction reads nothing, but the address stays valid.
"""

from __future__ import annotations

from fusecc.compiler.types import f32, f64, i32
from fusecc.passes.backends.cuda.c_text import EmitError
from fusecc.dialects.loop_vector import AsyncCommitOp, AsyncWaitOp, CopyAsyncOp, LoadVectorOp, StoreVectorOp

VECTOR_TYPES = {(f32, 2): "float2", (f32, 4): "float4", (f64, 2): "double2", (i32, 2): "int2", (i32, 4): "int4"}
LANES = "xyzw"

PRELUDE = """\
#ifndef FUSECC_CPU_EMULATION
// Vector loads and cp.async (sm_80+); the CPU harness defines the same in cuda_cpu_vector.h.
template <class V, class T>
__device__ __forceinline__ V fusecc_load_vector(const T* p) { return *reinterpret_cast<const V*>(p); }
template <class V, class T>
__device__ __forceinline__ void fusecc_store_vector(T* p, V v) { *reinterpret_cast<V*>(p) = v; }
template <int BYTES>
__device__ __forceinline__ void fusecc_cp_async(void* dst, const void* src, bool valid) {
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\\n" ::"r"(shared), "l"(src), "n"(BYTES), "r"(valid ? BYTES : 0) : "memory");
}
__device__ __forceinline__ void fusecc_cp_async_commit() { asm volatile("cp.async.commit_group;\\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fusecc_cp_async_wait() { asm volatile("cp.async.wait_group %0;\\n" ::"n"(N) : "memory"); }
#endif
"""


def prelude_lines(used: bool) -> list[str]:
    return PRELUDE.rstrip("\n").split("\n") if used else []


def _fail(renderer, message: str):
    raise EmitError(f"kernel @{renderer.kernel.sym_name}: {message}")


def render_load_vector(self, op: LoadVectorOp) -> None:
    t = op.buffer.type.element_type
    vector = VECTOR_TYPES.get((t, op.width))
    if vector is None:
        _fail(self, f"no CUDA vector type of {op.width} {t}")
    self.uses_vector_memory = True
    name = self.names.fresh("vec")
    self.line(f"const {vector} {name} = fusecc_load_vector<{vector}>(&{self.element(op.buffer, op.indices)});")
    for lane, result in zip(LANES, op.results):
        self.c[result] = f"{name}.{lane}"


def render_store_vector(self, op: StoreVectorOp) -> None:
    t = op.buffer.type.element_type
    vector = VECTOR_TYPES.get((t, op.width))
    if vector is None:
        _fail(self, f"no CUDA vector type of {op.width} {t}")
    self.uses_vector_memory = True
    values = ", ".join(self.e(v) for v in op.values)
    self.line(f"fusecc_store_vector<{vector}>(&{self.element(op.buffer, op.indices)}, {vector}{{{values}}});")


def render_copy_async(self, op: CopyAsyncOp) -> None:
    bytes_ = op.buffer.type.element_type.byte_size
    source = self.e(op.source)
    address = f"&{self.element(op.source, op.source_indices)}"
    guard = "true"
    if op.guard is not None:
        guard = self.e(op.guard)
        address = f"{guard} ? {address} : {source}"
    self.uses_vector_memory = True
    self.line(f"fusecc_cp_async<{bytes_}>(&{self.element(op.buffer, op.indices)}, {address}, {guard});")


def render_async_commit(self, op: AsyncCommitOp) -> None:
    self.uses_vector_memory = True
    self.line("fusecc_cp_async_commit();")


def render_async_wait(self, op: AsyncWaitOp) -> None:
    self.uses_vector_memory = True
    self.line(f"fusecc_cp_async_wait<{op.attr('pending')}>();")


RENDERERS = {
    "loop.load_vector": render_load_vector,
    "loop.store_vector": render_store_vector,
    "loop.copy_async": render_copy_async,
    "loop.async_commit": render_async_commit,
    "loop.async_wait": render_async_wait,
}
