"""Random programs over `?` dims (hypothesis): each prints and reads back to
the same text, and runs on the reference like numpy at random sizes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify
from fusecc.runtime.reference import evaluate

NAMES = ("A", "B")


@st.composite
def programs(draw):
    """(text, dims of x, dims of y, reduced axis): y is x with some axes 1."""
    rank = draw(st.integers(1, 3))
    x = [draw(st.one_of(st.sampled_from(NAMES), st.integers(1, 4))) for _ in range(rank)]
    y = [1 if draw(st.booleans()) else d for d in x]
    axis = draw(st.integers(0, rank - 1))
    spell = lambda dims: "tensor<" + "".join(("?" if isinstance(d, str) else str(d)) + "x" for d in dims) + "f32>"  # noqa: E731
    names = lambda dims: "[" + ", ".join(f'"{d}"' for d in dims if isinstance(d, str)) + "]"  # noqa: E731
    kept = [1 if i == axis else d for i, d in enumerate(x)]
    text = f"""func.func @p(%x: {spell(x)}, %y: {spell(y)}) -> {spell(x)} attributes {{fusecc.dims = [{names(x)}, {names(y)}]}} {{
  %0 = tensor.mul %x, %y : ({spell(x)}, {spell(y)}) -> {spell(x)}
  %1 = tensor.reduce_sum %0 {{axes = [{axis}], keepdims = true}} : ({spell(x)}) -> {spell(kept)}
  %2 = tensor.sub %0, %1 : ({spell(x)}, {spell(kept)}) -> {spell(x)}
  %3 = tensor.tanh %2 : ({spell(x)}) -> {spell(x)}
  func.return %3 : {spell(x)}
}}
"""
    return text, x, y, axis


@settings(max_examples=40, deadline=None)
@given(programs(), st.integers(1, 7), st.integers(1, 7), st.integers(0, 2**31))
def test_random_dynamic_programs_round_trip_and_match_numpy(program, a, b, seed):
    text, x_dims, y_dims, axis = program
    module = parse_module(text, "p.ir")
    verify(module)
    printed = print_op(module)
    assert print_op(parse_module(printed, "again.ir")) == printed
    sizes = {"A": a, "B": b}
    shape = lambda dims: tuple(sizes[d] if isinstance(d, str) else d for d in dims)  # noqa: E731
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape(x_dims)).astype(np.float32)
    y = rng.standard_normal(shape(y_dims)).astype(np.float32)
    product = x.astype(np.float64) * y
    expected = np.tanh(product - product.sum(axis, keepdims=True))
    np.testing.assert_allclose(evaluate(module, "p", [x, y])[0], expected, rtol=1e-5, atol=1e-5)
