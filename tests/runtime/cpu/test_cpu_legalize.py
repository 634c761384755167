"""The CPU backend against the loop interpreter on each rule of
docs/legalize.md (division by 0 and -1, float -> int of NaN/inf, i1
arithmetic, select over NaN, bf16/f16 chains), bit for bit; bug 16.B (narrow
results rounded inside fused kernels) and 16.D (an LLVM assertion must not
kill the process) through the whole CPU target."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "passes" / "backends"))
from legalize_cases import CASES  # noqa: E402

from fusecc.compiler import parse_module, verify  # noqa: E402
from fusecc.compiler.pass_manager import PassContext, run_pipeline  # noqa: E402
from fusecc.driver.cpu_target import loop_pipeline  # noqa: E402
from fusecc.runtime.cpu import compile_program, jit  # noqa: E402
from fusecc.runtime.loop_interpreter import run_schedule  # noqa: E402
from fusecc.runtime.reference import evaluate  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


def bits(array):
    array = np.asarray(array)
    return array if array.dtype == np.bool_ else array.view(np.uint8)


@pytest.mark.parametrize("vectorize", ["explicit", "llvm"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cpu_gives_the_interpreters_bits_on_each_rule(case, vectorize):
    inputs = case.inputs()
    (want,) = run_schedule(case.program(), "main", inputs)
    (got,) = compile_program(case.program(), vectorize).run(inputs)
    np.testing.assert_array_equal(bits(got), bits(want))


def run_on_cpu(text: str, inputs):
    module = parse_module(text)
    verify(module)
    reference = evaluate(module, "main", inputs)
    run_pipeline(loop_pipeline(), module, PassContext(target="cpu"))
    return compile_program(module).run(inputs), reference


def test_bf16_sum_is_rounded_before_the_difference():
    """16.B: all-bf16 (x + 2^-9) - x is 0 on [1, 2), as the reference rounds x + 2^-9."""
    text = """
func.func @main(%x: tensor<64xbf16>) -> tensor<64xbf16> {
  %c = tensor.constant {value = dense<0.001953125> : tensor<64xbf16>} : () -> tensor<64xbf16>
  %0 = tensor.add %x, %c : (tensor<64xbf16>, tensor<64xbf16>) -> tensor<64xbf16>
  %1 = tensor.sub %0, %x : (tensor<64xbf16>, tensor<64xbf16>) -> tensor<64xbf16>
  func.return %1 : tensor<64xbf16>
}"""
    x = np.linspace(1, 2, 64, endpoint=False).astype(np.float32)
    (got,), (want,) = run_on_cpu(text, [x])
    np.testing.assert_array_equal(want, np.zeros(64, np.float32))
    np.testing.assert_array_equal(got, want)


def test_bf16_exp_is_rounded_before_the_cast_to_f32():
    """16.B: cast(exp(x_bf16)) to f32 is bf16's 3.0625 for x = 1.1171875, not f32's 3.0563."""
    text = """
func.func @main(%x: tensor<4xbf16>) -> tensor<4xf32> {
  %0 = tensor.exp %x : (tensor<4xbf16>) -> tensor<4xbf16>
  %1 = tensor.cast %0 : (tensor<4xbf16>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}"""
    (got,), (want,) = run_on_cpu(text, [np.array([1.1171875, 1.0, 0.5, 2.0], np.float32)])
    np.testing.assert_array_equal(want, [3.0625, 2.71875, 1.6484375, 7.375])
    np.testing.assert_array_equal(got, want)


GELU_SOFTMAX = """
func.func @main(%x: tensor<2x7xbf16>) -> tensor<2x7xbf16> {
  %0 = tensor.gelu %x : (tensor<2x7xbf16>) -> tensor<2x7xbf16>
  %1 = tensor.softmax %0 {axis = -1} : (tensor<2x7xbf16>) -> tensor<2x7xbf16>
  func.return %1 : tensor<2x7xbf16>
}"""


def test_bf16_gelu_softmax_runs_and_matches_the_reference():
    """16.D's program (it made LLVM's loop vectoriser assert): it compiles, and
    every bf16 result is within one bf16 rounding of the reference."""
    x = np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32)
    (got,), (want,) = run_on_cpu(GELU_SOFTMAX, [x])
    np.testing.assert_allclose(got, want, rtol=2**-7, atol=0)


# The loop IR the CPU backend emitted for GELU_SOFTMAX before narrow results
# were rounded inside fused kernels: LLVM 20's loop vectoriser asserts on it
# ("VPlan cost model and legacy cost model disagreed") and aborts.
VPLAN_ABORT = HERE / "inputs" / "vplan_abort.ll"


def test_an_llvm_assertion_is_an_error_not_an_abort():
    """Compiled in a child process: the assertion kills the child and comes
    back as LLVMCrash with LLVM's message; this process lives on."""
    with pytest.raises(jit.LLVMCrash, match="VPlan cost model"):
        jit.object_code(VPLAN_ABORT.read_text())


def test_any_crash_of_llvm_is_an_error(monkeypatch):
    """Whatever kills LLVM's process (here an abort wherever LLVM runs)."""
    monkeypatch.setattr(jit, "optimise", lambda text: os.abort())
    with pytest.raises(jit.LLVMCrash, match="SIGABRT"):
        jit.object_code("define void @f() {\n  ret void\n}\n")


def test_the_cli_reports_an_llvm_crash_as_an_internal_error(tmp_path):
    """`fusecc run` exits 2 with an internal-error message, never by a signal."""
    program = tmp_path / "crash.ir"
    program.write_text(GELU_SOFTMAX)
    script = (
        "import os, sys; from fusecc.runtime.cpu import jit; "
        "jit.optimise = lambda text: os.abort(); "
        "from fusecc.tools.fusecc import main; sys.exit(main(sys.argv[1:]))"
    )
    env = dict(os.environ, FUSECC_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", script, "run", str(program), "--target", "cpu", "--random-inputs"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "internal compiler error" in done.stderr and "LLVM crashed (SIGABRT)" in done.stderr
