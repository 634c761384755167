"""A schedule's steps run as one native call (runtime/cpu/sequence.py,
runtime/cpu/call_path.py): the step runner passes every argument and
copies every byte it is told to (checked through ctypes callbacks standing
in for kernels, at every arity it takes), and programs run through it give
the reference's results: at one thread as one native segment, at two as
one team call (runtime/cpu/team.py: each piece of a split launch on its own
thread, a helper woken from its sleep), with copies, with `?` dims bound
per call, and from several Python threads at once."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import fusecc
from fusecc.compiler.types import MemRefType, f32, i64
from fusecc.runtime.cpu.call_path import StepProgram
from fusecc.runtime.cpu.executor import WorkerPool
from fusecc.runtime.cpu.sequence import MAX_ARGUMENTS, StepEncoder, native_callable, run_steps_function
from fusecc.runtime.cpu.team import Team


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
    run_steps_function()(steps.ctypes.data, bases.ctypes.data, None, 0)
    expected = tuple(int(bases[keys[key]]) + offset for key, offset in arguments)
    assert seen == [expected, tuple(reversed(expected))]


def test_the_step_runner_copies_between_bases_at_offsets():
    source = np.arange(64, dtype=np.uint8)
    target = np.zeros(64, dtype=np.uint8)
    bases = np.array([0, source.ctypes.data, target.ctypes.data], dtype=np.int64)
    encoder = StepEncoder({None: 0, "source": 1, "target": 2})
    encoder.copy(("target", 8), ("source", 3), 20)
    encoder.copy(("target", 40), ("source", 0), 1)
    run_steps_function()(encoder.finish().ctypes.data, bases.ctypes.data, None, 0)
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
# between small ones.
SPLIT = """
func.func @main(%x: tensor<2048x1024xf32>, %s: tensor<8xf32>) -> (tensor<2048x1024xf32>, tensor<8xf32>) {
  %a = tensor.relu %s {fusion.forbid = true} : (tensor<8xf32>) -> tensor<8xf32>
  %b = tensor.tanh %x {fusion.forbid = true} : (tensor<2048x1024xf32>) -> tensor<2048x1024xf32>
  %c = tensor.neg %a {fusion.forbid = true} : (tensor<8xf32>) -> tensor<8xf32>
  %d = tensor.exp %c {fusion.forbid = true} : (tensor<8xf32>) -> tensor<8xf32>
  func.return %b, %d : tensor<2048x1024xf32>, tensor<8xf32>
}
"""


def test_a_call_with_a_split_launch_runs_as_one_team_call(tmp_path):
    cpu, reference = compiled(tmp_path, SPLIT, threads=2)
    plan = cpu._compiled.prepare(cpu.entry)
    assert [s[0] for s in plan._call.segments] == ["team"]
    assert sum(len(step[4]) > 1 for step in plan._bound if step[0] == "launch") == 1  # really split
    rng = np.random.default_rng(1)
    for _ in range(3):
        inputs = {"x": rng.standard_normal((2048, 1024)).astype(np.float32), "s": rng.standard_normal(8).astype(np.float32)}
        assert_matches(cpu, reference, inputs, rtol=1e-5)


def team_walk_records():
    """A team call of callback kernels: a launch, a split of two pieces, a
    launch; each call records (thread, arguments)."""
    seen: list = []
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
    function = prototype(lambda *args: seen.append((threading.get_ident(), args)))
    address = ctypes.cast(function, ctypes.c_void_p).value
    encoder = StepEncoder()
    encoder.launch(address, [(None, 1), (None, 0), (None, 1)])
    encoder.barrier()
    encoder.split(address, [[(None, 2), (None, 0), (None, 5)], [(None, 2), (None, 5), (None, 9)]])
    encoder.barrier()
    encoder.launch(address, [(None, 3), (None, 0), (None, 1)])
    encoder.barrier()
    return encoder.finish(), np.zeros(1, dtype=np.int64), seen, function


def test_a_team_runs_each_piece_of_a_split_on_its_own_thread_in_order():
    steps, bases, seen, _function = team_walk_records()
    team = Team(2)
    try:
        for _ in range(20):
            seen.clear()
            team.run(steps.ctypes.data, bases.ctypes.data)
            caller = threading.get_ident()
            assert seen[0] == (caller, (1, 0, 1)) and seen[-1] == (caller, (3, 0, 1))  # launches: the caller's
            assert sorted(seen[1:3], key=lambda r: r[1]) == [(caller, (2, 0, 5)), (seen[2][0] if seen[1][0] == caller else seen[1][0], (2, 5, 9))]
            assert len({thread for thread, _ in seen[1:3]}) == 2  # the other piece on the helper
    finally:
        team.stop()


def test_a_stopped_team_runs_every_piece_on_the_caller():
    steps, bases, seen, _function = team_walk_records()
    team = Team(2)
    team.stop()
    team.run(steps.ctypes.data, bases.ctypes.data)
    caller = threading.get_ident()
    assert seen == [(caller, (1, 0, 1)), (caller, (2, 0, 5)), (caller, (2, 5, 9)), (caller, (3, 0, 1))]


def test_a_helper_that_fell_asleep_wakes_for_the_next_call():
    steps, bases, seen, _function = team_walk_records()
    team = Team(2)
    try:
        team.run(steps.ctypes.data, bases.ctypes.data)
        deadline = time.monotonic() + 10
        while team._asleep == 0 and time.monotonic() < deadline:  # past SPIN_TICKS it sleeps in Python
            time.sleep(0.01)
        assert team._asleep == 1
        seen.clear()
        caller = threading.Thread(target=team.run, args=(steps.ctypes.data, bases.ctypes.data))
        caller.start()
        caller.join(timeout=10)
        assert not caller.is_alive(), "the call waits at a barrier for a helper that was not woken"
        assert len(seen) == 4
    finally:
        team.stop()


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
    # on two threads, split: the call is no team call (the team cannot pass the scalar)
    seen.clear()
    program = StepProgram([steps[0][:4] + ([(0, 2), (2, 4)],)], {}, WorkerPool(2), n_inputs=1, n_outputs=0)
    assert [s[0] for s in program.segments] == ["pool"] and program.team is None
    program.run([1 << 20], [])
    assert sorted(seen) == [((1 << 20) + 16, 0, 0, 2), ((1 << 20) + 16, 0, 2, 4)]


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


def _run_in_forked_child(cpu, inputs, queue) -> None:
    queue.put(cpu(**inputs))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_child_runs_team_calls_with_helpers_of_its_own(tmp_path):
    """Only the forking thread survives a fork: without new helpers the
    child's first team call would wait at its first barrier for ever."""
    import multiprocessing

    cpu, reference = compiled(tmp_path, SPLIT, threads=2)
    rng = np.random.default_rng(4)
    inputs = {"x": rng.standard_normal((2048, 1024)).astype(np.float32), "s": rng.standard_normal(8).astype(np.float32)}
    cpu(**inputs)  # the parent's team exists, its helper waiting
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_run_in_forked_child, args=(cpu, inputs, queue))
    child.start()
    try:
        got = queue.get(timeout=60)
        child.join(timeout=60)
    finally:
        if child.is_alive():  # stuck at a barrier: no spinning process left behind
            child.kill()
    assert child.exitcode == 0
    expected = reference(**inputs)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5, err_msg=name)
