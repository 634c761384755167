"""The executor's bound steps (runtime/cpu/executor.SchedulePlan._bind_steps:
fixed addresses and launch pieces worked out once, issue 11.2) give the
reference's results call after call, with new input and output arrays each
call, on one thread and split over two, profiled or not; and the
call-overhead and model benchmarks run (their figures are never asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import fusecc

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import call_overhead  # noqa: E402

MATMUL_CHAIN = """
func.func @main(%x: tensor<67x40xf32>, %w: tensor<40x33xf32>, %b: tensor<33xf32>) -> (tensor<67x33xf32>, tensor<67x33xf32>) {
  %m = tensor.matmul %x, %w : (tensor<67x40xf32>, tensor<40x33xf32>) -> tensor<67x33xf32>
  %bb = tensor.broadcast_to %b : (tensor<33xf32>) -> tensor<67x33xf32>
  %y = tensor.add %m, %bb : (tensor<67x33xf32>, tensor<67x33xf32>) -> tensor<67x33xf32>
  %r = tensor.relu %y {fusion.forbid = true} : (tensor<67x33xf32>) -> tensor<67x33xf32>
  %n = tensor.neg %r {fusion.forbid = true} : (tensor<67x33xf32>) -> tensor<67x33xf32>
  func.return %n, %y : tensor<67x33xf32>, tensor<67x33xf32>
}
"""


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("text", [MATMUL_CHAIN, call_overhead.program_text(30)], ids=["matmul-chain", "30-kernels"])
def test_bound_steps_match_the_reference_on_every_call(tmp_path, text, threads):
    path = tmp_path / "p.ir"
    path.write_text(text)
    cpu = fusecc.compile(str(path), target="cpu", options={"threads": threads})
    reference = fusecc.compile(str(path), target="reference")
    rng = np.random.default_rng(threads)
    plan = cpu._compiled.prepare(cpu.entry)
    for call in range(3):
        inputs = {n: rng.standard_normal(t.shape).astype(np.float32) for n, t in cpu.inputs.items()}
        got, expected = cpu(**inputs), reference(**inputs)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5, err_msg=f"call {call}: {name}")
        profile: list = []
        profiled = cpu._compiled.run([inputs[n] for n in cpu.inputs], cpu.entry, profile=profile)
        assert len(profile) == len(plan.steps)
        for value, name in zip(profiled, expected):
            np.testing.assert_array_equal(value, got[name])


def test_call_overhead_benchmark_runs():
    result = call_overhead.measure(kernels=4, threads=1, calls=3, rounds=1)
    assert result["kernels"] == result["launch steps"] == 4
