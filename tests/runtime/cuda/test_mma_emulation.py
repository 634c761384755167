"""The CPU harness's mma.sync (cpu_harness/cuda_cpu_mma.h) against an
independent numpy model of the PTX ISA's fragment tables and roundings.

A probe kernel (one warp) loads each lane's A, B and C fragments from
matrices at the flat offsets the *numpy model* gives, calls the prelude's
helper (passes/backends/cuda/mma.py, the same text kernels.cu gets), and
stores D at the model's C offsets: the harness's own tables never meet the
model's, so any disagreement in which lane holds what scrambles D.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusecc.dialects.nvgpu import mma_reference
from fusecc.passes.backends.cuda.mma import prelude_lines
from fusecc.runtime.cuda.cpu_harness.sanitizer import Sanitizer

# --------------------------------------------------------------------------- the model, from the PTX ISA text
# 9.7.14.5.8 (m16n8k16, .f16/.bf16) and 9.7.14.5.7 (m16n8k8, .tf32):
#   groupID = %laneid >> 2, threadID_in_group = %laneid % 4


def model_a(kind: str, lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    if kind == "tf32":  # row = groupID for a0 and a2, +8 for a1 and a3; col = tig for a0 and a1, +4 for a2 and a3
        return (group if i in (0, 2) else group + 8), (tig if i in (0, 1) else tig + 4)
    # row = groupID for ai where 0 <= i < 2 || 4 <= i < 6, else groupID + 8
    row = group if (0 <= i < 2 or 4 <= i < 6) else group + 8
    # col = tig * 2 + (i & 1) for i < 4, and + 8 for i >= 4
    col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def model_b(kind: str, lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    if kind == "tf32":  # row = tig for b0, tig + 4 for b1; col = groupID
        return (tig if i == 0 else tig + 4), group
    return tig * 2 + (i & 1) + (8 if i >= 2 else 0), group  # row: +8 for b2, b3; col = groupID


def model_c(lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    return (group if i < 2 else group + 8), tig * 2 + (i & 1)


SHAPES = {"f16": (16, 8, 16, 8, 4), "bf16": (16, 8, 16, 8, 4), "tf32": (16, 8, 8, 4, 2)}  # m, n, k, A and B per lane


def model_tf32(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 by arithmetic (not bit tricks): the nearest multiple
    of 2^(exponent - 10), halves away from zero."""
    out = np.empty_like(x, dtype=np.float64)
    for index, v in np.ndenumerate(x.astype(np.float64)):
        if v == 0 or not math.isfinite(v):
            out[index] = v
            continue
        step = 2.0 ** (math.frexp(abs(v))[1] - 1 - 10)
        out[index] = math.copysign(math.floor(abs(v) / step + 0.5) * step, v)
    return out.astype(np.float32)


def model_round(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "f16":
        return x.astype(np.float16).astype(np.float32)
    if kind == "bf16":
        import ml_dtypes  # noqa: F401  (numpy's bfloat16, round to nearest even)

        return x.astype(ml_dtypes.bfloat16).astype(np.float32)
    return model_tf32(x)


def model_d(kind: str, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """D = C + sum over k in order, each product exact, each sum rounded to f32."""
    A, B = model_round(A, kind).astype(np.float64), model_round(B, kind).astype(np.float64)
    D = np.empty(C.shape, np.float32)
    for r, c in np.ndindex(*C.shape):
        acc = np.float32(C[r, c])
        for k in range(A.shape[1]):
            acc = np.float32(np.float64(acc) + A[r, k] * B[k, c])  # the float64 sum of an f32 and an exact product rounds once
        D[r, c] = acc
    return D


# --------------------------------------------------------------------------- the probe kernel


def probe_kernel(kind: str) -> str:
    _, _, _, na, nb = SHAPES[kind]
    args = ", ".join([f"d[{i}]" for i in range(4)] + [f"av[{i}]" for i in range(na)] + [f"bv[{i}]" for i in range(nb)] + [f"cv[{i}]" for i in range(4)])
    return f"""
extern "C" __global__ void probe_{kind}(const float* a, const float* b, const float* c, const int* a_at, const int* b_at, const int* c_at, float* out) {{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float av[{na}], bv[{nb}], cv[4], d[4];
  for (int i = 0; i < {na}; ++i) av[i] = a[a_at[lane * {na} + i]];
  for (int i = 0; i < {nb}; ++i) bv[i] = b[b_at[lane * {nb} + i]];
  for (int i = 0; i < 4; ++i) cv[i] = c[c_at[lane * 4 + i]];
  fusecc_mma_{kind}({args});
  for (int i = 0; i < 4; ++i) out[warp * 128 + c_at[lane * 4 + i]] = d[i];
}}
"""


SOURCE = "\n".join(prelude_lines({"f16", "bf16", "tf32"})) + "\n" + "".join(probe_kernel(k) for k in SHAPES)


@pytest.fixture(scope="module")
def sanitizer(cuda_cache_dir):
    return Sanitizer(SOURCE, "mma_probe.cu", cache_dir=cuda_cache_dir)


def offsets(kind: str):
    m, n, k, na, nb = SHAPES[kind]
    a_at = np.array([[r * k + c for r, c in (model_a(kind, lane, i) for i in range(na))] for lane in range(32)], np.int32)
    b_at = np.array([[r * n + c for r, c in (model_b(kind, lane, i) for i in range(nb))] for lane in range(32)], np.int32)
    c_at = np.array([[r * n + c for r, c in (model_c(lane, i) for i in range(4))] for lane in range(32)], np.int32)
    return a_at, b_at, c_at


def run_probe(sanitizer, kind: str, A, B, C, threads: int = 32):
    a_at, b_at, c_at = offsets(kind)
    out = np.full(max(1, threads // 32) * 128, np.nan, np.float32)
    sanitizer.findings = []
    sanitizer.launch(f"probe_{kind}", 1, threads, [A.ravel(), B.ravel(), C.ravel(), a_at.ravel(), b_at.ravel(), c_at.ravel(), out])
    return out[:128].reshape(16, 8), sanitizer.findings


def test_the_model_tables_cover_each_matrix_once():
    for kind, (m, n, k, na, nb) in SHAPES.items():
        a_at, b_at, c_at = offsets(kind)
        assert sorted(a_at.ravel()) == list(range(m * k))
        assert sorted(b_at.ravel()) == list(range(k * n))
        assert sorted(c_at.ravel()) == list(range(m * n))


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_fragments_land_where_the_ptx_tables_say(sanitizer, kind):
    # small integers: every order of summation is exact, so D = A·B + C
    # exactly, and any lane or element mixed up changes it
    m, n, k, _, _ = SHAPES[kind]
    rng = np.random.default_rng(1)
    A = rng.integers(-8, 9, (m, k)).astype(np.float32)
    B = rng.integers(-8, 9, (k, n)).astype(np.float32)
    C = rng.integers(-64, 65, (m, n)).astype(np.float32)
    D, findings = run_probe(sanitizer, kind, A, B, C)
    assert findings == []
    np.testing.assert_array_equal(D, A.astype(np.float64) @ B + C)


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_rounding_and_accumulation_match_the_model_bit_for_bit(sanitizer, kind):
    m, n, k, _, _ = SHAPES[kind]
    rng = np.random.default_rng(2)
    A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (m, n)))
    if kind != "tf32":  # the kernels hand f16/bf16 values over exactly; the packing is checked with exact inputs
        A, B = model_round(A, kind), model_round(B, kind)
    D, findings = run_probe(sanitizer, kind, A, B, C)
    assert findings == []
    np.testing.assert_array_equal(D, model_d(kind, A, B, C))


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_the_interpreters_semantics_is_the_harnesss(sanitizer, kind):
    # dialects/nvgpu.py's mma_reference (the loop interpreter) on the same lanes
    m, n, k, na, nb = SHAPES[kind]
    rng = np.random.default_rng(3)
    A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (m, n)))
    D, _ = run_probe(sanitizer, kind, A, B, C)
    a_at, b_at, c_at = offsets(kind)
    d = mma_reference(kind, A.ravel()[a_at], B.ravel()[b_at], C.ravel()[c_at])
    got = np.empty(m * n, np.float32)
    got[c_at.ravel()] = d.ravel()
    np.testing.assert_array_equal(got.reshape(m, n), D)


def test_tf32_rounds_ties_away_from_zero(sanitizer):
    # 1 + 2^-11 lies halfway between two tf32 values: away gives 1 + 2^-10 (nearest even would give 1)
    A = np.zeros((16, 8), np.float32)
    B = np.zeros((8, 8), np.float32)
    A[0, 0], A[1, 0], A[2, 0] = 1 + 2.0**-11, -(1 + 2.0**-11), 1 + 2.0**-12  # the last rounds down
    B[0, 0] = 1
    D, _ = run_probe(sanitizer, "tf32", A, B, np.zeros((16, 8), np.float32))
    assert D[0, 0] == np.float32(1 + 2.0**-10)
    assert D[1, 0] == np.float32(-(1 + 2.0**-10))
    assert D[2, 0] == np.float32(1)


def test_an_mma_in_a_partial_warp_is_reported(sanitizer):
    m, n, k, _, _ = SHAPES["f16"]
    zeros = [np.zeros(s, np.float32) for s in ((m, k), (k, n), (m, n))]
    _, findings = run_probe(sanitizer, "f16", *zeros, threads=16)
    assert findings and {f.kind for f in findings} == {"partial-warp"}
