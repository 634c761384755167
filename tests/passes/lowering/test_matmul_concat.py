"""Matmul groups whose operands are concatenations (sibling matmuls merged
on concatenated weights, with concatenated biases): the template reads each
piece with its own specialised inner loops, the piece chosen once per output
tile, never per element inside the K loop.

Numbers: the loop interpreter (GPU and CPU mappings) and the CPU backend
against the reference, on pieces the tiles do not divide. Structure: no
`loop.if` inside a K loop, one uniform branch per piece at block/worker level.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from template_harness import assert_lowering_matches, group_module, lower_group, the_group

from fusecc.passes.backends.hardware import CPU, H200
from fusecc.compiler.types import TensorType, f32
from fusecc.dialects import tensor as T
from fusecc.passes.lowering.matmul import MAX_SPECIALISED_COPIES, MatmulProblem
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import evaluate, random_input

TARGETS = pytest.mark.parametrize(
    "hardware, tiles",
    [
        (H200, {"tile.block": [8, 8], "tile.k": 4, "tile.threads": 16}),
        # 8x32 worker blocks of one 32-wide vector panel: no piece below is a multiple of 32.
        (CPU, {"tile.block": [8, 32]}),
    ],
    ids=["h200", "cpu"],
)


def t(*shape):
    return TensorType(shape, f32)


def op(b, cls, *operands, **attrs):
    return b.create(cls, list(operands), attrs or None).result


def concat(b, pieces, axis):
    return op(b, T.ConcatOp, *pieces, axis=axis)


def merged_siblings(widths, k=11, m=13, activation=T.GeluOp, transpose_b=False, batch=()):
    """x @ concat(w_i) + concat(b_i), then an activation: what `fuse` makes of
    sibling projections with biases. Weights are [K, N_i] ([N_i, K] when
    transposed), concatenated along N."""
    weights = [t(*batch, n, k) if transpose_b else t(*batch, k, n) for n in widths]
    axis = len(batch) + (0 if transpose_b else 1)

    def body(b, a):
        x, ws, bs = a[0], a[1 : 1 + len(widths)], a[1 + len(widths) :]
        product = op(b, T.MatmulOp, x, concat(b, ws, axis), transpose_b=transpose_b)
        summed = op(b, T.AddOp, product, concat(b, bs, 0))
        return [op(b, activation, summed)]

    return [t(*batch, m, k), *weights, *(t(n) for n in widths)], body


def k_loops(kernel):
    """The loops over K (CPU `%k`, GPU `%k0`; printed names get suffixes)."""
    return [o for o in kernel.walk() if o.name == "loop.for" and re.fullmatch(r"k0?(_\d+)?", o.body.args[0].name_hint or "")]


def ifs_inside(loops):
    return [o for f in loops for o in f.walk() if o.name == "loop.if"]


# --------------------------------------------------------------------------- numbers


@TARGETS
@pytest.mark.parametrize("widths", [(21, 30), (5, 40, 17)], ids=["2-pieces", "3-pieces"])
def test_concatenated_weights_and_bias_with_an_activation(hardware, tiles, widths):
    types, body = merged_siblings(widths)
    assert_lowering_matches(group_module("matmul", types, body, tiles), hardware)


@TARGETS
def test_transposed_and_batched_weights_concatenated_along_n(hardware, tiles):
    types, body = merged_siblings((9, 14, 6), k=7, m=10, activation=T.ReluOp, transpose_b=True, batch=(2,))
    assert_lowering_matches(group_module("matmul", types, body, tiles), hardware)


@TARGETS
def test_operands_concatenated_along_k_with_different_cuts(hardware, tiles):
    # A cuts K at 6, B at 5: three K ranges, each its own K loop.
    def body(b, a):
        x = concat(b, [a[0], a[1]], 1)
        w = concat(b, [a[2], a[3]], 0)
        return [op(b, T.MatmulOp, x, w)]

    module = group_module("matmul", [t(9, 6), t(9, 7), t(5, 10), t(8, 10)], body, tiles)
    lowered = assert_lowering_matches(module, hardware)
    kernel = next(o for o in lowered.walk() if o.name == "loop.kernel")
    assert len(k_loops(kernel)) == 3 and not ifs_inside(k_loops(kernel))


@TARGETS
def test_lhs_concatenated_along_m(hardware, tiles):
    def body(b, a):
        return [op(b, T.SigmoidOp, op(b, T.MatmulOp, concat(b, [a[0], a[1]], 0), a[2]))]

    module = group_module("matmul", [t(7, 6), t(12, 6), t(6, 9)], body, tiles)
    lowered = assert_lowering_matches(module, hardware)
    kernel = next(o for o in lowered.walk() if o.name == "loop.kernel")
    assert not ifs_inside(k_loops(kernel))


@TARGETS
def test_more_pieces_than_specialised_copies_keep_the_per_element_choice(hardware, tiles):
    widths = [1 + i % 3 for i in range(MAX_SPECIALISED_COPIES + 1)]
    types, body = merged_siblings(widths, k=5, m=6, activation=T.ReluOp)
    module = group_module("matmul", types, body, tiles)
    assert MatmulProblem.of(the_group(module)).piece_bounds()["n"] == (0, sum(widths))
    lowered = assert_lowering_matches(module, hardware)
    kernel = next(o for o in lowered.walk() if o.name == "loop.kernel")
    assert ifs_inside(k_loops(kernel))  # correct, but branching inside the K loop


# --------------------------------------------------------------------------- structure


@TARGETS
def test_the_piece_is_chosen_per_tile_outside_the_k_loop(hardware, tiles):
    widths = (21, 30, 9)
    types, body = merged_siblings(widths)
    lowered = lower_group(group_module("matmul", types, body, tiles), hardware)
    kernel = next(o for o in lowered.walk() if o.name == "loop.kernel")
    loops = k_loops(kernel)
    assert len(loops) == len(widths)  # one specialised K loop per piece
    assert not ifs_inside(loops)
    # Each K loop loads B from its own weight buffer only (arguments 1..3).
    weights = kernel.body.args[1 : 1 + len(widths)]
    for loop_op, weight in zip(loops, weights):
        read = {o.buffer for o in loop_op.walk() if o.name == "loop.load"} | {o.source for o in loop_op.walk() if o.name == "loop.copy_async"}
        assert weight in read and not (read & (set(weights) - {weight}))
    # The piece dispatch: a chain of len(widths) - 1 uniform branches on the
    # block (GPU) or worker (CPU) index, no other branch anywhere.
    branches = [o for o in kernel.walk() if o.name == "loop.if"]
    assert len(branches) == len(widths) - 1
    outer = "block.x" if hardware.is_gpu else "worker"
    for branch in branches:
        parent = branch.parent_op
        while parent.name == "loop.if":
            parent = parent.parent_op
        assert parent.name == "loop.parallel" and outer in parent.mapping


# --------------------------------------------------------------------------- the CPU backend


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("widths", [(21, 30), (5, 40, 17)], ids=["2-pieces", "3-pieces"])
def test_the_cpu_backend_runs_the_specialised_kernel_to_the_reference(private_cache, widths):
    from fusecc.runtime.cpu import compile_program

    types, body = merged_siblings(widths, k=37)
    module = group_module("matmul", types, body, {"tile.block": [16, 64]})
    lowered = lower_group(module, CPU)
    rng = np.random.default_rng(1)
    inputs = [random_input(a.type, rng) for a in module.lookup("main").body.args]
    (got,) = compile_program(lowered).run(inputs, "main")
    (interpreted,) = run_schedule(lowered, "main", inputs)
    (expected,) = evaluate(module, "main", inputs)
    np.testing.assert_allclose(got, interpreted, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
