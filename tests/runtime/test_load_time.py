"""Constant weights reaching a CPU matmul are packed once, when the program
is loaded, never per call (runtime/cpu/load_time.py).

Counts kernel runs through a counting worker pool (no timing; calls are
profiled, which sends every launch through the pool, where an unprofiled
call on one thread is one native call, runtime/cpu/call_path.py), and checks
the results against the reference and against the same program with the
weights as arguments (packed per call)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import safetensors.numpy

pytest.importorskip("llvmlite")

from fusecc.compiler import attributes as A  # noqa: E402
from fusecc.compiler.parser import parse_module  # noqa: E402
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline  # noqa: E402
from fusecc.compiler.types import TensorType, f32  # noqa: E402
from fusecc.dialects import loop  # noqa: E402
from fusecc.driver.pipelines import pipeline_for_level  # noqa: E402
from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool  # noqa: E402
from fusecc.runtime.cpu.load_time import argument_uses, load_time_launches  # noqa: E402
from fusecc.runtime.reference import evaluate  # noqa: E402

RNG = np.random.default_rng(11)
WEIGHT = RNG.standard_normal((1024, 64)).astype(np.float32)
BIAS = RNG.standard_normal(64).astype(np.float32)

BODY = """\
    %y = tensor.matmul %x, %w : (tensor<32x1024xf32>, tensor<1024x64xf32>) -> tensor<32x64xf32>
    %z = tensor.add %y, %b : (tensor<32x64xf32>, tensor<64xf32>) -> tensor<32x64xf32>
    func.return %z : tensor<32x64xf32>
"""
AS_RESOURCES = (
    'module attributes {fusecc.resources = "w.safetensors"} {\n'
    "  func.func @main(%x: tensor<32x1024xf32>) -> tensor<32x64xf32> {\n"
    "    %w = tensor.constant {value = dense_resource<w> : tensor<1024x64xf32>} : () -> tensor<1024x64xf32>\n"
    "    %b = tensor.constant {value = dense_resource<b> : tensor<64xf32>} : () -> tensor<64xf32>\n" + BODY + "  }\n}\n"
)
AS_ARGUMENTS = "module {\n  func.func @main(%x: tensor<32x1024xf32>, %w: tensor<1024x64xf32>, %b: tensor<64xf32>) -> tensor<32x64xf32> {\n" + BODY + "  }\n}\n"


class CountingPool(WorkerPool):
    """Runs launches on the calling thread and counts them by function."""

    def __init__(self):
        super().__init__(1)
        self.runs: Counter = Counter()

    def run_pieces(self, function, args, pieces):
        self.runs[id(function)] += 1
        super().run_pieces(function, args, pieces)


def compiled(module):
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    pool = CountingPool()
    program = CompiledProgram(module, pool=pool)
    return program, pool


def runs_by_kernel(program, pool) -> dict[str, int]:
    return {name: pool.runs[id(kernel.function)] for name, kernel in program.kernels.items()}


@pytest.fixture
def resource_module(tmp_path):
    safetensors.numpy.save_file({"w": WEIGHT, "b": BIAS}, str(tmp_path / "w.safetensors"))
    path = tmp_path / "m.ir"
    path.write_text(AS_RESOURCES)
    return parse_module(AS_RESOURCES, str(path))


def dense_module():
    """The weights as dense constants in the text."""
    text = AS_RESOURCES.replace('module attributes {fusecc.resources = "w.safetensors"} {', "module {")
    for name, array in (("w", WEIGHT), ("b", BIAS)):
        text = text.replace(f"dense_resource<{name}>", f"dense<{A.dense(array, TensorType(array.shape, f32)).format_body()}>")
    return parse_module(text)


@pytest.mark.parametrize("weights", ["resource", "dense"])
def test_constant_weights_are_packed_once_across_calls(resource_module, weights):
    module = resource_module if weights == "resource" else dense_module()
    reference = parse_module(AS_ARGUMENTS)
    program, pool = compiled(module)
    assert "fused_0_matmul_pack_b" in program.kernels  # the lowering packs this B
    program.prepare("main")
    assert runs_by_kernel(program, pool)["fused_0_matmul_pack_b"] == 1  # at load, before any call
    for _ in range(3):
        x = RNG.standard_normal((32, 1024)).astype(np.float32)
        (got,) = program.run([x], "main", profile=[])  # profiled: each step through the pool, which counts it
        np.testing.assert_allclose(got, evaluate(reference, "main", [x, WEIGHT, BIAS])[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(program.run([x], "main")[0], got)  # the same steps as one native call (call_path.py)
    runs = runs_by_kernel(program, pool)
    assert runs["fused_0_matmul_pack_b"] == 1
    assert runs["fused_0_matmul"] == 3 and "fused_0_matmul_pack_a" not in runs  # A is an input, read in place


def test_weights_as_arguments_are_still_packed_per_call_with_the_same_results(resource_module):
    constant, _ = compiled(resource_module)
    program, pool = compiled(parse_module(AS_ARGUMENTS))
    x = RNG.standard_normal((32, 1024)).astype(np.float32)
    for _ in range(2):
        (got,) = program.run([x, WEIGHT, BIAS], "main", profile=[])
    assert runs_by_kernel(program, pool)["fused_0_matmul_pack_b"] == 2
    (packed_at_load,) = constant.run([x], "main")
    np.testing.assert_array_equal(packed_at_load, got)  # the same kernels on the same panels: bit for bit


def test_only_launches_that_read_nothing_but_constants_qualify(resource_module):
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), resource_module, PassContext(target="cpu"))
    schedule = next(op for op in resource_module.body if isinstance(op, loop.ScheduleOp))
    found = load_time_launches(schedule)
    assert [op.kernel_name for op in found] == ["fused_0_matmul_pack_b"]
    (launch,) = found
    read, written = argument_uses(launch.resolve())
    assert [launch.operands[i].defining_op.name for i in read] == ["loop.constant"]
    assert [launch.operands[i] for i in written] == found[launch]
