"""report --measure and fusecc profile on a program whose constant weight is
packed at load (runtime/cpu/load_time.py): the measured steps are the
per-call launches, so the pack_b launch that ran once at load is neither
expected among them (before, every such program failed with 'the fused
program ran steps [...], its schedule has [...]') nor credited time."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from fusecc.compiler import attributes as A  # noqa: E402
from fusecc.compiler.parser import parse_module  # noqa: E402
from fusecc.compiler.types import TensorType, f32  # noqa: E402
from fusecc.driver.measure import measure  # noqa: E402

RNG = np.random.default_rng(5)
WEIGHT = RNG.standard_normal((1024, 64)).astype(np.float32)
TEXT = """func.func @main(%x: tensor<32x1024xf32>) -> tensor<32x64xf32> {
  %w = tensor.constant {value = dense<BODY> : tensor<1024x64xf32>} : () -> tensor<1024x64xf32>
  %y = tensor.matmul %x, %w : (tensor<32x1024xf32>, tensor<1024x64xf32>) -> tensor<32x64xf32>
  func.return %y : tensor<32x64xf32>
}
"""


def test_measure_leaves_out_the_launches_run_at_load():
    module = parse_module(TEXT.replace("BODY", A.dense(WEIGHT, TensorType(WEIGHT.shape, f32)).format_body()))
    report = json.dumps(measure(module, "main", "cpu", repeat=2), default=str)
    assert "fused_0_matmul\"" in report  # per-call launches are measured
    assert "pack_b" not in report  # the weight was packed once, at load
