"""The golden LLVM-emission inputs (tests/filecheck/passes/emit_llvm/*.ir)
also run: compiled for the CPU they give the loop interpreter's numbers."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusecc.compiler import parse_module, verify
from fusecc.compiler.shape_expr import parse_shape_expr
from fusecc.compiler.types import TensorType
from fusecc.runtime.cpu import compile_program
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import random_input

from cpu_tolerance import assert_exact

# Inputs already at the loop level; tensor-level ones (from_tensor.ir) go
# through the whole pipeline, which the end-to-end tests run against numpy.
GOLDEN = sorted(p for p in (pathlib.Path(__file__).parents[2] / "filecheck" / "passes" / "emit_llvm").glob("*.ir") if "loop.schedule @main" in p.read_text())


def input_shapes(schedule) -> list[tuple[int, ...]]:
    """The inputs' shapes, each `?` dim (docs/dynamic-shapes.md) at a
    distinct prime (3, 5, 7, ...) by its name in the schedule's `arg_sizes`."""
    sizes = schedule.argument_sizes()
    dims = {name: 3 + 2 * n for n, name in enumerate(sorted(schedule.dim_sources()))}
    shapes = []
    for arg, entry in zip(schedule.input_args, sizes):
        exprs = iter(entry)
        shapes.append(tuple(d if type(d) is int else parse_shape_expr(next(exprs)).evaluate(dims) for d in arg.type.shape))
    return shapes


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_input_matches_the_interpreter(path):
    module = parse_module(path.read_text(), str(path))
    verify(module)
    schedule = module.lookup("main")
    rng = np.random.default_rng(7)
    inputs = [random_input(TensorType(shape, a.type.element_type), rng) for a, shape in zip(schedule.input_args, input_shapes(schedule))]
    got = compile_program(module).run(inputs)
    want = run_schedule(module, "main", inputs)
    for g, w in zip(got, want, strict=True):
        assert_exact(g, w)
