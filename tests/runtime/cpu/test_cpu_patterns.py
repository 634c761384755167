"""The hand-written benchmark kernels (benchmarks/cpu_kernels.py), compiled
for the CPU, give the loop interpreter's numbers within the tolerance
policy, and the interpreter gives the pattern's numpy numbers."""

from __future__ import annotations

import numpy as np
import pytest

import cpu_kernels as K
from fusecc.runtime.cpu import compile_program
from fusecc.runtime.loop_interpreter import run_schedule

from cpu_tolerance import assert_exact, assert_kernel_close


def run_both(module, inputs):
    (got,) = compile_program(module).run(inputs)
    (want,) = run_schedule(module, "main", inputs)
    return got, want


def normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("cols", [16, 37])
def test_bias_gelu_residual(rng, approximate, cols):
    x, bias, res = normal(rng, 3, cols), normal(rng, cols), normal(rng, 3, cols)
    got, want = run_both(K.bias_gelu_residual(3, cols, approximate), [x, bias, res])
    assert_kernel_close(got, want)
    np.testing.assert_allclose(want, K.reference("bias_gelu_residual", x, bias, res, approximate=approximate), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cols,partials", [(64, 16), (40, 16), (96, 32), (100, 64)])
def test_layernorm_gelu(rng, cols, partials):
    x, gamma, beta = normal(rng, 2, cols) * 3 + 1, normal(rng, cols), normal(rng, cols)
    got, want = run_both(K.layernorm_gelu(2, cols, partials), [x, gamma, beta])
    assert_kernel_close(got, want)
    np.testing.assert_allclose(want, K.reference("layernorm_gelu", x, gamma, beta), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cols,partials", [(64, 16), (50, 16), (128, 64)])
def test_softmax(rng, cols, partials):
    x = normal(rng, 3, cols) * 4
    got, want = run_both(K.softmax(3, cols, partials), [x])
    assert_kernel_close(got, want)
    np.testing.assert_allclose(want, K.reference("softmax", x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("packed", [False, True])
def test_matmul_tile_is_exact_without_transcendentals(rng, packed):
    # The K loop accumulates in order in every lane, as the interpreter does.
    a, b, bias = normal(rng, 8, 12), normal(rng, 12, 64), normal(rng, 64)
    module = K.matmul_bias(8, 12, 64, activation=None, mr=4, nr=32, packed=packed)
    got, want = run_both(module, [a, K.pack_panels(b, 32) if packed else b, bias])
    assert_exact(got, want)
    np.testing.assert_allclose(want, K.reference("matmul_bias", a, b, bias, activation=None), rtol=1e-5, atol=1e-5)


def test_matmul_bias_gelu(rng):
    a, b, bias = normal(rng, 16, 8), normal(rng, 8, 32), normal(rng, 32)
    got, want = run_both(K.matmul_bias(16, 8, 32, mr=8, nr=32), [a, b, bias])
    assert_kernel_close(got, want)


def test_mlp_two_kernels_through_the_arena(rng):
    x, w1, b1, w2, b2 = normal(rng, 8, 16), normal(rng, 16, 32) / 4, normal(rng, 32), normal(rng, 32, 16) / 4, normal(rng, 16)
    got, want = run_both(K.mlp(8, 16, 32, mr=8, nr=16), [x, w1, b1, w2, b2])
    assert_kernel_close(got, want)
    np.testing.assert_allclose(want, K.reference("mlp", x, w1, b1, w2, b2), rtol=1e-4, atol=1e-4)


def test_attention(rng):
    q, k, v = (normal(rng, 2, 24, 16) for _ in range(3))
    got, want = run_both(K.attention(2, 24, 16, partials=16), [q, k, v])
    assert_kernel_close(got, want)
    np.testing.assert_allclose(want, K.reference("attention", q, k, v), rtol=1e-5, atol=1e-6)
