"""A softmax over an empty axis has an empty result and needs no maximum:
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
