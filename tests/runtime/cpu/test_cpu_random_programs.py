"""Random tensor programs (tests/program_gen.py) through fusion and lowering
to the CPU: the compiled module gives the loop interpreter's numbers for the
same module within the kernel tolerance (4e-6 of the scale), and the
reference's numbers within the whole-program tolerance (1e-4 of the scale),
as docs/cpu-target.md promises."""

from __future__ import annotations

import numpy as np
import pytest

import program_gen
from cpu_tolerance import KERNEL_RTOL
from fusecc.compiler.pass_manager import PassContext, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.compiler.parser import parse_module
from fusecc.driver.cpu_target import loop_pipeline
from fusecc.driver.measured_call import PROGRAM_RTOL
from fusecc.runtime.cpu import compile_program
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import InterpreterError, evaluate

# Input draws per program: the reference may reject one (an integer division
# by zero); the next draw is compared instead.
INPUT_DRAWS = 3


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
    module = parse_module(print_op(program.module))
    run_pipeline(loop_pipeline(), module, PassContext(target="cpu"))
    compiled = compile_program(module)
    compared, rejected = 0, []
    for draw in range(INPUT_DRAWS):
        inputs = program.inputs(seed + 1000 * draw)
        try:
            reference = evaluate(program.module, program.entry, inputs)
        except InterpreterError as exc:
            rejected.append(f"draw {draw}: {exc}")
            continue
        got = compiled.run(inputs, program.entry)
        interpreted = run_schedule(module, program.entry, inputs)
        for g, i, r in zip(got, interpreted, reference, strict=True):
            close(g, i, KERNEL_RTOL)
            close(g, r, PROGRAM_RTOL)
        compared += 1
    print("\n".join(["the reference rejected:", *rejected]) if rejected else f"{compared} input draws compared")
    assert compared, "the reference rejected every input draw:\n" + "\n".join(rejected)
