"""tensor.gather inside fused kernels gives the reference's numbers: on the
loop interpreter (GPU and CPU mappings), the CPU target (LLVM) and the
generated CUDA C on the CPU harness. Indices include negative ones and ones
out of range on both sides, which every target clamps the same way."""

from __future__ import annotations

import numpy as np
import pytest
from harness import REDUCTION, TARGETS, check_lowering, parse

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.driver import targets
from fusecc.driver.cuda_level import build_manifest
from fusecc.driver.pipelines import pipeline_for_level
from fusecc.passes.backends.cuda.emit import emit_cuda
from fusecc.runtime.cuda.execute import run_on_cpu
from fusecc.runtime.reference import evaluate

EMBEDDING = """
func.func @main(%table: tensor<30x8xf32>, %ids: tensor<2x5xi64>, %pos: tensor<5x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x5x8xf32> {
  %0 = tensor.gather %table, %ids {axis = 0} : (tensor<30x8xf32>, tensor<2x5xi64>) -> tensor<2x5x8xf32>
  %1 = tensor.add %0, %pos : (tensor<2x5x8xf32>, tensor<5x8xf32>) -> tensor<2x5x8xf32>
  %2 = tensor.layernorm %1, %g, %b : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  func.return %2 : tensor<2x5x8xf32>
}
"""

# Axis 1 of 3-D data with i32 indices of rank 2, a rank-0 index, and f16 data.
AXES_AND_TYPES = """
func.func @main(%x: tensor<3x7x4xf32>, %i: tensor<2x3xi32>, %h: tensor<6x5xf16>, %k: tensor<i64>) -> (tensor<3x2x3x4xf32>, tensor<6xf16>) {
  %0 = tensor.gather %x, %i {axis = 1} : (tensor<3x7x4xf32>, tensor<2x3xi32>) -> tensor<3x2x3x4xf32>
  %1 = tensor.exp %0 : (tensor<3x2x3x4xf32>) -> tensor<3x2x3x4xf32>
  %2 = tensor.gather %h, %k {axis = -1} : (tensor<6x5xf16>, tensor<i64>) -> tensor<6xf16>
  %3 = tensor.neg %2 : (tensor<6xf16>) -> tensor<6xf16>
  func.return %1, %3 : tensor<3x2x3x4xf32>, tensor<6xf16>
}
"""

PROGRAMS = {"embedding": (EMBEDDING, REDUCTION), "axes-and-types": (AXES_AND_TYPES, dict(rtol=2e-3, atol=2e-3))}


def inputs(module, seed: int = 0) -> list[np.ndarray]:
    """Random data; indices from -2n to 2n - 1, so about half are out of range."""
    rng = np.random.default_rng(seed)
    out = []
    func = module.lookup("main")
    for t in func.function_type.inputs:
        dtype = t.element_type.numpy_dtype
        if dtype.kind == "i":
            out.append(rng.integers(-14, 14, t.shape).astype(dtype))
        else:
            out.append(rng.standard_normal(t.shape).astype(dtype))
    return out


def compare(actual, expected, tolerance):
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, **tolerance)


def test_the_test_indices_reach_outside_the_axes():
    ids = inputs(parse(EMBEDDING))[1]
    assert (ids < 0).any() and (ids >= 30).sum() == 0 and (ids < -30).sum() == 0  # wrapped: in range for 30 rows
    i = inputs(parse(AXES_AND_TYPES))[1]
    assert (i >= 7).any() and (i < -7).any()  # clamped on both sides for 7 entries


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_fused_gathers_match_the_reference_on_the_loop_interpreter(name, target):
    text, tolerance = PROGRAMS[name]
    check_lowering(parse(text), target, tolerance, extra="fuse")


@pytest.mark.parametrize("name", PROGRAMS)
def test_fused_gathers_match_the_reference_on_the_cpu_target(name):
    text, tolerance = PROGRAMS[name]
    module = parse(text)
    args = inputs(module)
    expected = evaluate(module, "main", args)
    compare(targets.get("cpu").run(module, "main", args, DiagnosticEngine()), expected, tolerance)


@pytest.mark.parametrize("name", PROGRAMS)
def test_fused_gathers_match_the_reference_in_cuda_c_on_the_cpu_harness(name, cuda_cache_dir):
    text, tolerance = PROGRAMS[name]
    module = parse(text)
    args = inputs(module)
    expected = evaluate(module, "main", args)
    lowered = parse(print_op(module))
    run_pipeline(parse_pipeline(pipeline_for_level("cuda", target="h200")), lowered, PassContext(target="h200"))
    cuda = emit_cuda(lowered, f"{name}.ir")
    manifest = build_manifest(lowered, cuda, f"{name}.cu", "sm_90", "main")
    got = run_on_cpu(manifest, cuda.text, args, cache_dir=cuda_cache_dir)
    compare([got[spec.name] for spec in manifest.outputs], expected, tolerance)


def test_an_embedding_lookup_is_one_kernel_with_its_add_and_layernorm():
    module = parse(EMBEDDING)
    run_pipeline(parse_pipeline("fuse"), module, PassContext(target="cpu"))
    groups = [op for op in module.walk() if op.name == "fusion.group"]
    assert len(groups) == 1
    assert [op.name for op in groups[0].body][:3] == ["tensor.gather", "tensor.add", "tensor.layernorm"]


