"""The loop interpreter runs hand-written loop IR with GPU semantics."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusecc.compiler import parse_module, verify
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import InterpreterError, softmax

LOOP_TESTS = pathlib.Path(__file__).parents[1] / "filecheck" / "dialects" / "loop"


def load(name: str):
    module = parse_module((LOOP_TESTS / name).read_text(), name)
    verify(module)
    return module


def test_gpu_softmax_with_barriers_and_shuffles_matches_numpy():
    x = np.random.default_rng(0).standard_normal((4, 100), dtype=np.float32)
    (out,) = run_schedule(load("softmax_gpu.ir"), "main", [x])
    np.testing.assert_allclose(out, softmax(x, -1), rtol=1e-6, atol=1e-7)


def test_out_of_bounds_load_is_reported():
    module = parse_module(
        """
loop.kernel @oob {
^bb0(%a: memref<4xf32>, %b: memref<4xf32>):
  loop.parallel {upper = [5], mapping = ["worker"]} {
  ^bb0(%i: index):
    %v = loop.load %a, %i : (memref<4xf32>, index) -> f32
    loop.store %v, %b, %i : f32, memref<4xf32>, index
    loop.yield
  }
  loop.return
}
loop.schedule @main {inputs = ["a"], outputs = ["b"]} {
^bb0(%a: memref<4xf32>, %b: memref<4xf32>):
  loop.launch @oob(%a, %b) : memref<4xf32>, memref<4xf32>
  loop.return
}
"""
    )
    verify(module)
    with pytest.raises(InterpreterError, match="out-of-bounds load"):
        run_schedule(module, "main", [np.zeros(4, np.float32)])


def test_divergent_barrier_is_reported():
    module = parse_module(
        """
loop.kernel @divergent {
^bb0(%a: memref<64xf32>):
  loop.parallel {upper = [1], mapping = ["block.x"]} {
  ^bb0(%b: index):
    loop.parallel {upper = [64], mapping = ["thread.x"]} {
    ^bb0(%t: index):
      %c1 = arith.constant {value = 1 : index} : () -> index
      %c0 = arith.constant {value = 0 : index} : () -> index
      loop.for %c0, %t, %c1 : (index, index, index) -> () {
      ^bb0(%i: index):
        loop.barrier
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  loop.return
}
"""
    )
    verify(module)
    from fusecc.runtime.loop_interpreter import LoopInterpreter

    # Thread t meets t barriers: a deadlock on a GPU, an error here.
    with pytest.raises(InterpreterError, match="divergent"):
        LoopInterpreter(module).run_kernel(module.lookup("divergent"), [np.zeros(64, np.float32)])
