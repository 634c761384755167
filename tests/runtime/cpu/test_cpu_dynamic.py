"""Dynamic shapes below the tensor level (docs/dynamic-shapes.md): hand-written
loop IR with `?` buffers, run by the loop interpreter and by the CPU backend,
each checked against numpy at several sizes, 1 and primes included."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler import parse_module, verify
from fusecc.runtime.cpu import CompiledProgram
from fusecc.runtime.cpu.dynamic import BOUND_SHAPES
from fusecc.runtime.cpu.executor import aligned_empty
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import InterpreterError

# x + bias twice, through an arena buffer; rows and columns both `?`.
ADD_BIAS = """
loop.kernel @add_bias {
^bb0(%x: memref<?x?xf32>, %bias: memref<?xf32>, %out: memref<?x?xf32>):
  %rows = loop.dim %x {axis = 0} : (memref<?x?xf32>) -> index
  %cols = loop.dim %x {axis = 1} : (memref<?x?xf32>) -> index
  loop.parallel %rows {upper = [-1], mapping = ["worker"]} : index {
  ^bb0(%row: index):
    loop.parallel %cols {upper = [-1], mapping = ["vector"]} : index {
    ^bb0(%col: index):
      %v = loop.load %x, %row, %col : (memref<?x?xf32>, index, index) -> f32
      %b = loop.load %bias, %col : (memref<?xf32>, index) -> f32
      %s = arith.add %v, %b : (f32, f32) -> f32
      loop.store %s, %out, %row, %col : f32, memref<?x?xf32>, index, index
      loop.yield
    }
    loop.yield
  }
  loop.return
}
loop.schedule @main {inputs = ["x", "bias"], outputs = ["out"], arg_sizes = [["R", "C"], ["C"], ["R", "C"]], arena_size = "R*C*4 + 64"} {
^bb0(%x: memref<?x?xf32>, %bias: memref<?xf32>, %out: memref<?x?xf32>):
  %t = loop.arena_view {offset = 64, sizes = ["R", "C"]} : () -> memref<?x?xf32>
  loop.launch @add_bias(%x, %bias, %t) : memref<?x?xf32>, memref<?xf32>, memref<?x?xf32>
  loop.launch @add_bias(%t, %bias, %out) : memref<?x?xf32>, memref<?xf32>, memref<?x?xf32>
  loop.return
}
"""

# Softmax over the last axis of a [B, 5, S] tensor: the `?` axes are the
# first and the last, so the stride of the middle axis is a runtime S. The
# rows are flattened through a view of sizes ["B*5", "S"] (a reshape), and
# the worker extent is the view's first size, B*5.
SOFTMAX = """
loop.kernel @softmax_rows {
^bb0(%x: memref<?x?xf32>, %out: memref<?x?xf32>):
  %rows = loop.dim %x {axis = 0} : (memref<?x?xf32>) -> index
  %cols = loop.dim %x {axis = 1} : (memref<?x?xf32>) -> index
  %c0 = arith.constant {value = 0 : index} : () -> index
  %c1 = arith.constant {value = 1 : index} : () -> index
  loop.parallel %rows {upper = [-1], mapping = ["worker"]} : index {
  ^bb0(%r: index):
    %low = arith.constant {value = -3.0e38} : () -> f32
    %m = loop.for %c0, %cols, %c1, %low : (index, index, index, f32) -> f32 {
    ^bb0(%j: index, %acc: f32):
      %v = loop.load %x, %r, %j : (memref<?x?xf32>, index, index) -> f32
      %n = arith.max %acc, %v : (f32, f32) -> f32
      loop.yield %n : f32
    }
    %zero = arith.constant {value = 0.0} : () -> f32
    %s = loop.for %c0, %cols, %c1, %zero : (index, index, index, f32) -> f32 {
    ^bb0(%j: index, %acc: f32):
      %v = loop.load %x, %r, %j : (memref<?x?xf32>, index, index) -> f32
      %d = arith.sub %v, %m : (f32, f32) -> f32
      %e = math.exp %d : (f32) -> f32
      %n = arith.add %acc, %e : (f32, f32) -> f32
      loop.yield %n : f32
    }
    loop.parallel %cols {upper = [-1], mapping = ["vector"]} : index {
    ^bb0(%j: index):
      %v = loop.load %x, %r, %j : (memref<?x?xf32>, index, index) -> f32
      %d = arith.sub %v, %m : (f32, f32) -> f32
      %e = math.exp %d : (f32) -> f32
      %q = arith.div %e, %s : (f32, f32) -> f32
      loop.store %q, %out, %r, %j : f32, memref<?x?xf32>, index, index
      loop.yield
    }
    loop.yield
  }
  loop.return
}
loop.kernel @double_middle {
^bb0(%x: memref<?x5x?xf32>, %out: memref<?x5x?xf32>):
  %b = loop.dim %x {axis = 0} : (memref<?x5x?xf32>) -> index
  %s = loop.dim %x {axis = 2} : (memref<?x5x?xf32>) -> index
  %c5 = arith.constant {value = 5 : index} : () -> index
  %rows = arith.mul %b, %c5 : (index, index) -> index
  loop.parallel %rows {upper = [-1], mapping = ["worker"]} : index {
  ^bb0(%bj: index):
    %i = arith.div %bj, %c5 : (index, index) -> index
    %j = arith.rem %bj, %c5 : (index, index) -> index
    loop.parallel %s {upper = [-1], mapping = ["vector"]} : index {
    ^bb0(%k: index):
      %v = loop.load %x, %i, %j, %k : (memref<?x5x?xf32>, index, index, index) -> f32
      %w = arith.add %v, %v : (f32, f32) -> f32
      loop.store %w, %out, %i, %j, %k : f32, memref<?x5x?xf32>, index, index, index
      loop.yield
    }
    loop.yield
  }
  loop.return
}
loop.schedule @main {inputs = ["x"], outputs = ["y"], arg_sizes = [["B", "S"], ["B", "S"]], arena_size = "(B*5*S*4 + 63)//64*64"} {
^bb0(%x: memref<?x5x?xf32>, %y: memref<?x5x?xf32>):
  %t = loop.arena_view {offset = 0, sizes = ["B", "S"]} : () -> memref<?x5x?xf32>
  loop.launch @double_middle(%x, %t) : memref<?x5x?xf32>, memref<?x5x?xf32>
  %rows = loop.view %t {sizes = ["B*5", "S"]} : (memref<?x5x?xf32>) -> memref<?x?xf32>
  %out = loop.view %y {sizes = ["B*5", "S"]} : (memref<?x5x?xf32>) -> memref<?x?xf32>
  loop.launch @softmax_rows(%rows, %out) : memref<?x?xf32>, memref<?x?xf32>
  loop.return
}
"""

SIZES = [(1, 1), (1, 7), (2, 13), (3, 16), (5, 17), (7, 31), (11, 128)]


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def add_bias():
    module = parse_module(ADD_BIAS)
    verify(module)
    return module, CompiledProgram(module)


@pytest.fixture(scope="module")
def softmax_program():
    module = parse_module(SOFTMAX)
    verify(module)
    return module, CompiledProgram(module)


@pytest.mark.parametrize("rows,cols", SIZES)
def test_add_bias_matches_numpy_at_every_size_in_the_interpreter_and_on_the_cpu(add_bias, rows, cols, rng):
    module, program = add_bias
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    expected = x + bias + bias
    (interpreted,) = run_schedule(module, "main", [x, bias])
    (compiled,) = program.run([x, bias])
    assert compiled.shape == (rows, cols)
    np.testing.assert_allclose(interpreted, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(compiled, interpreted)


@pytest.mark.parametrize("batch,seq", SIZES)
def test_softmax_through_a_reshaping_view_matches_numpy(softmax_program, batch, seq, rng):
    module, program = softmax_program
    x = rng.standard_normal((batch, 5, seq)).astype(np.float32)
    expected = softmax(2 * x)
    (compiled,) = program.run([x])
    assert compiled.shape == (batch, 5, seq)
    np.testing.assert_allclose(compiled, expected, rtol=1e-5, atol=1e-6)
    if batch * seq <= 40:  # the interpreter is one Python step per scalar op
        (interpreted,) = run_schedule(module, "main", [x])
        np.testing.assert_allclose(interpreted, expected, rtol=1e-5, atol=1e-6)


def test_calls_at_a_seen_shape_reuse_its_prepared_launches(add_bias, rng):
    _, program = add_bias
    plan = program.prepare()
    x, bias = rng.standard_normal((4, 9)).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    plan._bound.clear()
    program.run([x, bias])
    first = plan._bound[(9, 4)]
    (again,) = program.run([x * 2, bias])
    assert plan._bound[(9, 4)] is first
    np.testing.assert_allclose(again, 2 * x + 2 * bias, rtol=1e-6)
    for n in range(1, BOUND_SHAPES + 5):
        program.run([np.ones((n, 3), np.float32), np.ones(3, np.float32)])
    assert len(plan._bound) == BOUND_SHAPES


def test_the_arena_grows_for_a_larger_call_and_smaller_calls_still_run(add_bias, rng):
    _, program = add_bias
    for rows, cols in [(2, 3), (64, 100), (3, 5)]:
        x, bias = rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
        (out,) = program.run([x, bias])
        np.testing.assert_allclose(out, x + 2 * bias, rtol=1e-6, atol=1e-6)
    assert program.prepare().arena.size >= 64 * 100 * 4 + 64


@pytest.mark.parametrize("run", ["cpu", "interpreter"])
def test_inputs_that_disagree_on_a_dim_are_a_located_runtime_error(add_bias, run):
    module, program = add_bias
    x, bias = np.zeros((3, 4), np.float32), np.zeros(5, np.float32)
    with pytest.raises(InterpreterError, match=r"@main: input bias axis 0 has size 5, but C = 4 \(from input x axis 1\)"):
        program.run([x, bias]) if run == "cpu" else run_schedule(module, "main", [x, bias])


def test_a_wrong_rank_or_static_size_is_a_runtime_error(softmax_program):
    _, program = softmax_program
    with pytest.raises(InterpreterError, match=r"input x has shape \[2, 4, 3\], expected \[\?, 5, \?\]"):
        program.run([np.zeros((2, 4, 3), np.float32)])
    with pytest.raises(InterpreterError, match="expected rank 3"):
        program.run([np.zeros((2, 5), np.float32)])


def test_a_kernel_with_dynamic_buffers_can_be_launched_directly(softmax_program, rng):
    _, program = softmax_program
    x = rng.standard_normal((3, 5, 11)).astype(np.float32)
    out = aligned_empty(x.nbytes).view(np.float32).reshape(x.shape)  # the schedule passes an arena buffer: 64-byte aligned
    program.launch("double_middle", [x, out])
    np.testing.assert_array_equal(out, 2 * x)
    assert program.kernels["double_middle"].abi.worker_extent.text == "(a0_0 * 5)"


def test_a_dim_of_size_zero_is_refused(add_bias):
    module, program = add_bias
    with pytest.raises(InterpreterError, match=r"input x axis 0 is 0, but a dynamic dim \('R'\) must be at least 1"):
        program.run([np.zeros((0, 3), np.float32), np.zeros(3, np.float32)])


def test_schedule_dim_checks_run_in_both_runtimes():
    module = parse_module(
        ADD_BIAS.replace(
            'arg_sizes = [["R", "C"], ["C"], ["R", "C"]]',
            'arg_sizes = [["R", "C"], ["C"], ["R", "C"]], dim_checks = [["R", "C", "model.ir:3:5", "\'tensor.add\' op rows must equal columns (R == C)"]]',
        )
    )
    verify(module)
    square = np.ones((4, 4), np.float32), np.ones(4, np.float32)
    (out,) = CompiledProgram(module).run(list(square))
    np.testing.assert_array_equal(out, 3 * np.ones((4, 4), np.float32))
    message = r"model.ir:3:5: 'tensor.add' op rows must equal columns \(R == C\), which fails at run time with C = 4, R = 2"
    for run in (lambda xs: CompiledProgram(module).run(xs), lambda xs: run_schedule(module, "main", xs)):
        with pytest.raises(InterpreterError, match=message):
            run([np.ones((2, 4), np.float32), np.ones(4, np.float32)])


def test_the_dynamic_vs_static_benchmark_writes_one_encoder_two_ways():
    import dynamic_vs_static  # benchmarks/, on the path through conftest.py

    dynamic = parse_module(dynamic_vs_static.encoder_text())
    static = parse_module(dynamic_vs_static.encoder_text(2, 5))
    verify(dynamic)
    verify(static)
    (d,), (s,) = dynamic.functions(), static.functions()
    assert [str(t) for t in d.function_type.inputs[:2]] == ["tensor<?x?x768xf32>", "tensor<?x1x1x?xf32>"]
    assert [str(t) for t in s.function_type.inputs[:2]] == ["tensor<2x5x768xf32>", "tensor<2x1x1x5xf32>"]
    assert str(d.function_type.results[0]) == "tensor<?x?x768xf32>" and str(s.function_type.results[0]) == "tensor<2x5x768xf32>"
