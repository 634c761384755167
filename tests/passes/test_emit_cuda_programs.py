"""Whole programs through the CUDA level: the examples and random programs
are fused, lowered, emitted, compiled with NVRTC (sm_80 and sm_90, without
register spills) and run on the CPU harness, which must agree with the loop
interpreter (random programs) or the reference (the examples, too large for
the interpreter). They need the lowering (`lower-to-loops`)."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

from fusecc.compiler import parse_module, print_op, verify
from fusecc.compiler.diagnostics import InternalCompilerError
from fusecc.compiler.pass_manager import PassContext, PipelineError, parse_pipeline, run_pipeline
from fusecc.passes.cuda_level import build_manifest, compile_program, entry_schedule
from fusecc.passes.emit_cuda import emit_cuda
from fusecc.passes.pipelines import pipeline_for_level
from fusecc.runtime.cuda.execute import run_on_cpu
from fusecc.runtime.cuda.nvrtc import NvrtcOptions, compile_cuda
from fusecc.runtime.cuda.resources import parse_ptxas_report
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import evaluate, random_input

ROOT = pathlib.Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))
TRANSCENDENTAL = {"math.exp", "math.log", "math.tanh", "math.erf", "math.pow"}


def lowered(text: str, name: str, target: str = "h200"):
    module = parse_module(text, name)
    verify(module)
    try:
        pipeline = parse_pipeline(pipeline_for_level("cuda", target=target))
    except PipelineError as exc:
        pytest.skip(f"the CUDA pipeline is not complete yet: {exc}")
    try:
        run_pipeline(pipeline, module, PassContext(target=target))
    except InternalCompilerError as exc:
        if "no kernel template" in str(exc):  # matmul/attention templates are still being written
            pytest.skip(f"the lowering is not complete yet: {exc.cause}")
        raise
    return module




# Every example for sm_90, and for sm_80 those closest to the register limit (a full cubin
# compile of an example takes seconds).
COMPILES = [(p, "sm_90") for p in EXAMPLES] + [(p, "sm_80") for p in EXAMPLES if p.stem in ("attention", "llama_block")]


@pytest.mark.parametrize("example, arch", COMPILES, ids=[f"{p.stem}-{arch}" for p, arch in COMPILES])
def test_examples_compile_without_spills(example, arch):
    module = lowered(example.read_text(), example.name, {"sm_80": "a100", "sm_90": "h200"}[arch])
    cuda = emit_cuda(module, example.name)
    log = compile_cuda(cuda.text, f"{example.stem}.cu", arch=arch, output="cubin", options=NvrtcOptions(ptxas_verbose=True)).log
    usage = parse_ptxas_report(log)
    assert set(usage) == {k.name for k in cuda.kernels}
    assert not [u.kernel for u in usage.values() if u.spills], log


@pytest.mark.parametrize("example", ["mlp", "attention"])
def test_examples_match_the_reference_on_the_cpu_harness(example, cuda_cache_dir):
    text = (ROOT / "examples" / f"{example}.ir").read_text()
    reference = parse_module(text, example)
    verify(reference)
    func = reference.lookup("main") or reference.functions()[0]
    rng = np.random.default_rng(0)
    inputs = [random_input(t, rng) for t in func.function_type.inputs]
    expected = evaluate(reference, func.sym_name, inputs)
    source, manifest = compile_program(lowered(text, example), func.sym_name)
    got = run_on_cpu(manifest, source, inputs, cache_dir=cuda_cache_dir)
    for spec, want in zip(manifest.outputs, expected):
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(got[spec.name], want, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_match_the_loop_interpreter_on_the_cpu_harness(seed, cuda_cache_dir):
    sys.path.insert(0, str(ROOT / "tests"))
    program_gen = pytest.importorskip("program_gen")
    program = program_gen.random_program(seed, num_ops=40)
    inputs = program.inputs(seed)
    module = lowered(print_op(program.module), f"random{seed}.ir")
    cuda = emit_cuda(module)
    compile_cuda(cuda.text, "random.cu", arch="sm_90", output="ptx")
    schedule = entry_schedule(module)
    expected = run_schedule(module, schedule.sym_name, inputs)
    got = run_on_cpu(build_manifest(module, cuda), cuda.text, inputs, cache_dir=cuda_cache_dir)
    exact = not any(op.name in TRANSCENDENTAL for op in module.walk())
    for spec, want in zip(schedule.outputs, expected):
        if exact:
            np.testing.assert_array_equal(got[spec], want)
        else:  # glibc's and numpy's exp/log/tanh/erf differ in the last bit, and cancellation can amplify that
            scale = float(np.max(np.abs(want), initial=0, where=np.isfinite(want)))
            np.testing.assert_allclose(got[spec], want, rtol=1e-5, atol=1e-5 * scale + 1e-6)
