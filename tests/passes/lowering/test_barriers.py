"""place-barriers (passes/lowering/barriers.py): the kernels of its golden
tests (tests/filecheck/passes/place_barriers/) compute what numpy says on
the loop interpreter only once the pass has run, since the interpreter runs
a thread loop's threads in step from barrier to barrier, as a GPU may."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusecc.compiler import parse_module, verify
from fusecc.compiler.diagnostics import InternalCompilerError
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.dialects import loop
from fusecc.driver.pipelines import pipeline_for_level
from fusecc.passes.lowering.barriers import place_barriers
from fusecc.runtime.loop_interpreter import LoopInterpreter

GOLDENS = pathlib.Path(__file__).parents[2] / "filecheck" / "passes" / "place_barriers"
EXAMPLES = pathlib.Path(__file__).parents[3] / "examples"


def kernel_of(name: str, with_barriers: bool, chunk: int = 0) -> loop.KernelOp:
    module = parse_module((GOLDENS / name).read_text().split("// -----")[chunk], name)
    verify(module)
    if with_barriers:
        run_pipeline(parse_pipeline("place-barriers"), module, PassContext(target="h200"))
    (kernel,) = [op for op in module.walk() if isinstance(op, loop.KernelOp)]
    return kernel


def run(kernel: loop.KernelOp, *arrays: np.ndarray) -> list[np.ndarray]:
    buffers = [np.array(a, dtype=np.float32) for a in arrays]
    LoopInterpreter(kernel.parent_op).run_kernel(kernel, buffers)
    return buffers


def matmul_tile_expected(a, b):
    return [a @ b]


def reduction_expected(x):
    # lane 0 of warp w stores lane 3's value (two shuffles), then lane 1's square
    sums = x[3] + x[35]
    squares = x[1] ** 2 + x[33] ** 2
    return [np.full(64, sums + squares, np.float32)]


def attention_expected(q, k, v):
    o = np.zeros(4, np.float32)
    for k0 in (0, 4):
        p = np.exp(np.array([q @ k[k0 : k0 + 4]] * 4, np.float32))
        o = o * p + p @ v[k0 : k0 + 4]
    return [o]


CASES = {
    "matmul_tile.ir": (lambda rng: [rng.standard_normal((4, 8)), rng.standard_normal((8, 4)), np.zeros((4, 4))], matmul_tile_expected, 2),
    "reduction.ir": (lambda rng: [rng.standard_normal(64), np.zeros(64)], reduction_expected, 1),
    "attention.ir": (lambda rng: [rng.standard_normal(4) / 4, rng.standard_normal(8) / 4, rng.standard_normal(8), np.zeros(4)], attention_expected, 3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_golden_kernels_compute_numpy_only_with_their_barriers(name):
    make_inputs, expected_of, n_inputs = CASES[name]
    inputs = [np.asarray(a, np.float32) for a in make_inputs(np.random.default_rng(1))]
    want = expected_of(*inputs[:n_inputs])
    got = run(kernel_of(name, True), *inputs)[n_inputs:]
    for have, expected in zip(got, want, strict=True):
        np.testing.assert_allclose(have, expected, rtol=1e-5, atol=1e-6)
    racy = run(kernel_of(name, False), *inputs)[n_inputs:]
    assert any(not np.allclose(have, expected, rtol=1e-5, atol=1e-6) for have, expected in zip(racy, want, strict=True))


HAZARD_UNDER_IF = """
loop.kernel @divergent {
^bb0(%out: memref<32xf32>):
  loop.parallel {upper = [1], mapping = ["block.x"]} {
  ^bb0(%blk: index):
    %s = loop.alloc : () -> memref<32xf32, shared>
    loop.parallel {upper = [32], mapping = ["thread.x"]} {
    ^bb0(%t: index):
      %c16 = arith.constant {value = 16 : index} : () -> index
      %c0 = arith.constant {value = 0 : index} : () -> index
      %low = arith.cmp %t, %c16 {predicate = "lt"} : (index, index) -> i1
      loop.if %low {
        %one = arith.constant {value = 1.0 : f32} : () -> f32
        loop.store %one, %s, %t : f32, memref<32xf32, shared>, index
        %v = loop.load %s, %c0 : (memref<32xf32, shared>, index) -> f32
        loop.store %v, %out, %t : f32, memref<32xf32>, index
        loop.yield
      } {
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  loop.return
}
"""


def test_a_hazard_under_thread_dependent_control_flow_is_an_internal_error():
    module = parse_module(HAZARD_UNDER_IF, "divergent.ir")
    verify(module)
    with pytest.raises(InternalCompilerError, match="place-barriers.*thread-dependent control flow"):
        run_pipeline(parse_pipeline("place-barriers"), module, PassContext(target="h200"))


@pytest.mark.parametrize("example", ["layernorm4", "mlp", "attention"])
def test_lowered_kernels_already_have_their_barriers(example):
    """lower-to-loops places barriers as it builds each GPU kernel; the pass
    after memory planning then finds nothing more to do here."""
    module = parse_module((EXAMPLES / f"{example}.ir").read_text(), f"{example}.ir")
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="h200")), module, PassContext(target="h200"))
    kernels = [op for op in module.walk() if isinstance(op, loop.KernelOp)]
    assert any(isinstance(op, loop.BarrierOp) for k in kernels for op in k.walk())
    assert place_barriers(module) == 0


def test_a_block_level_barrier_is_a_no_op_on_the_interpreter():
    kernel = kernel_of("between_thread_loops.ir", True, chunk=0)  # a reversal through shared memory
    x = np.arange(32, dtype=np.float32)
    _, out = run(kernel, x, np.zeros(32))
    np.testing.assert_array_equal(out, x[::-1])
