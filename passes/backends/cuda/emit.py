"""The CUDA backend: CUDA C from GPU-mapped loop IR, one translation unit per program.

`emit_cuda(module)` first runs the backend's loop-level passes, both
idempotent: `legalize` (every target-sensitive rule as explicit ops,
docs/legalize.md) and `place-barriers` (every `loop.barrier` shared and
global memory need, knowing which arguments the launches make overlap).
Then it only prints: each `loop.kernel` becomes an `extern "C" __global__`
function (kernel.py, its `arith`/`math` ops from the table in op_table.py),
the schedule's `loop.copy`s copy and fill kernels, its small constants
file-scope data (buffer_facts.baked_constants); the others, a model's
weights, stay kernel arguments, listed in `CudaSource.constants` for the
manifest, whose runtime uploads them once. Float literals are exact (shortest round-trip spelling); infinities
are the prelude's macros, NaNs bit casts. The float modes (NVRTC flags) are
in docs/cuda-target.md.

It returns a `CudaSource`: the text, each kernel's launch geometry and
parameters, and the line range of each kernel, so that an NVRTC error can
be traced back to the kernel it is in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.types import MemRefType, ScalarType, index
from fusecc.dialects import loop
from fusecc.passes.backends.cuda.c_text import C_STORAGE, STORE_CONVERSION, c_identifier, constant_array, float_literal, is_reduced_float, unique_global
from fusecc.passes.backends.cuda.kernel import EmitError, KernelParam, KernelRenderer
from fusecc.passes.backends.cuda.mma import prelude_lines as mma_prelude_lines
from fusecc.passes.backends.cuda.source import prelude_text
from fusecc.passes.backends.cuda.vector_memory import prelude_lines as vector_memory_prelude_lines
from fusecc.passes.lowering.buffer_facts import Place, base_buffer, baked_constants, buffer_places, is_bakeable, restrict_safe_params, schedule_constant

BACKEND_PASSES = "legalize{{target={target}}},place-barriers"


# --------------------------------------------------------------------------- results


@dataclass
class KernelInfo:
    """What a launcher needs to know about one emitted kernel."""

    name: str  # in C; the loop IR's symbol is `sym_name`
    sym_name: str
    grid: tuple  # ints; a dimension computed at launch is an expression over the arguments' sizes `a{i}_{axis}`
    block: tuple[int, int, int]
    static_shared_bytes: int
    dynamic_shared_bytes: int
    params: list[KernelParam]
    lines: tuple[int, int]  # first and last line of the kernel (and its constants) in the source
    group: int | None = None
    kind: str | None = None
    baked_args: tuple[int, ...] = ()  # arguments the kernel reads as constant data instead: the launch leaves them out
    estimate: tuple[int, int] | None = None  # (registers per thread, shared bytes) fusion and tiling assumed (`tile.*`)
    size_args: tuple[tuple[int, int], ...] = ()  # (argument, axis) of each `?` size parameter, after the others (dynamic_sizes.py)


@dataclass
class CudaSource:
    text: str
    kernels: list[KernelInfo] = field(default_factory=list)
    fills: dict = field(default_factory=dict)  # loop.copy of a small schedule constant -> its fill kernel's name
    # Schedule constants passed as device buffers (too large to bake, or not
    # the same at every launch of a shared kernel) -> their names in the manifest.
    constants: dict = field(default_factory=dict)

    def kernel(self, name: str) -> KernelInfo:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def kernel_at_line(self, line: int) -> KernelInfo | None:
        for k in self.kernels:
            if k.lines[0] <= line <= k.lines[1]:
                return k
        return None


# --------------------------------------------------------------------------- the translation unit

# The header's second line; the driver swaps it for NO_MANIFEST_NOTE when the
# source goes to standard output (no manifest is written then).
MANIFEST_NOTE = "// Launch geometry and arguments: the manifest (.json) beside this file. Float modes: docs/cuda-target.md."
NO_MANIFEST_NOTE = "// No manifest was written (this source went to standard output): use -o kernels.cu for kernels.json. Float modes: docs/cuda-target.md."

PRELUDE_REDUCED_FLOAT = r"""#ifndef FUSECC_CPU_EMULATION
// f16/bf16 storage without cuda_fp16.h (NVRTC has no default include path):
// just the conversions this file uses, as PTX. (The CPU harness has its own.)
struct __align__(2) __half { unsigned short __x; };
struct __align__(2) __nv_bfloat16 { unsigned short __x; };
static __device__ __forceinline__ float __half2float(__half h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.__x)); return f; }
static __device__ __forceinline__ __half __float2half_rn(float f) { __half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.__x) : "f"(f)); return h; }
static __device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.__x << 16); }
static __device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) { __nv_bfloat16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.__x) : "f"(f)); return h; }
#endif
// f16/bf16 values live in float registers; a cast to f16/bf16 (legalize's rounding) is one of these.
static __device__ __forceinline__ float fusecc_round_f16(float x) { return __half2float(__float2half_rn(x)); }
static __device__ __forceinline__ float fusecc_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
"""


def kernel_c_name(kernel: loop.KernelOp) -> str:
    return c_identifier(kernel.sym_name) or "kernel"



COPY_KERNEL_BLOCK = 256


def copy_kernel_name(element: ScalarType) -> str:
    return f"fusecc_copy_{'i64' if element is index else element.name}"


def copy_kernel(element: ScalarType) -> list[str]:
    """A kernel for the schedule's `loop.copy` between buffers of `element`s."""
    c_type = "long long" if element is index else C_STORAGE[element]
    name = copy_kernel_name(element)
    return [
        f"// {name}: a loop.copy of the host schedule, one element per thread",
        f'extern "C" __global__ void __launch_bounds__({COPY_KERNEL_BLOCK}) {name}(const {c_type}* __restrict__ source, {c_type}* __restrict__ target, long long count) {{',
        f"  const long long i = (long long)blockIdx.x * {COPY_KERNEL_BLOCK} + threadIdx.x;",
        "  if (i < count) target[i] = source[i];",
        "}",
    ]


def launch_names(module: Operation) -> dict[loop.KernelOp, list[str | None]]:
    """Names for kernel parameters the loop IR left unnamed: what the first
    launch passes (a program input or output, or a named temporary)."""
    names: dict[loop.KernelOp, list[str | None]] = {}
    for schedule in (op for op in module.walk() if isinstance(op, loop.ScheduleOp)):
        for launch in schedule.launches():
            kernel = launch.resolve()
            if kernel is not None and kernel not in names:
                names[kernel] = [base_buffer(v).name_hint if isinstance(v.type, MemRefType) else v.name_hint for v in launch.operands]
    return names


def fill_kernel(name: str, element: ScalarType, data: str, count: int) -> list[str]:
    """A kernel for the schedule's `loop.copy` of a constant into a buffer."""
    c_type = "long long" if element is index else C_STORAGE[element]
    value = f"{STORE_CONVERSION[element]}({data}[i])" if is_reduced_float(element) else f"{data}[i]"
    return [
        f"// {name}: a loop.copy of the host schedule, from the constant {data}",
        f'extern "C" __global__ void __launch_bounds__({COPY_KERNEL_BLOCK}) {name}({c_type}* __restrict__ target) {{',
        f"  const long long i = (long long)blockIdx.x * {COPY_KERNEL_BLOCK} + threadIdx.x;",
        f"  if (i < {count}) target[i] = {value};",
        "}",
    ]



def emit_cuda(module: Operation, source_name: str | None = None, target: str = "h200") -> CudaSource:
    """The CUDA C translation unit for every GPU kernel of `module`, after
    the backend's passes (which rewrite `module` in place)."""
    run_pipeline(parse_pipeline(BACKEND_PASSES.format(target=target)), module, PassContext(target=target))
    return render_cuda(module, source_name)


def render_cuda(module: Operation, source_name: str | None = None) -> CudaSource:
    """Print legal loop IR whose barriers are placed (see `emit_cuda`)."""
    """The CUDA C translation unit for every GPU kernel of `module`."""
    kernels = [op for op in module.walk() if isinstance(op, loop.KernelOp)]
    restrict = restrict_safe_params(module)
    taken: set[str] = {kernel_c_name(k) for k in kernels}
    if len(taken) != len(kernels):
        raise EmitError("two kernels have the same name in C: " + ", ".join(sorted(k.sym_name for k in kernels)))

    # Small constants of the schedule: file-scope data, read by kernels in
    # place of an argument or copied by a fill kernel. The others are device
    # buffers the runtime uploads once (the manifest's `constants`).
    baked = baked_constants(module)
    copies = [op for op in module.walk() if isinstance(op, loop.CopyOp)]
    fills = [op for op in copies if schedule_constant(op.source) is not None and is_bakeable(schedule_constant(op.source))]
    passed = device_constants(module, baked, fills)
    data_names: dict[loop.ConstantOp, str] = {}  # -> the C expression reading it
    data_lines: list[str] = []
    for constant in [c for k in kernels for c in baked.get(k, {}).values()] + [schedule_constant(op.source) for op in fills]:
        if constant not in data_names:
            name = unique_global(c_identifier(constant.result.name_hint) or "constant", taken)
            lines, data_names[constant] = constant_array(name, constant, "a constant of the schedule")
            data_lines += lines

    hints = launch_names(module)
    emitters = [
        KernelRenderer(k, kernel_c_name(k), restrict[k], taken, hints.get(k, ()), {i: data_names[c] for i, c in baked.get(k, {}).items()})
        for k in kernels
    ]
    bodies = [em.render() for em in emitters]
    copy_types = sorted({op.source.type.element_type for op in copies if op not in fills}, key=str)
    fill_names = {op: unique_global(f"fusecc_fill_{n}", taken) for n, op in enumerate(fills)}

    narrow = set().union(*(em.narrow_types for em in emitters)) if emitters else set()
    count = len(kernels) + len(copy_types) + len(fills)
    lines = [f"// CUDA C generated by fusecc{' from ' + source_name if source_name else ''}: {count} kernel{'s' * (count != 1)}.",
             MANIFEST_NOTE]
    lines += prelude_text().rstrip("\n").split("\n")
    if narrow or any(is_reduced_float(op.source.type.element_type) for op in copies):
        lines += PRELUDE_REDUCED_FLOAT.rstrip("\n").split("\n")
    lines += mma_prelude_lines(set().union(*(em.mma_kinds for em in emitters)) if emitters else set())
    lines += vector_memory_prelude_lines(any(em.uses_vector_memory for em in emitters))
    if data_lines:
        lines += [""] + data_lines
    infos = []

    def add(body: list[str], info_args) -> None:
        lines.append("")
        first = len(lines) + 1
        lines.extend(body)
        infos.append(KernelInfo(*info_args[:7], (first, len(lines)), *info_args[7:]))

    for em, body in zip(emitters, bodies):
        if em.dynamic_shared:
            # The dynamic shared block is declared inside the kernel, before its body.
            open_at = next(i for i, text in enumerate(body) if text.startswith('extern "C"'))
            body = body[: open_at + 1] + ["  FUSECC_EXTERN_SHARED(unsigned char, fusecc_dynamic_shared);"] + body[open_at + 1 :]
        k = em.kernel
        estimate = (k.attr("tile.registers"), k.attr("tile.shared_memory")) if "tile.registers" in k.attributes else None
        add(em.data_lines + body, (em.name, k.sym_name, em.grid, em.block, em.static_shared, em.dynamic_shared, em.params, k.attr("group"), k.attr("kind"), tuple(sorted(em.baked)), estimate, tuple(em.size_args)))
    for element in copy_types:
        c_type = "long long" if element is index else C_STORAGE[element]
        params = [KernelParam("source", f"const {c_type}* __restrict__", f"memref<?x{element}>"), KernelParam("target", f"{c_type}* __restrict__", f"memref<?x{element}>", True), KernelParam("count", "long long", "i64")]
        add(copy_kernel(element), (copy_kernel_name(element), "", (0, 1, 1), (COPY_KERNEL_BLOCK, 1, 1), 0, 0, params, None, "copy"))
    for op, name in fill_names.items():
        element, n = op.target.type.element_type, op.target.type.num_elements
        params = [KernelParam("target", f"{'long long' if element is index else C_STORAGE[element]}* __restrict__", str(op.target.type), True)]
        add(fill_kernel(name, element, data_names[schedule_constant(op.source)], n), (name, "", (-(-n // COPY_KERNEL_BLOCK), 1, 1), (COPY_KERNEL_BLOCK, 1, 1), 0, 0, params, None, "copy"))
    return CudaSource("\n".join(lines) + "\n", infos, fill_names, passed)


def device_constants(module: Operation, baked: dict, fills: list) -> dict[loop.ConstantOp, str]:
    """The schedule constants launches and copies pass as buffers, named
    uniquely after their values (the manifest's and the weights file's keys)."""
    found: list[loop.ConstantOp] = []
    for schedule in (op for op in module.walk() if isinstance(op, loop.ScheduleOp)):
        for op in schedule.body:
            if isinstance(op, loop.LaunchOp):
                kernel = op.resolve()
                skip = baked.get(kernel, {})
                found += [c for i, v in enumerate(op.operands) if i not in skip and (c := schedule_constant(v)) is not None]
            elif isinstance(op, loop.CopyOp) and op not in fills and (c := schedule_constant(op.source)) is not None:
                found.append(c)
    names: dict[loop.ConstantOp, str] = {}
    taken: set[str] = set()
    for constant in dict.fromkeys(found):
        value = constant.attr("value")
        hint = value.name if isinstance(value, A.DenseResourceElementsAttr) else c_identifier(constant.result.name_hint)
        names[constant] = unique_global(hint or "constant", taken)
    return names


__all__ = ["COPY_KERNEL_BLOCK", "CudaSource", "EmitError", "KernelInfo", "KernelParam", "Place", "base_buffer", "buffer_places", "c_identifier", "copy_kernel_name", "emit_cuda", "float_literal", "render_cuda", "restrict_safe_params"]
