"""Reference bugs the fuzzer found (issue 16). A softmax over an empty axis has an empty result and needs no maximum:
the reference (and constant folding, which calls the same evaluate hook)
returned a DomainError for it; found by the fuzzer (issue 16)."""

import numpy as np

from fusecc.compiler.parser import parse_module
from fusecc.compiler.verifier import verify
from fusecc.runtime.reference import evaluate

PROGRAM = """
func.func @main(%x: tensor<3x0xbf16>, %y: tensor<0x4xf32>) -> (tensor<3x0xbf16>, tensor<0x4xf32>) {
  %0 = tensor.softmax %x {axis = -1} : (tensor<3x0xbf16>) -> tensor<3x0xbf16>
  %1 = tensor.softmax %y {axis = 0} : (tensor<0x4xf32>) -> tensor<0x4xf32>
  func.return %0, %1 : tensor<3x0xbf16>, tensor<0x4xf32>
}
"""


def test_softmax_over_an_empty_axis_is_empty():
    module = parse_module(PROGRAM)
    verify(module)
    a, b = evaluate(module, "main", [np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)])
    assert a.shape == (3, 0) and b.shape == (0, 4)


def test_erf_keeps_the_sign_of_zero():
    # C99: erf(±0) = ±0; the reference gave +0 for -0, so 1/erf(-0) was +inf (fuzz seed 4892)
    module = parse_module("""
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = tensor.erf %x : (tensor<3xf32>) -> tensor<3xf32>
  %1 = tensor.reciprocal %0 : (tensor<3xf32>) -> tensor<3xf32>
  func.return %1 : tensor<3xf32>
}""")
    verify(module)
    (got,) = evaluate(module, "main", [np.array([-0.0, 0.0, np.nan], np.float32)])
    assert got[0] == -np.inf and got[1] == np.inf and np.isnan(got[2])


def test_attention_with_no_head_dim_has_a_default_scale():
    # 1/sqrt(D) with D = 0 divided by zero (fuzz seed 5378); the scores are empty sums
    module = parse_module("""
func.func @main(%q: tensor<2x3x0xf32>, %k: tensor<2x4x0xf32>, %v: tensor<2x4x5xf32>) -> tensor<2x3x5xf32> {
  %0 = tensor.attention %q, %k, %v : (tensor<2x3x0xf32>, tensor<2x4x0xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  func.return %0 : tensor<2x3x5xf32>
}""")
    verify(module)
    v = np.arange(40, dtype=np.float32).reshape(2, 4, 5)
    (got,) = evaluate(module, "main", [np.zeros((2, 3, 0), np.float32), np.zeros((2, 4, 0), np.float32), v])
    np.testing.assert_allclose(got, np.broadcast_to(v.mean(axis=1, keepdims=True), (2, 3, 5)), rtol=1e-6)
