"""The CUDA C emitter: what it writes compiles with NVRTC for sm_80 and
sm_90, and computes on the CPU harness what the loop interpreter computes.

The programs are the golden tests' hand-written GPU loop IR
(tests/filecheck/passes/emit_cuda/*.ir) and the loop dialect's softmax.
Sources, NVRTC results and CPU-harness libraries are built once per session.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fusecc.compiler import parse_module, verify
from fusecc.compiler.types import TensorType, f32, f64
from fusecc.driver.cuda_level import build_manifest, entry_schedule
from fusecc.passes.backends.cuda.emit import EmitError, c_identifier, emit_cuda, float_literal
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import random_input

FILECHECK = pathlib.Path(__file__).parents[1] / "filecheck"
PROGRAMS = {p.stem: p for p in sorted((FILECHECK / "passes" / "emit_cuda").glob("*.ir"))}
PROGRAMS["softmax_gpu"] = FILECHECK / "dialects" / "loop" / "softmax_gpu.ir"
# Programs with transcendental functions: glibc's and numpy's differ in the last bit.
ROUNDED = {"elementwise_guards", "softmax_gpu"}


def load(text: str, name: str = "test.ir"):
    module = parse_module(text, name)
    verify(module)
    return module


@pytest.fixture(scope="session")
def emitted():
    """name -> (module, CudaSource), emitted once (emit_cuda legalizes the
    module and places its barriers)."""
    out = {}
    for name, path in PROGRAMS.items():
        module = load(path.read_text(), path.name)
        out[name] = (module, emit_cuda(module, path.name))
    return out




# --------------------------------------------------------------------------- NVRTC


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_emitted_source_compiles_with_nvrtc(emitted, name, arch):
    import fusecc.runtime.cuda.nvrtc as nvrtc
    import fusecc.runtime.cuda.resources as resources
    _, cuda = emitted[name]
    result = nvrtc.compile_cuda(cuda.text, f"{name}.cu", arch=arch, output="cubin", options=nvrtc.NvrtcOptions(ptxas_verbose=True))
    usage = resources.parse_ptxas_report(result.log)
    assert set(usage) == {k.name for k in cuda.kernels}
    for kernel in cuda.kernels:
        assert not usage[kernel.name].spills, f"{kernel.name} spills registers"
        assert usage[kernel.name].shared_bytes == kernel.static_shared_bytes


# --------------------------------------------------------------------------- CPU harness vs the loop interpreter


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_emitted_kernels_match_the_loop_interpreter_on_the_cpu_harness(emitted, name, cuda_cache_dir):
    import fusecc.runtime.cuda.execute as execute
    module, cuda = emitted[name]
    schedule = entry_schedule(module)
    rng = np.random.default_rng(7)
    inputs = [random_input(TensorType(a.type.shape, a.type.element_type), rng) for a in schedule.input_args]
    as_written = load(PROGRAMS[name].read_text(), PROGRAMS[name].name)  # the interpreter defines it before legalize
    expected = run_schedule(as_written, schedule.sym_name, inputs)
    got = execute.run_on_cpu(build_manifest(module, cuda, f"{name}.cu"), cuda.text, inputs, cache_dir=cuda_cache_dir)
    for spec, want in zip(schedule.outputs, expected, strict=True):
        have = got[spec]
        assert have.shape == want.shape and have.dtype == want.dtype
        if name in ROUNDED:
            np.testing.assert_allclose(have, want, rtol=1e-6, atol=1e-6 * float(np.max(np.abs(want))))
        else:  # no contraction on the harness: the same operations in the same order
            np.testing.assert_array_equal(have, want)


# --------------------------------------------------------------------------- what the source says


def test_parameters_are_const_unless_written_and_restrict_unless_aliased():
    text = PROGRAMS["elementwise_guards"].read_text()
    # Launch the kernel with its output also passed as the bias: they overlap.
    aliased = text.replace(
        "loop.launch @fused_0_elementwise(%x, %bias, %result0)",
        "%bias_view = loop.view %result0 {offset = 0} : (memref<10x100xf32>) -> memref<100xf32>\n"
        "  loop.launch @fused_0_elementwise(%x, %bias_view, %result0)",
    )
    signature = lambda cuda: next(line for line in cuda.text.splitlines() if line.startswith('extern "C"'))  # noqa: E731
    plain = signature(emit_cuda(load(text)))
    assert "(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y)" in plain
    overlapping = signature(emit_cuda(load(aliased)))
    assert "(const float* __restrict__ x, const float* bias, float* y)" in overlapping


def test_kernel_comment_names_group_kind_and_source_locations(emitted):
    _, cuda = emitted["elementwise_guards"]
    assert "// fused_0_elementwise: fusion group 0 (elementwise)\n// source: model.ir:4:8, model.ir:5:8\n" in cuda.text


def test_line_ranges_cover_each_kernel(emitted):
    _, cuda = emitted["block_structure"]
    lines = cuda.text.splitlines()
    for kernel in cuda.kernels:
        first, last = kernel.lines
        body = "\n".join(lines[first - 1 : last])
        assert f" {kernel.name}(" in body and body.rstrip().endswith("}")
        assert cuda.kernel_at_line(first) is kernel and cuda.kernel_at_line(last) is kernel
    assert cuda.kernel_at_line(1) is None


def test_index_arithmetic_is_64_bit_only_for_huge_buffers():
    small = emit_cuda(load(PROGRAMS["elementwise_guards"].read_text())).text
    assert "const int flat" in small and "long long" not in small
    huge = PROGRAMS["elementwise_guards"].read_text().replace("memref<10x100xf32>", "memref<10x300000000xf32>")
    assert "const long long flat" in emit_cuda(load(huge)).text


def test_cpu_mapped_kernels_are_refused():
    module = load(
        """
loop.kernel @cpu {
^bb0(%a: memref<4xf32>):
  loop.parallel {upper = [4], mapping = ["worker"]} {
  ^bb0(%i: index):
    loop.yield
  }
  loop.return
}
"""
    )
    with pytest.raises(EmitError, match="mapped for the CPU"):
        emit_cuda(module)


def test_shuffles_need_whole_warps():
    text = PROGRAMS["softmax_gpu"].read_text().replace("upper = [64]", "upper = [48]").replace("%c64 = arith.constant {value = 64", "%c64 = arith.constant {value = 48")
    with pytest.raises(EmitError, match="48 threads"):
        emit_cuda(load(text))


def test_names_avoid_c_keywords_and_helpers():
    assert c_identifier("int") == "int_"
    assert c_identifier("expf") == "expf_"
    assert c_identifier("0") is None
    assert c_identifier("x.1") == "x_1"
    assert c_identifier("__tmp") == "tmp"
    assert c_identifier("fusecc_x") == "fusecc_x_"
    assert c_identifier("3d") == "v3d"


def test_swapped_loop_carried_values_go_through_temporaries():
    module = load(
        """
loop.kernel @swap {
^bb0(%out: memref<2xf32>):
  loop.parallel {upper = [1], mapping = ["block.x"]} {
  ^bb0(%b: index):
    loop.parallel {upper = [32], mapping = ["thread.x"]} {
    ^bb0(%t: index):
      %c0 = arith.constant {value = 0 : index} : () -> index
      %c1 = arith.constant {value = 1 : index} : () -> index
      %c3 = arith.constant {value = 3 : index} : () -> index
      %one = arith.constant {value = 1.0} : () -> f32
      %two = arith.constant {value = 2.0} : () -> f32
      %r:2 = loop.for %c0, %c3, %c1, %one, %two : (index, index, index, f32, f32) -> (f32, f32) {
      ^bb0(%i: index, %a: f32, %b2: f32):
        loop.yield %b2, %a : f32, f32
      }
      %first = arith.cmp %t, %c0 {predicate = "eq"} : (index, index) -> i1
      loop.store %r#0, %out, %c0, %first : f32, memref<2xf32>, index, i1
      loop.store %r#1, %out, %c1, %first : f32, memref<2xf32>, index, i1
      loop.yield
    }
    loop.yield
  }
  loop.return
}
"""
    )
    text = emit_cuda(module).text
    assert re.search(r"const auto (next\d+) = (\w+);\n\s+const auto (next\d+) = (\w+);\n\s+\4 = \1;\n\s+\2 = \3;", text), text


# --------------------------------------------------------------------------- literals


@given(st.integers(0, 2**32 - 1))
def test_f32_literals_are_exact(bits):
    value = np.array(bits, dtype=np.uint32).view(np.float32)
    text = float_literal(float(value), f32)
    if np.isinf(value):
        assert text == ("FUSECC_POS_INF" if value > 0 else "FUSECC_NEG_INF")
        return
    if np.isnan(value):
        assert text == f"__int_as_float(0x{bits:08x})"
        return
    spelled = np.float32(float(text.strip("()").removesuffix("f")))
    assert spelled.view(np.uint32) == value.view(np.uint32), text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_f64_literals_are_exact(value):
    text = float_literal(value, f64)
    assert float(text.strip("()")) == value and ("." in text or "e" in text)
