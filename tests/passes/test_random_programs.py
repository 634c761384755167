"""Property tests on random programs of 30-60 ops (tests/program_gen.py):
the graph passes keep the reference's numbers bit for bit, never grow the
program, and reach a fixed point."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from fusecc.compiler.pass_manager import parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from numerics import SPECIAL_VARIANTS, assert_exact, run_all
from program_gen import programs

CLEANUP = parse_pipeline("canonicalize,cse,dce")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def count_ops(module) -> int:
    return len(module.walk())


@SETTINGS
@given(programs(min_ops=30, max_ops=60))
def test_cleanup_keeps_numbers_and_reaches_a_fixed_point(program):
    module = program.module
    assert program.num_ops >= 30
    before = [run_all(module, seed=1), run_all(module, special=3)]
    size = count_ops(module)
    run_pipeline(CLEANUP, module)
    after = [run_all(module, seed=1), run_all(module, special=3)]
    for b, a in zip(before, after, strict=True):
        assert_exact(b["main"], a["main"], "canonicalize,cse,dce")
    assert count_ops(module) <= size
    once = print_op(module)
    run_pipeline(CLEANUP, module)
    assert print_op(module) == once, "a second canonicalize,cse,dce changed the program"


@pytest.mark.parametrize("pipeline", ["canonicalize", "cse", "dce"])
@SETTINGS
@given(program=programs(min_ops=30, max_ops=60))
def test_each_pass_keeps_numbers(pipeline, program):
    module = program.module
    special = program.num_ops % SPECIAL_VARIANTS
    before = [run_all(module, seed=3), run_all(module, special=special)]
    run_pipeline(parse_pipeline(pipeline), module)
    after = [run_all(module, seed=3), run_all(module, special=special)]
    for b, a in zip(before, after, strict=True):
        assert_exact(b["main"], a["main"], pipeline)


@SETTINGS
@given(programs(min_ops=30, max_ops=60))
def test_decompose_then_cleanup_is_exact(program):
    """The random programs have softmax, norms, gelu, silu and sigmoid, but
    no attention, whose additive causal mask is the one inexact case."""
    module = program.module
    special = program.num_ops % SPECIAL_VARIANTS
    before = [run_all(module, seed=2), run_all(module, special=special)]
    run_pipeline(parse_pipeline("decompose,canonicalize,cse,dce"), module)
    assert not any(op.name in ("tensor.softmax", "tensor.layernorm", "tensor.gelu") for op in module.walk())
    after = [run_all(module, seed=2), run_all(module, special=special)]
    for b, a in zip(before, after, strict=True):
        assert_exact(b["main"], a["main"], "decompose,canonicalize,cse,dce")
