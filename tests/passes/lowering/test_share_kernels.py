"""Identical layers compile once, on the CPU and in kernels.cu: lower-to-loops
lowers a repeated fusion group once, and `share-kernels` merges identical
loop kernels.

Counts, not times: a 2-layer encoder has exactly the distinct kernels of a
1-layer one, each defined once in the LLVM module and in the CUDA source,
and launched once per layer; results still agree with the reference."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.verifier import verify
from fusecc.dialects import loop
from fusecc.driver.pipelines import pipeline_for_level
from fusecc.passes.lowering.share_kernels import share_identical_kernels
from fusecc.runtime.reference import evaluate

ROOT = pathlib.Path(__file__).resolve().parents[3]


def encoder_layers():
    spec = importlib.util.spec_from_file_location("encoder_layers", ROOT / "benchmarks" / "encoder_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lowered(text: str, target: str):
    module = parse_module(text)
    verify(module)
    pipeline = pipeline_for_level("loop", target=target)
    run_pipeline(parse_pipeline(pipeline), module, PassContext(target=target))
    verify(module)
    return module


def kernels_and_launches(module):
    kernels = [op.sym_name for op in module.body if isinstance(op, loop.KernelOp)]
    launches = [op.kernel_name for op in module.walk() if isinstance(op, loop.LaunchOp)]
    return kernels, launches


@pytest.fixture(scope="module")
def encoders():
    make = encoder_layers()
    return {layers: make.encoder(layers)[0] for layers in (1, 2)}


@pytest.mark.parametrize("target", ["cpu", "h200"])
def test_two_layers_compile_the_kernels_of_one(encoders, target):
    one_kernels, one_launches = kernels_and_launches(lowered(encoders[1], target))
    two = lowered(encoders[2], target)
    two_kernels, two_launches = kernels_and_launches(two)
    assert two_kernels == one_kernels
    assert len(two_launches) == 2 * len(one_launches)
    assert set(two_launches) == set(two_kernels)
    if target == "cpu":
        from fusecc.passes.backends.llvm.emit import emit_llvm

        llvm = emit_llvm(two, isa=frozenset())
        assert sorted(llvm.kernels) == sorted(two_kernels)
        assert sum(line.startswith("define ") for line in llvm.text.splitlines()) == len(two_kernels)
    else:
        from fusecc.passes.backends.cuda.emit import emit_cuda

        cuda = emit_cuda(two)
        assert cuda.text.count("__global__") == len(set(two_kernels)) + len(cuda.fills) + cuda.text.count("__global__ void fusecc_copy")
        assert sorted(k.sym_name for k in cuda.kernels if k.sym_name) == sorted(two_kernels)


def test_the_manifest_launches_the_shared_function(encoders):
    from fusecc.driver.cuda_level import build_manifest
    from fusecc.passes.backends.cuda.emit import emit_cuda

    def launched(layers):
        module = lowered(encoders[layers], "h200")
        cuda = emit_cuda(module)
        return [launch.kernel for launch in build_manifest(module, cuda).launches], {info.name for info in cuda.kernels}

    one, _ = launched(1)
    two, defined = launched(2)
    assert two == one + one  # the second layer launches the first layer's functions
    assert set(two) <= defined


def test_kernels_that_differ_stay_apart():
    """Kernels written at the loop level (no groups): only the one that
    differs in name and group id alone is merged; -0.0 is not 0.0."""
    module = parse_module((ROOT / "tests" / "filecheck" / "passes" / "lowering" / "share_kernels.ir").read_text())
    assert share_identical_kernels(module) == {"tanh_again": "tanh"}
    verify(module)
    assert [op.sym_name for op in module.body if isinstance(op, loop.KernelOp)] == ["tanh", "exp", "tanh_negzero"]


def test_lowering_reuses_the_kernels_of_an_identical_group(encoders):
    """lower-to-loops lowers a repeated group once (share-kernels then has
    nothing left to merge in an encoder)."""
    module = parse_module(encoders[2])
    pipeline = pipeline_for_level("loop", target="cpu").replace(",share-kernels", "")
    run_pipeline(parse_pipeline(pipeline), module, PassContext(target="cpu"))
    kernels, launches = kernels_and_launches(module)
    assert len(kernels) == len(set(launches)) < len(launches)
    assert share_identical_kernels(module) == {}


def test_a_shared_encoder_runs_like_the_reference(encoders):
    pytest.importorskip("llvmlite")
    from fusecc.runtime.cpu.executor import compile_program

    make = encoder_layers()
    text, weights = make.encoder(2)
    module = parse_module(text)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 128, 768)).astype(np.float32)
    mask = np.where(rng.random((1, 1, 1, 128)) < 0.2, -10000.0, 0.0).astype(np.float32)
    inputs = [x, mask, *weights.values()]
    (want,) = evaluate(module, "encoder", inputs)
    (got,) = compile_program(lowered(text, "cpu")).run(inputs, "encoder")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
