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


def exp_kernel(n: int, lanes: int):
    w = Writer()
    t = memref(n // lanes, lanes, f32)
    with w.kernel("exp", [t, t]) as (x, out):
        with w.parallel([n // lanes], ["worker"]) as (row,):
            with w.parallel([lanes], ["vector"]) as (lane,):
                w.store(w.unary("exp", w.load(x, row, lane)), out, row, lane)
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
