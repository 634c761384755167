"""The `nvgpu` dialect: NVIDIA warp-level matrix instructions at the loop level.

    %d0, %d1, %d2, %d3 = nvgpu.mma_sync(%a0, ..., %b0, ..., %c0, %c1, %c2, %c3) {kind = "f16"}

is PTX's `mma.sync.aligned.<shape>.row.col.f32.<kind>.<kind>.f32`: the 32
threads of a warp together compute D = A·B + C for one MxNxK tile, each
thread holding a fragment of A, B and C/D (MLIR's `nvgpu.mma.sync`, with
fragments as scalars since the loop level has no vectors). The kinds:

  kind   shape      A per lane  B per lane  inputs rounded to
  f16    m16n8k16   8           4           f16 (nearest even)
  bf16   m16n8k16   8           4           bf16 (nearest even)
  tf32   m16n8k8    4           2           tf32: 10-bit mantissa, nearest, ties away (cvt.rna.tf32.f32)

C and D are 4 f32 per lane. Which element of A, B, C/D a lane holds is the
PTX ISA's fragment tables (9.7.14.5, "Matrix Fragments for mma.m16n8k16 /
m16n8k8"), `FRAGMENTS` below; the lowering indexes shared tiles with them,
and the interpreter and the CPU harness (cpu_harness/cuda_cpu_mma.h) use
them to compute what a warp's instruction gives.

Numerics (`mma_reference`): the inputs are rounded to the kind's format,
every product is exact in f32 (11- or 8-bit significands), and each D
element is C plus the products in k order, rounded to f32 after each add.
The hardware sums a whole k-slice at once with its own internal rounding,
so a GPU may differ from this in the last bits of a sum
(docs/cuda-tensor-cores.md gives the tolerances).

The op is warp-collective: every lane of a full warp must reach it (uniform
control flow in a thread-mapped loop whose block is whole warps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from fusecc.compiler.ir import Operation, VerifyError
from fusecc.compiler.op_definitions import REQUIRED, STRING, AttrDef, OperandDef, ResultDef, register_op
from fusecc.compiler.types import ScalarType, f32, round_to_bf16
from fusecc.dialects import loop

WARP = 32

Coord = Callable[[int, int], tuple[int, int]]  # (lane, element i) -> (row, col)


def _group(lane: int) -> tuple[int, int]:
    return lane >> 2, lane % 4  # groupID, threadID_in_group


@dataclass(frozen=True)
class Fragments:
    """One mma shape's fragment tables: which (row, col) element of A (MxK),
    B (KxN) and C/D (MxN) a lane holds as its i-th value."""

    shape: str
    m: int
    n: int
    k: int
    a_count: int
    b_count: int
    a: Coord
    b: Coord
    c_count: int = 4

    def c(self, lane: int, i: int) -> tuple[int, int]:
        g, t = _group(lane)
        return g + 8 * (i >= 2), 2 * t + (i & 1)


def _a_k16(lane: int, i: int) -> tuple[int, int]:
    g, t = _group(lane)
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >= 4)


def _b_k16(lane: int, i: int) -> tuple[int, int]:
    g, t = _group(lane)
    return 2 * t + (i & 1) + 8 * (i >= 2), g


def _a_k8_tf32(lane: int, i: int) -> tuple[int, int]:
    g, t = _group(lane)
    return g + 8 * (i & 1), t + 4 * (i >= 2)


def _b_k8_tf32(lane: int, i: int) -> tuple[int, int]:
    g, t = _group(lane)
    return t + 4 * i, g


M16N8K16 = Fragments("m16n8k16", 16, 8, 16, 8, 4, _a_k16, _b_k16)
M16N8K8_TF32 = Fragments("m16n8k8", 16, 8, 8, 4, 2, _a_k8_tf32, _b_k8_tf32)
FRAGMENTS = {"f16": M16N8K16, "bf16": M16N8K16, "tf32": M16N8K8_TF32}


def round_tf32(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: keep 10 mantissa bits, rounding to nearest with
    ties away from zero (add half of the dropped range to the magnitude,
    then truncate); NaN stays NaN, a carry past the largest finite is inf."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = ((bits.astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32)
    out = np.where(np.isnan(x), x, rounded.view(np.float32))
    return out.astype(np.float32)


def round_input(x: np.ndarray, kind: str) -> np.ndarray:
    """An A or B element as the kind's register format holds it (in f32)."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore"):
        if kind == "f16":
            return x.astype(np.float16).astype(np.float32)
        if kind == "bf16":
            return round_to_bf16(x)
    return round_tf32(x)


def mma_reference(kind: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D fragments [32, 4] of one warp's mma from its A [32, a_count], B
    [32, b_count] and C [32, 4] fragments (module docstring: the numerics)."""
    f = FRAGMENTS[kind]
    A = np.zeros((f.m, f.k), np.float32)
    B = np.zeros((f.k, f.n), np.float32)
    for lane in range(WARP):
        for i in range(f.a_count):
            A[f.a(lane, i)] = a[lane][i]
        for i in range(f.b_count):
            B[f.b(lane, i)] = b[lane][i]
    A, B = round_input(A, kind), round_input(B, kind)
    d = np.zeros((WARP, f.c_count), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for lane in range(WARP):
            for i in range(f.c_count):
                row, col = f.c(lane, i)
                acc = np.float32(c[lane][i])
                for kk in range(f.k):
                    acc = np.float32(acc + np.float32(A[row, kk] * B[kk, col]))  # the product is exact in f32
                d[lane, i] = acc
    return d


@register_op
class MmaSyncOp(Operation):
    """One warp's `mma.sync` (module docstring): operands are this lane's A
    fragment, then its B fragment, then its 4 C values; results its 4 D values."""

    name = "nvgpu.mma_sync"
    operand_defs = (OperandDef("fragments", variadic=True),)
    result_defs = (ResultDef("d", variadic=True),)
    attr_defs = (AttrDef("kind", STRING, REQUIRED, tuple(FRAGMENTS)),)

    @property
    def fragments_table(self) -> Fragments:
        return FRAGMENTS[self.attr("kind")]

    @property
    def a(self) -> list:
        return list(self.operands[: self.fragments_table.a_count])

    @property
    def b(self) -> list:
        f = self.fragments_table
        return list(self.operands[f.a_count : f.a_count + f.b_count])

    @property
    def c(self) -> list:
        f = self.fragments_table
        return list(self.operands[f.a_count + f.b_count :])

    def verify_(self) -> None:
        f = self.fragments_table
        if len(self.operands) != f.a_count + f.b_count + f.c_count or len(self.results) != f.c_count:
            raise VerifyError(f"a {self.attr('kind')} mma ({f.shape}) takes {f.a_count} A, {f.b_count} B and {f.c_count} C values and gives {f.c_count} D values, "
                              f"not {len(self.operands)} operands and {len(self.results)} results")
        for v in self.operands:
            if not (isinstance(v.type, ScalarType) and v.type.is_float):
                raise VerifyError(f"fragments are float scalars, not {v.type}")
        for v in list(self.c) + list(self.results):
            if v.type is not f32:
                raise VerifyError(f"C and D are f32, not {v.type}")
        section = loop.enclosing_parallel(self)
        if section is None or not section.maps_threads:
            raise VerifyError("must be inside a thread-mapped 'loop.parallel'")
        inner_if = self.parent_of_type(loop.IfOp)
        if inner_if is not None and section.is_ancestor_of(inner_if):
            raise VerifyError("must not be under a 'loop.if' inside the thread loop: every lane of the warp has to reach it")
        threads = 1
        for extent in section.upper:
            threads *= extent
        if threads % WARP:
            raise VerifyError(f"needs whole warps, but the thread loop has {threads} threads")


__all__ = ["FRAGMENTS", "Fragments", "M16N8K16", "M16N8K8_TF32", "MmaSyncOp", "WARP", "mma_reference", "round_input", "round_tf32"]
