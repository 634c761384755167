"""Dynamic programs on the reference interpreter at many sizes (1 and
primes), against independent numpy versions, before and after the graph
passes (whose output is printed and read back: `?` types in the text)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dynamic_programs import PROGRAMS, inputs, load, numpy_encoder, numpy_layout, numpy_norms

from fusecc.compiler.parser import parse_module
from fusecc.compiler.verifier import verify
from fusecc.runtime.reference import evaluate

ENCODER_SIZES = [{"B": 1, "S": 1}, {"B": 1, "S": 2}, {"B": 2, "S": 3}, {"B": 3, "S": 7}, {"B": 5, "S": 13}, {"B": 2, "S": 31}]
LAYOUT_SIZES = [
    {"M": 1, "N": 1, "K": 1, "I": 1},
    {"M": 2, "N": 3, "K": 5, "I": 7},
    {"M": 11, "N": 13, "K": 2, "I": 3},
    {"M": 17, "N": 1, "K": 19, "I": 23},
]
GRAPH_PASSES = "canonicalize,cse,dce,decompose,canonicalize,fuse"


def check_close(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == np.shape(e)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=2e-4, atol=2e-4)
        else:
            np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("sizes", ENCODER_SIZES, ids=lambda s: "B{B}_S{S}".format(**s))
def test_encoder_at_every_size_matches_numpy(sizes):
    module, func = load("encoder")
    args = inputs(func, sizes)
    args[1] = (np.arange(sizes["S"]) < max(1, sizes["S"] - 1)).astype(np.float32)[None].repeat(sizes["B"], 0)  # pad the last token
    check_close(evaluate(module, "encoder", args), numpy_encoder(*args))


@pytest.mark.parametrize("sizes", LAYOUT_SIZES, ids=lambda s: "M{M}_N{N}_K{K}_I{I}".format(**s))
def test_layout_ops_at_every_size_match_numpy(sizes):
    module, func = load("layout")
    args = inputs(func, sizes)
    args[4] = (args[4] % sizes["M"]).astype(np.int32)  # gather indices within the M columns of x.T
    check_close(evaluate(module, "layout", args), numpy_layout(*args))


@pytest.mark.parametrize("sizes", [{"B": 1, "S": 1}, {"B": 2, "S": 5}, {"B": 3, "S": 17}], ids=lambda s: "B{B}_S{S}".format(**s))
def test_causal_attention_and_norms_at_every_size_match_numpy(sizes):
    module, func = load("norms")
    args = inputs(func, sizes)
    check_close(evaluate(module, "att", args), numpy_norms(*args))


def graph_passes(name: str, target: str):
    text = subprocess.run(
        [sys.executable, "-m", "fusecc.tools.opt", str(PROGRAMS / f"{name}.ir"), "-p", GRAPH_PASSES, "--target", target],
        capture_output=True, text=True, check=True,
    ).stdout
    module = parse_module(text, f"{name}-fused.ir")
    verify(module)
    return text, module


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize(
    "name, sizes",
    [("encoder", ENCODER_SIZES[0]), ("encoder", ENCODER_SIZES[4]), ("layout", LAYOUT_SIZES[0]), ("layout", LAYOUT_SIZES[2]), ("norms", {"B": 2, "S": 5})],
)
def test_graph_passes_keep_dynamic_programs_equal(name, sizes, target):
    text, fused = graph_passes(name, target)
    assert "fusion.group" in text and "?x" in text
    module, func = load(name)
    args = inputs(func, sizes)
    if name == "layout":
        args[4] = (args[4] % sizes["M"]).astype(np.int32)
    expected = evaluate(module, func.sym_name, args)
    for got, want in zip(evaluate(fused, func.sym_name, args), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
