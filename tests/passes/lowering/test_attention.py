"""The flash-attention template gives the reference's numbers, on GPU and CPU
mappings, and never holds a score matrix."""

from __future__ import annotations

import math

import numpy as np
import pytest
from template_harness import assert_lowering_matches, group_module, lower_group, memrefs

from fusecc.passes.backends.hardware import CPU, H200
from fusecc.compiler.types import TensorType, f16, f32
from fusecc.dialects import tensor as T
from fusecc.passes.lowering.attention import AttentionProblem, attention_tiles
from fusecc.passes.lowering.attention_gpu import check_gpu_attention_tiles
from fusecc.passes.lowering.scalar_emitter import LoweringError

TARGETS = pytest.mark.parametrize(
    "hardware, tiles",
    [
        (H200, {"tile.block": [4, 4], "tile.threads": 8}),  # 2 threads per query row
        (H200, {"tile.block": [2, 8], "tile.threads": 8}),  # 4 threads per row, 2 query rows
        (CPU, {"tile.block": [4, 4]}),  # 4-row groups; S = 5 leaves a group of 1 row and 3 past the end
    ],
    ids=["h200", "h200-4-per-row", "cpu"],
)


def t(*shape, element=f32):
    return TensorType(shape, element)


def attention(b, q, k, v, mask=None, **attrs):
    return b.create(T.AttentionOp, [q, k, v] + ([mask] if mask is not None else []), attrs or None).result


@TARGETS
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
def test_mask_causal_and_unequal_lengths_and_head_sizes(hardware, tiles, causal, masked):
    # S=5 queries, T=7 keys, D=4, Dv=3: no tile divides anything.
    types = [t(2, 5, 4), t(2, 7, 4), t(2, 7, 3)] + ([t(5, 7)] if masked else [])
    module = group_module("attention", types, lambda b, a: [attention(b, *a, causal=causal)], tiles)
    assert_lowering_matches(module, hardware)


@TARGETS
def test_causal_with_more_queries_than_keys(hardware, tiles):
    module = group_module("attention", [t(7, 4), t(5, 4), t(5, 4)], lambda b, a: [attention(b, *a, causal=True, scale=0.7)], tiles)
    assert_lowering_matches(module, hardware)


@TARGETS
def test_broadcast_batch_and_padding_mask(hardware, tiles):
    # Multi-query attention: one k/v head for two query heads; a per-batch key-padding mask.
    types = [t(2, 2, 5, 4), t(2, 1, 6, 4), t(2, 1, 6, 4), t(2, 1, 1, 6)]
    module = group_module("attention", types, lambda b, a: [attention(b, *a)], tiles)
    assert_lowering_matches(module, hardware)


@TARGETS
def test_a_fully_masked_first_key_tile_gives_no_nan(hardware, tiles):
    # The mask is a constant of the group: -inf for the first four keys, so
    # each row's first tile (of four keys) is all -inf.
    def body(b, a):
        mask = T.ConstantOp.of(np.where(np.arange(6) < 4, -np.inf, 0.0).astype(np.float32).reshape(1, 6), t(1, 6))
        return [attention(b, *a, b.insert(mask).result)]

    module = group_module("attention", [t(5, 4), t(6, 4), t(6, 2)], body, tiles)
    assert_lowering_matches(module, hardware)


def split_heads(b, x, heads: int):
    batch, seq, width = x.type.shape
    split = b.create(T.ReshapeOp, [x], result_types=[t(batch, seq, heads, width // heads, element=x.type.element_type)]).result
    return b.create(T.TransposeOp, [split], {"perm": [0, 2, 1, 3]}).result


def merge_heads(b, x):
    batch, heads, seq, width = x.type.shape
    merged = b.create(T.TransposeOp, [x], {"perm": [0, 2, 1, 3]}).result
    return b.create(T.ReshapeOp, [merged], result_types=[t(batch, seq, heads * width, element=x.type.element_type)]).result


@TARGETS
def test_head_split_and_merge_are_index_maps(hardware, tiles):
    def body(b, a):
        q, k, v = (split_heads(b, x, 2) for x in a)
        return [merge_heads(b, attention(b, q, k, v, causal=True))]

    module = group_module("attention", [t(2, 5, 8), t(2, 6, 8), t(2, 6, 6)], body, tiles)
    lowered = assert_lowering_matches(module, hardware)
    assert {m.shape for m in memrefs(lowered) if m.memory_space == "global"} == {(2, 5, 8), (2, 6, 8), (2, 6, 6), (2, 5, 6)}


@TARGETS
def test_f16_inputs_with_a_cast_epilogue(hardware, tiles):
    def body(b, a):
        out = attention(b, *a, scale=0.3)
        return [b.create(T.CastOp, [out], result_types=[t(6, 3, element=f32)]).result]

    module = group_module("attention", [t(6, 4, element=f16), t(9, 4, element=f16), t(9, 3, element=f16)], body, tiles)
    assert_lowering_matches(module, hardware, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("hardware", [H200, CPU], ids=["h200", "cpu"])
def test_memory_is_linear_in_the_sequence_length(hardware):
    """No buffer anywhere holds S×T elements (types only; nothing runs)."""
    s = n = 1024
    types = [t(8, s, 64), t(8, n, 64), t(8, n, 64), t(s, n)]
    module = group_module("attention", types, lambda b, a: [attention(b, *a, causal=True)])
    lowered = lower_group(module, hardware)
    internal = [m for m in memrefs(lowered) if m.memory_space != "global"]
    assert internal, "the kernel stages tiles"
    assert max(m.num_elements for m in internal) <= 2 * 64 * 68  # two buffers (cp.async) of 64 keys x 64, rows padded to 68 words
    scores = [m for m in memrefs(lowered) if m.num_elements >= s * n and m.shape != (s, n)]  # the mask input is S×T by itself
    assert scores == []


def test_default_gpu_tiles_fit_the_h200():
    module = group_module("attention", [t(16, 512, 64)] * 3, lambda b, a: [attention(b, *a)])
    group = next(o for o in module.walk() if o.name == "fusion.group")
    problem = AttentionProblem.of(group)
    tiles = attention_tiles(group, problem, H200)
    resources = check_gpu_attention_tiles(tiles, problem, H200)
    # 64-row tiles would be 128 blocks, short of the 132 SMs: 256 blocks of 32
    # rows over two warps give every SM one (8 lanes per row group, still 4 rows per thread).
    assert (tiles.block_q, tiles.block_t, tiles.threads) == (32, 64, 64)
    assert (tiles.threads_per_row, tiles.rows_per_thread) == (8, 4)
    assert tiles.stages == 2  # k and v double-buffered (cp.async, sm_90)
    assert resources.shared_bytes == (32 * 68 + 2 * 64 * (68 + 64) + 32 * (64 + 8)) * 4  # q, 2 x (k, v), p; float4 rows of 68 words
    assert resources.registers_per_thread == 4 * (8 + 8 + 3 + 4) + 32  # per row: scores, outputs, m, l, base, a q float4
    assert problem.scale == pytest.approx(1 / math.sqrt(64))


@pytest.mark.parametrize("threads", [12, 2], ids=["uneven", "fewer-than-rows"])
def test_threads_that_do_not_split_rows_evenly_are_refused(threads):
    module = group_module("attention", [t(16, 8)] * 3, lambda b, a: [attention(b, *a)], {"tile.block": [4, 4], "tile.threads": threads})
    with pytest.raises(LoweringError, match="each taking the same number of the 4 query rows"):
        lower_group(module, H200)


def test_an_epilogue_that_reduces_the_output_is_refused():
    module = group_module("attention", [t(4, 4)] * 3, lambda b, a: [b.create(T.ReduceMaxOp, [attention(b, *a)], {"axes": [0]}).result])
    with pytest.raises(LoweringError, match="tensor.reduce_max.*cannot consume the attention result"):
        lower_group(module, CPU)
