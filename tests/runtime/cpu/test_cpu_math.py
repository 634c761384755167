"""The math expansions (passes/backends/llvm/math_functions.py) over dense grids of f32 inputs.

exp on an AVX-512 host scales by 2^n with one `vscalefps`; the portable
expansion multiplies by two powers of two. Both round y * 2^n once, so
they must agree bit for bit everywhere, overflow, subnormals and special
values included, at every width the emitter uses (16, 32, 64 lanes; 8 and
4 with AVX-512VL), and stay within 1 ulp of the correctly rounded exp.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cpu_kernels import Writer, _single_kernel_module, memref
from cpu_tolerance import ulp_distance
from fusecc.compiler.types import f32
from fusecc.runtime.cpu.executor import CompiledProgram
from fusecc.runtime.cpu.jit import host_isa

# One f32 in 1024 over [-104.5, 89.5] (where exp is neither 0 nor inf, and
# a little beyond on both sides: 2M values), every f32 next to the edges of
# that range and of the normal results, plus special values.
EDGES = [88.72283935546875, 88.7229, -87.33655, -103.27893, -103.97208, 0.0, 1e-30, -1e-30]
SPECIAL = [np.inf, -np.inf, np.nan, 128.0, -150.0, 200.0, -200.0, 3.4e38, -3.4e38]


def ordered(x) -> int:
    bits = int(np.array([x], np.float32).view(np.int32)[0])
    return bits if bits >= 0 else -(2**31) - bits


def from_ordered(keys: np.ndarray) -> np.ndarray:
    return np.where(keys < 0, -(2**31) - keys, keys).astype(np.int32).view(np.float32)


def grid() -> np.ndarray:
    parts = [from_ordered(np.arange(ordered(-104.5), ordered(89.5), 1024, dtype=np.int64))]
    parts += [from_ordered(np.arange(ordered(e) - 2048, ordered(e) + 2048, dtype=np.int64)) for e in EDGES]
    values = np.concatenate(parts + [np.array(SPECIAL, np.float32)])
    return np.concatenate([values, np.zeros(-len(values) % 64, np.float32)])


def exp_kernel(n: int, lanes: int, function: str = "exp"):
    w = Writer()
    t = memref(n // lanes, lanes, f32)
    with w.kernel(function, [t, t]) as (x, out):
        with w.parallel([n // lanes], ["worker"]) as (row,):
            with w.parallel([lanes], ["vector"]) as (lane,):
                w.store(w.unary(function, w.load(x, row, lane)), out, row, lane)
    return _single_kernel_module(w, w.ops[-1], [("x", t)], [("y", t)])


@pytest.fixture(scope="module")
def inputs():
    return grid()


@pytest.mark.skipif(not {"avx512f", "avx512vl"} <= host_isa(), reason="the host has no AVX-512")
@pytest.mark.parametrize("lanes", [64, 32, 16, 8, 4])
def test_exp_with_vscalef_is_bit_identical_to_the_portable_expansion(inputs, lanes):
    module = exp_kernel(len(inputs), lanes)
    x = inputs.reshape(-1, lanes)
    fast = CompiledProgram(module)
    assert "llvm.x86.avx512.mask.scalef" in fast.llvm.text
    portable = CompiledProgram(module, isa=frozenset())
    assert "llvm.x86" not in portable.llvm.text
    (a,), (b,) = fast.run([x]), portable.run([x])
    same = (a.view(np.int32) == b.view(np.int32)) | (np.isnan(a) & np.isnan(b))
    assert same.all(), f"{np.count_nonzero(~same)} differ, e.g. exp({x[~same][:4]}) = {a[~same][:4]} vs {b[~same][:4]}"


def test_exp_is_within_one_ulp_of_the_correctly_rounded_value(inputs):
    (got,) = CompiledProgram(exp_kernel(len(inputs), 16)).run([inputs.reshape(-1, 16)])
    got = got.reshape(-1)
    finite = np.isfinite(inputs)
    with np.errstate(over="ignore"):
        want = np.exp(inputs[finite].astype(np.float64)).astype(np.float32)
    assert ulp_distance(got[finite], want).max() <= 1
    specials = {math.inf: math.inf, -math.inf: 0.0}
    for x, y in specials.items():
        assert got[inputs == x][0] == y
    assert np.isnan(got[np.isnan(inputs)]).all()


# erf: one f32 in 256 over [-4.5, 4.5] (8.4M values: every binade down to
# 1e-38, erf's 1 - 2^-25 edge at 3.9192 and the clamp at 3.92), every f32
# next to the edges, the special values and subnormals.
ERF_EDGES = [3.9192059, 3.92, 1.0, 0.5, 1e-20, 1.1754944e-38, 0.0]
ERF_SPECIAL = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-45, -1e-45, 3.4e38, -3.4e38, 10.0, -10.0]
ERF_ULP = 5  # measured 4.56 over the dense sweep (math_functions.py, docs/cpu-target.md)


def erf_grid() -> np.ndarray:
    parts = [from_ordered(np.arange(ordered(-4.5), ordered(4.5), 256, dtype=np.int64))]
    for edge in ERF_EDGES:
        for e in (edge, -edge):
            parts.append(from_ordered(np.arange(ordered(e) - 1024, ordered(e) + 1024, dtype=np.int64)))
    values = np.concatenate(parts + [np.array(ERF_SPECIAL, np.float32)])
    return np.concatenate([values, np.zeros(-len(values) % 64, np.float32)])


@pytest.fixture(scope="module")
def erf_inputs():
    x = erf_grid()
    want = np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)
    return x, want


def check_erf(got: np.ndarray, x: np.ndarray, want: np.ndarray) -> None:
    finite = np.isfinite(x)
    error = np.abs(got[finite].astype(np.float64) - want[finite]) / np.spacing(np.abs(want[finite]).astype(np.float32))
    worst = int(np.argmax(error))
    assert error.max() <= ERF_ULP, f"erf({x[finite][worst]!r}) = {got[finite][worst]!r}, {error.max():.2f} ulp from {want[finite][worst]!r}"
    assert np.nanmax(np.abs(got)) <= 1.0
    assert (got[x == np.inf] == 1.0).all() and (got[x == -np.inf] == -1.0).all()
    assert np.isnan(got[np.isnan(x)]).all() and not np.isnan(got[~np.isnan(x)]).any()
    assert (np.signbit(got[~np.isnan(x)]) == np.signbit(x[~np.isnan(x)])).all()  # odd, -0 -> -0
    assert (np.abs(got[np.abs(x) >= 3.92]) == 1.0).all()  # from the clamp on: exactly 1 (erf(inf) too)


@pytest.mark.parametrize("lanes", [64, 16, 8, 1])
def test_erf_is_within_a_few_ulp_of_float64_at_every_width(erf_inputs, lanes):
    x, want = erf_inputs
    (got,) = CompiledProgram(exp_kernel(len(x), lanes, "erf")).run([x.reshape(-1, lanes)])
    check_erf(got.reshape(-1), x, want)


def test_erf_with_the_reciprocal_estimate_matches_the_divider(erf_inputs):
    """AVX-512 divides by Q with vrcp14ps and one FMA correction; the
    portable expansion (isa=frozenset()) uses fdiv. Both stay in the bound,
    and they differ by at most 1 ulp."""
    x, want = erf_inputs
    module = exp_kernel(len(x), 16, "erf")
    portable = CompiledProgram(module, isa=frozenset())
    assert "rcp14" not in portable.llvm.text and "fdiv" in portable.llvm.text
    (b,) = portable.run([x.reshape(-1, 16)])
    check_erf(b.reshape(-1), x, want)
    if not {"avx512f", "avx512vl"} <= host_isa():
        pytest.skip("the host has no AVX-512: only the portable expansion runs")
    fast = CompiledProgram(module)
    assert "llvm.x86.avx512.rcp14" in fast.llvm.text and "fdiv" not in fast.llvm.text
    (a,) = fast.run([x.reshape(-1, 16)])
    finite = np.isfinite(x)
    assert ulp_distance(a.reshape(-1)[finite], b.reshape(-1)[finite]).max() <= 1
