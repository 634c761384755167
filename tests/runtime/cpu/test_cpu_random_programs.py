"""Random tensor programs (tests/program_gen.py) through fusion and lowering
to the CPU: the compiled module gives the loop interpreter's numbers for the
same module within the tolerance policy, and the reference's numbers up to
summation order. Skipped until the lowering and the generator are present."""

from __future__ import annotations

import numpy as np
import pytest

from cpu_tolerance import KERNEL_RTOL
from fusecc.compiler.pass_manager import PassContext, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.compiler.parser import parse_module
from fusecc.runtime.cpu import compile_program
from fusecc.driver.cpu_target import CpuTarget, loop_pipeline
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import InterpreterError, evaluate

program_gen = pytest.importorskip("program_gen")
UNAVAILABLE = CpuTarget().available()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))


def close(got, want, rtol):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    scale = float(np.max(np.abs(want[finite]))) if finite.any() else 0.0
    np.testing.assert_allclose(got[finite].astype(np.float64), want[finite].astype(np.float64), rtol=0, atol=rtol * max(scale, 1e-30))


@pytest.mark.parametrize("seed", range(12))
def test_random_program_on_the_cpu(seed):
    program = program_gen.random_program(seed, num_ops=25)
    inputs = program.inputs(seed)
    try:
        reference = evaluate(program.module, program.entry, inputs)
    except InterpreterError as exc:
        pytest.skip(f"the reference rejects these inputs: {exc}")
    module = parse_module(print_op(program.module))
    run_pipeline(loop_pipeline(), module, PassContext(target="cpu"))
    got = compile_program(module).run(inputs, program.entry)
    interpreted = run_schedule(module, program.entry, inputs)
    for g, i, r in zip(got, interpreted, reference):
        close(g, i, KERNEL_RTOL)
        close(g, r, 1e-3)
