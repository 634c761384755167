"""Scalar loops that carry a float max or min are kept from LLVM's loop
vectoriser: LLVM 22 vectorises such a `maxnum` reduction behind a NaN check
and, for a row of 5, dropped the fifth element (the max of the first four).
A softmax whose row max is in that element then subtracted too small a max,
and exp overflowed to inf/inf = NaN (found by the random dynamic-shape test,
tests/passes/lowering/test_dynamic_random.py). The loop IR is right; the golden
tests/filecheck/passes/emit_llvm/float_extremum.ir checks the metadata."""

from __future__ import annotations

import numpy as np
import pytest

import fusecc

SOFTMAX_OF_EXP_EXP = """
func.func @main(%x: tensor<{shape}xf32>) -> tensor<{shape}xf32> {{
  %e = tensor.exp %x : (tensor<{shape}xf32>) -> tensor<{shape}xf32>
  %ee = tensor.exp %e : (tensor<{shape}xf32>) -> tensor<{shape}xf32>
  %s = tensor.softmax %ee {{axis = -1}} : (tensor<{shape}xf32>) -> tensor<{shape}xf32>
  func.return %s : tensor<{shape}xf32>
}}
"""


@pytest.mark.parametrize("shape", ["3x5", "?x5"])
def test_softmax_row_max_in_any_position(tmp_path, shape):
    # exp(exp(3.1)) ~ 8e9: a max missed by one element leaves exp(x - max) = inf
    path = tmp_path / "softmax.ir"
    path.write_text(SOFTMAX_OF_EXP_EXP.format(shape=shape))
    compiled = fusecc.compile(path, target="cpu")
    reference = fusecc.compile(path, target="reference")
    for position in range(5):
        x = np.zeros((3, 5), np.float32)
        x[:, position] = 3.12754
        (got,) = compiled(x=x).values()
        (want,) = reference(x=x).values()
        assert not np.isnan(got).any(), f"NaN with the row max at column {position}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

