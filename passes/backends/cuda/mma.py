"""`nvgpu.mma_sync` in CUDA C: one call of a prelude helper per instruction.

    float acc_0, acc_1, acc_2, acc_3;
    fusecc_mma_f16(acc_0, acc_1, acc_2, acc_3, a0, ..., a7, b0, ..., b3, c0, ..., c3);

The helpers (`prelude_lines`, pasted once per kernels.cu that needs them)
pack the lane's f32 registers into the instruction's formats and run it:

  * on the GPU, inline PTX: `cvt.rn.f16x2.f32` / `cvt.rn.bf16x2.f32` (exact:
    the values are f16/bf16 already, loaded from f16/bf16 tiles) or
    `cvt.rna.tf32.f32`, then `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`
    (bf16 alike) or `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`;
    these need sm_80 or newer;
  * under the CPU harness (FUSECC_CPU_EMULATION), the same packing in C and
    `fusecc_cpu::mma::sync` (cpu_harness/cuda_cpu_mma.h), which emulates the
    warp's instruction with the PTX fragment tables.

So the kernels' text is the same on both; only the helper's body differs.
"""

from __future__ import annotations

from fusecc.dialects.nvgpu import FRAGMENTS, MmaSyncOp

PTX_SHAPE = {"f16": "m16n8k16.row.col.f32.f16.f16.f32", "bf16": "m16n8k16.row.col.f32.bf16.bf16.f32", "tf32": "m16n8k8.row.col.f32.tf32.tf32.f32"}
HARNESS_KIND = {"f16": "F16", "bf16": "BF16", "tf32": "TF32"}
MIN_ARCH = 80  # mma.sync with f32 accumulators for bf16 and tf32, cvt.rn.{f16,bf16}x2.f32, cvt.rna.tf32.f32


def helper_name(kind: str) -> str:
    return f"fusecc_mma_{kind}"


def _packing(kind: str, a_count: int, b_count: int) -> tuple[list[str], list[str]]:
    """C expressions of the A and B registers (.b32) from the float parameters."""
    if kind == "tf32":
        return [f"fusecc_to_tf32(a{i})" for i in range(a_count)], [f"fusecc_to_tf32(b{i})" for i in range(b_count)]
    pack = f"fusecc_pack_{kind}x2"
    return ([f"{pack}(a{i}, a{i + 1})" for i in range(0, a_count, 2)], [f"{pack}(b{i}, b{i + 1})" for i in range(0, b_count, 2)])


def helper(kind: str) -> list[str]:
    """The C helper of one mma kind (both branches)."""
    f = FRAGMENTS[kind]
    params = ", ".join(["float& d0, float& d1, float& d2, float& d3"] + [f"float a{i}" for i in range(f.a_count)] + [f"float b{i}" for i in range(f.b_count)] + ["float c0, float c1, float c2, float c3"])
    a_regs, b_regs = _packing(kind, f.a_count, f.b_count)
    a_list = ", ".join(f"%{4 + i}" for i in range(len(a_regs)))
    b_list = ", ".join(f"%{4 + len(a_regs) + i}" for i in range(len(b_regs)))
    c_first = 4 + len(a_regs) + len(b_regs)
    c_list = ", ".join(f"%{c_first + i}" for i in range(4))
    inputs = ", ".join([f'"r"({r})' for r in a_regs + b_regs] + [f'"f"(c{i})' for i in range(4)])
    emulated_a = ", ".join(a_regs + ["0u"] * (4 - len(a_regs)))
    return [
        f"// {f.shape} {kind} x {kind} + f32 on tensor cores (sm_80+): this lane's A ({f.a_count}), B ({f.b_count}) and C (4) fragments.",
        f"static __device__ __forceinline__ void {helper_name(kind)}({params}) {{",
        "#ifdef FUSECC_CPU_EMULATION",
        f"  const uint32_t a[4] = {{{emulated_a}}};",
        f"  const uint32_t b[2] = {{{', '.join(b_regs)}}};",
        "  const float c[4] = {c0, c1, c2, c3};",
        "  float d[4];",
        f"  fusecc_cpu::mma::sync(fusecc_cpu::mma::{HARNESS_KIND[kind]}, a, b, c, d, __builtin_return_address(0));",
        "  d0 = d[0]; d1 = d[1]; d2 = d[2]; d3 = d[3];",
        "#else",
        f'  asm("mma.sync.aligned.{PTX_SHAPE[kind]} {{%0, %1, %2, %3}}, {{{a_list}}}, {{{b_list}}}, {{{c_list}}};"',
        f'      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3) : {inputs});',
        "#endif",
        "}",
    ]


PACKING = {
    "f16": [
        "// Two f32 values (f16 already, so exactly) as one .f16x2 register: lo in bits 0-15 (cvt puts its first operand high).",
        "static __device__ __forceinline__ unsigned fusecc_pack_f16x2(float lo, float hi) {",
        "#ifdef FUSECC_CPU_EMULATION",
        "  return fusecc_cpu::mma::pack_f16x2(lo, hi);",
        "#else",
        '  unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;',
        "#endif",
        "}",
    ],
    "bf16": [
        "static __device__ __forceinline__ unsigned fusecc_pack_bf16x2(float lo, float hi) {",
        "#ifdef FUSECC_CPU_EMULATION",
        "  return fusecc_cpu::mma::pack_bf16x2(lo, hi);",
        "#else",
        '  unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;',
        "#endif",
        "}",
    ],
    "tf32": [
        "// f32 to tf32 (10-bit mantissa, round to nearest, ties away): what --allow-tf32 gives up.",
        "static __device__ __forceinline__ unsigned fusecc_to_tf32(float x) {",
        "#ifdef FUSECC_CPU_EMULATION",
        "  return fusecc_cpu::mma::to_tf32(x);",
        "#else",
        '  unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r;',
        "#endif",
        "}",
    ],
}


def prelude_lines(kinds: set[str]) -> list[str]:
    """The helpers of the mma kinds a translation unit uses (none: nothing)."""
    lines: list[str] = []
    for kind in sorted(kinds):
        lines += PACKING[kind] + helper(kind)
    return lines


def render_mma(renderer, op: MmaSyncOp) -> None:
    """The kernel renderer's handler (kernel.py's STRUCTURE table)."""
    kind = op.attr("kind")
    renderer.mma_kinds.add(kind)
    names = [renderer.name_for(r, "d") for r in op.results]
    renderer.line(f"float {', '.join(names)};")
    args = ", ".join(names + [renderer.e(v) for v in op.operands])
    renderer.line(f"{helper_name(kind)}({args});")


__all__ = ["MIN_ARCH", "helper_name", "prelude_lines", "render_mma"]
