"""Differential tests of the graph passes: every golden input of the graph
passes and every program in examples/ gives the same numbers on the
reference interpreter before and after each pass.

Exact (bit for bit, signs of zero and NaN positions included, on normal
inputs and on inputs salted with -0.0, ±inf and NaN): canonicalize, cse,
dce, inline. decompose is checked within DECOMPOSE_RTOL/ATOL; for f32
it is in fact bit-exact on finite inputs, which `test_decompose_is_bit_exact`
pins for its own golden inputs.
"""

from __future__ import annotations

import pathlib

import pytest

from fusecc.compiler.parser import parse_module, split_input
from fusecc.compiler.pass_manager import parse_pipeline, run_pipeline
from numerics import SPECIAL_VARIANTS, assert_close, assert_exact, run_all

ROOT = pathlib.Path(__file__).resolve().parents[2]
PASS_DIRS = ("canonicalize", "cse", "dce", "inline", "decompose")
GOLDEN = sorted(p for d in PASS_DIRS for p in (ROOT / "tests/filecheck/passes" / d).glob("*.ir"))
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))

DECOMPOSE_RTOL, DECOMPOSE_ATOL = 1e-5, 1e-6

EXACT_PIPELINES = ("canonicalize", "cse", "dce", "inline", "canonicalize,cse,dce", "inline,canonicalize,cse,dce")
TOLERANT_PIPELINES = ("decompose", "inline,decompose,canonicalize,cse,dce")


def programs():
    """(id, text) of every runnable input: split-input chunks, minus the ones
    that expect diagnostics."""
    for path in GOLDEN + EXAMPLES:
        chunks = split_input(path.read_text())
        for index, (text, _) in enumerate(chunks):
            if "expected-error" in text:
                continue
            name = str(path.relative_to(ROOT)) + (f"#{index}" if len(chunks) > 1 else "")
            yield pytest.param(text, id=name)


PROGRAMS = list(programs())


def transform(text: str, pipeline: str):
    """The program before and after `pipeline`."""
    module = parse_module(text)
    run_pipeline(parse_pipeline(pipeline), module)
    return parse_module(text), module


@pytest.mark.parametrize("pipeline", EXACT_PIPELINES)
@pytest.mark.parametrize("text", PROGRAMS)
def test_exact_passes_keep_numbers(text, pipeline):
    original, transformed = transform(text, pipeline)
    for special in (None, *range(SPECIAL_VARIANTS)):
        before, after = run_all(original, special=special), run_all(transformed, special=special)
        for name in before:
            assert_exact(before[name], after[name], f"@{name} after {pipeline}, special inputs {special}")


def transformed_results(text: str, pipeline: str):
    original, transformed = transform(text, pipeline)
    return run_all(original), run_all(transformed)


@pytest.mark.parametrize("pipeline", TOLERANT_PIPELINES)
@pytest.mark.parametrize("text", PROGRAMS)
def test_decompose_keeps_numbers_within_tolerance(text, pipeline):
    before, after = transformed_results(text, pipeline)
    for name in before:
        assert_close(before[name], after[name], DECOMPOSE_RTOL, DECOMPOSE_ATOL, f"@{name} after {pipeline}")


@pytest.mark.parametrize("text", [p for p in PROGRAMS if "decompose" in p.id])
def test_decompose_is_bit_exact(text):
    """The decomposition repeats the reference's formulas op by op (in f32)."""
    before, after = transformed_results(text, "decompose")
    for name in before:
        assert_exact(before[name], after[name], f"@{name} after decompose")


def test_inputs_were_found():
    assert len(GOLDEN) >= 8 and len(PROGRAMS) >= 25
