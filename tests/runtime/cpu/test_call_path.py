"""A schedule's steps run as one native call (runtime/cpu/sequence.py,
runtime/cpu/call_path.py): the step runner passes every argument and
copies every byte it is told to (checked through ctypes callbacks standing
in for kernels, at every arity it takes), and programs run through it give
the reference's results: at one thread as one native segment, at two with
a launch split over the pool between segments, with copies, with `?` dims
bound per call, and from several Python threads at once."""

from __future__ import annotations

import ctypes
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import fusecc
from fusecc.compiler.types import MemRefType, f32, i64
from fusecc.runtime.cpu.call_path import StepProgram
from fusecc.runtime.cpu.executor import WorkerPool
from fusecc.runtime.cpu.sequence import MAX_ARGUMENTS, StepEncoder, native_callable, run_steps_function


def callback_kernel(arity: int, seen: list):
    """A C function of `arity` int64 arguments recording them (what a kernel receives)."""
    prototype = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * arity)
    function = prototype(lambda *args: seen.append(args))
    return function, ctypes.cast(function, ctypes.c_void_p).value


@pytest.mark.parametrize("arity", [1, 2, 3, 7, 17, MAX_ARGUMENTS])
def test_the_step_runner_passes_each_argument_as_base_plus_offset(arity):
    seen: list = []
    function, address = callback_kernel(arity, seen)
    bases = np.array([0, 1 << 40, 7 << 20, 123], dtype=np.int64)
    arguments = [((None, "a", "b", "c")[k % 4], 1000 * k + 3) for k in range(arity)]
    keys = {None: 0, "a": 1, "b": 2, "c": 3}
    encoder = StepEncoder(dict(keys))
    encoder.launch(address, arguments)
    encoder.launch(address, list(reversed(arguments)))
    steps = encoder.finish()
    run_steps_function()(steps.ctypes.data, bases.ctypes.data)
    expected = tuple(int(bases[keys[key]]) + offset for key, offset in arguments)
    assert seen == [expected, tuple(reversed(expected))]


def test_the_step_runner_copies_between_bases_at_offsets():
    source = np.arange(64, dtype=np.uint8)
    target = np.zeros(64, dtype=np.uint8)
    bases = np.array([0, source.ctypes.data, target.ctypes.data], dtype=np.int64)
    encoder = StepEncoder({None: 0, "source": 1, "target": 2})
    encoder.copy(("target", 8), ("source", 3), 20)
    encoder.copy(("target", 40), ("source", 0), 1)
    run_steps_function()(encoder.finish().ctypes.data, bases.ctypes.data)
    expected = np.zeros(64, dtype=np.uint8)
    expected[8:28] = source[3:23]
    expected[40] = source[0]
    np.testing.assert_array_equal(target, expected)


def test_only_kernels_whose_arguments_are_words_are_native():
    def abi(*params):
        return SimpleNamespace(params=params)

    memref = MemRefType((4, 8), f32)
    assert native_callable(abi(memref, memref, i64))
    assert not native_callable(abi(memref, f32))  # a float scalar goes in a float register
    assert native_callable(abi(*[memref] * (MAX_ARGUMENTS - 2)))
    assert not native_callable(abi(*[memref] * (MAX_ARGUMENTS - 1)))  # plus begin and end: one too many


def compiled(tmp_path, text: str, threads: int):
    path = tmp_path / "p.ir"
    path.write_text(text)
    return fusecc.compile(str(path), target="cpu", options={"threads": threads}), fusecc.compile(str(path), target="reference")


def assert_matches(cpu, reference, inputs, rtol=1e-5):
    got, expected = cpu(**inputs), reference(**inputs)
    assert list(got) == list(expected)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=rtol, atol=1e-5, err_msg=name)


COPIES = """
func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<32xf32>, tensor<4x8xf32>) {
  %r = tensor.relu %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %f = tensor.reshape %r : (tensor<4x8xf32>) -> tensor<32xf32>
  func.return %r, %f, %x : tensor<4x8xf32>, tensor<32xf32>, tensor<4x8xf32>
}
"""


def test_one_thread_runs_a_call_as_one_native_segment_with_its_copies(tmp_path):
    cpu, reference = compiled(tmp_path, COPIES, threads=1)
    plan = cpu._compiled.prepare(cpu.entry)
    assert [s[0] for s in plan.steps] == ["launch", "copy"]
    assert [s[0] for s in plan._call.segments] == ["native"]
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((4, 8)).astype(np.float32)
        x[0, :3] = [np.nan, -0.0, -np.inf]
        got = cpu(x=x)
        assert_matches(cpu, reference, {"x": x})
        assert not np.shares_memory(got["result2"], x)  # the copy is an output of its own


# A launch big enough to be split over two threads (executor.MIN_PARALLEL_WORK)
# between small ones: native segments on both sides of a pool launch.
SPLIT = """
func.func @main(%x: tensor<2048x1024xf32>, %s: tensor<8xf32>) -> (tensor<2048x1024xf32>, tensor<8xf32>) {
  %a = tensor.relu %s {fusion.forbid = true} : (tensor<8xf32>) -> tensor<8xf32>
  %b = tensor.tanh %x {fusion.forbid = true} : (tensor<2048x1024xf32>) -> tensor<2048x1024xf32>
  %c = tensor.neg %a {fusion.forbid = true} : (tensor<8xf32>) -> tensor<8xf32>
  %d = tensor.exp %c {fusion.forbid = true} : (tensor<8xf32>) -> tensor<8xf32>
  func.return %b, %d : tensor<2048x1024xf32>, tensor<8xf32>
}
"""


def test_a_launch_split_over_threads_runs_between_native_segments(tmp_path):
    cpu, reference = compiled(tmp_path, SPLIT, threads=2)
    plan = cpu._compiled.prepare(cpu.entry)
    kinds = [s[0] for s in plan._call.segments]
    assert "pool" in kinds and "native" in kinds, kinds
    assert sum(len(s[4]) for s in plan._call.segments if s[0] == "pool") >= 2  # really split
    rng = np.random.default_rng(1)
    for _ in range(2):
        inputs = {"x": rng.standard_normal((2048, 1024)).astype(np.float32), "s": rng.standard_normal(8).astype(np.float32)}
        assert_matches(cpu, reference, inputs, rtol=1e-5)


def test_step_program_keeps_python_launches_for_kernels_it_cannot_call():
    """A launch whose kernel takes a float scalar stays a pool launch."""
    seen: list = []
    function, _ = callback_kernel(4, seen)  # pointer, scalar, begin, end
    kernel = SimpleNamespace(abi=SimpleNamespace(params=(MemRefType((4,), f32), f32)), function=function)
    steps = [("launch", kernel, [0, 0], [(0, ("input", 0), 16)], [(0, 4)])]
    program = StepProgram(steps, {}, WorkerPool(1), n_inputs=1, n_outputs=0)
    assert [s[0] for s in program.segments] == ["pool"]
    program.run([1 << 20], [])
    assert seen == [((1 << 20) + 16, 0, 0, 4)]


DYNAMIC = """
func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %a = tensor.relu %x {fusion.forbid = true} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %b = tensor.neg %a {fusion.forbid = true} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %c = tensor.tanh %b {fusion.forbid = true} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %c : tensor<?x8xf32>
}
"""


def test_dynamic_programs_bind_their_dims_on_every_call(tmp_path):
    cpu, reference = compiled(tmp_path, DYNAMIC, threads=1)
    rng = np.random.default_rng(2)
    for rows in [1, 3, 17, 3, 129, 1]:
        x = rng.standard_normal((rows, 8)).astype(np.float32)
        assert cpu(x=x)[cpu.outputs[0]].shape == (rows, 8)
        assert_matches(cpu, reference, {"x": x})
    assert cpu.stats.compilations == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_concurrent_calls_each_get_their_own_results(tmp_path, threads):
    """The plan's lock serialises calls on its shared arena and bases array."""
    cpu, reference = compiled(tmp_path, COPIES.replace("tensor.relu %x", "tensor.relu %x {fusion.forbid = true}"), threads=threads)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(8)]
    expected = [reference(x=x) for x in inputs]
    failures: list = []

    def worker(k: int):
        for _ in range(50):
            i = (k * 3 + _) % len(inputs)
            got = cpu(x=inputs[i])
            for name in expected[i]:
                if not np.array_equal(got[name], expected[i][name]):
                    failures.append((k, i, name))

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not failures
