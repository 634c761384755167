"""Differential tests of the graph passes: every golden input of the graph
passes and every program in examples/ gives the same numbers on the
reference interpreter before and after each pass.

Exact (bit for bit, signs of zero and NaN positions included, on normal
inputs and on inputs salted with -0.0, ±inf and NaN): canonicalize, cse,
dce, inline. decompose is checked within DECOMPOSE_RTOL/ATOL on normal
inputs; for f32 it is in fact bit-exact, which `test_decompose_is_bit_exact`
pins for its own golden inputs, salted ones included. A pipeline
that leaves a program's text unchanged needs no run.
"""

from __future__ import annotations

import functools
import pathlib

import pytest

from fusecc.compiler.parser import parse_module, split_input
from fusecc.compiler.pass_manager import parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from numerics import SPECIAL_VARIANTS, assert_close, assert_exact, run_all

ROOT = pathlib.Path(__file__).resolve().parents[2]
PASS_DIRS = ("canonicalize", "cse", "dce", "inline", "decompose")
GOLDEN = sorted(p for d in PASS_DIRS for p in (ROOT / "tests/filecheck/passes" / d).glob("*.ir"))
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))

DECOMPOSE_RTOL, DECOMPOSE_ATOL = 1e-5, 1e-6

EXACT_PIPELINES = ("canonicalize", "cse", "dce", "inline", "canonicalize,cse,dce", "inline,canonicalize,cse,dce")
TOLERANT_PIPELINES = ("decompose", "inline,decompose,canonicalize,cse,dce")
# examples/ holds full models, where one run of the reference takes a good
# fraction of a second: they get each pass once, and one salted input.
EXAMPLE_EXACT_PIPELINES = ("canonicalize", "cse", "dce", "inline", "canonicalize,cse,dce")
EXAMPLE_TOLERANT_PIPELINES = ("decompose", "decompose,canonicalize,cse,dce")
EXAMPLE_SPECIAL_VARIANTS = (0,)


def chunks(paths):
    """(id, text) of every runnable input: split-input chunks, minus the ones
    that expect diagnostics."""
    for path in paths:
        parts = split_input(path.read_text())
        for index, (text, _) in enumerate(parts):
            if "expected-error" in text:
                continue
            yield str(path.relative_to(ROOT)) + (f"#{index}" if len(parts) > 1 else ""), text


GOLDEN_CHUNKS = dict(chunks(GOLDEN))
EXAMPLE_CHUNKS = dict(chunks(EXAMPLES))
EXACT_CASES = [(n, p, range(SPECIAL_VARIANTS)) for n in GOLDEN_CHUNKS for p in EXACT_PIPELINES] + [
    (n, p, EXAMPLE_SPECIAL_VARIANTS) for n in EXAMPLE_CHUNKS for p in EXAMPLE_EXACT_PIPELINES
]
TOLERANT_CASES = [(n, p) for n in GOLDEN_CHUNKS for p in TOLERANT_PIPELINES] + [
    (n, p) for n in EXAMPLE_CHUNKS for p in EXAMPLE_TOLERANT_PIPELINES
]
SOURCES = {**GOLDEN_CHUNKS, **EXAMPLE_CHUNKS}


@functools.lru_cache(maxsize=None)
def original_results(name: str, special: int | None):
    """The untransformed program's numbers, computed once per input set."""
    return run_all(parse_module(SOURCES[name]), special=special)


def transform(name: str, pipeline: str):
    """The transformed module, or None when the pass left the text unchanged
    (then the numbers are the same without running anything)."""
    module = parse_module(SOURCES[name])
    run_pipeline(parse_pipeline(pipeline), module)
    return None if print_op(module) == print_op(parse_module(SOURCES[name])) else module


def case_id(case) -> str:
    return f"{case[0]}-{case[1]}"


@pytest.mark.parametrize("case", EXACT_CASES, ids=case_id)
def test_exact_passes_keep_numbers(case):
    name, pipeline, variants = case
    module = transform(name, pipeline)
    if module is None:
        return
    for special in (None, *variants):
        before, after = original_results(name, special), run_all(module, special=special)
        for function in before:
            assert_exact(before[function], after[function], f"@{function} after {pipeline}, special inputs {special}")


@pytest.mark.parametrize("case", TOLERANT_CASES, ids=case_id)
def test_decompose_keeps_numbers_within_tolerance(case):
    name, pipeline = case
    module = transform(name, pipeline)
    if module is None:
        return
    before, after = original_results(name, None), run_all(module)
    for function in before:
        assert_close(before[function], after[function], DECOMPOSE_RTOL, DECOMPOSE_ATOL, f"@{function} after {pipeline}")


@pytest.mark.parametrize("name", [n for n in GOLDEN_CHUNKS if "decompose" in n])
def test_decompose_is_bit_exact(name):
    """The decomposition builds the op's own formula (dialects/tensor/formulas.py)
    op by op, which the reference evaluates in f32: bit for bit, on inputs
    salted with -0.0, ±inf and NaN too (attention's causal mask included)."""
    module = transform(name, "decompose")
    for special in (None, *range(SPECIAL_VARIANTS)):
        before, after = original_results(name, special), run_all(module, special=special)
        for function in before:
            assert_exact(before[function], after[function], f"@{function} after decompose, inputs {special}")


def test_inputs_were_found():
    assert len(GOLDEN) >= 8 and len(GOLDEN_CHUNKS) >= 25
