"""The matmul template gives the reference's numbers, on GPU and CPU mappings.

Groups are lowered by the template alone and run in the loop interpreter
(GPU thread semantics included), with small tiles so that shapes overhang
them and every boundary guard is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest
from template_harness import assert_lowering_matches, group_module, lower_group

from fusecc.passes.backends.hardware import CPU, H200
from fusecc.compiler.types import TensorType, f16, f32, i32
from fusecc.dialects import tensor as T
from fusecc.passes.lowering.matmul import (
    GpuMatmulTiles,
    MatmulProblem,
    check_gpu_tiles,
    gpu_matmul_resources,
    gpu_matmul_tiles,
)
from fusecc.passes.lowering.scalar_emitter import LoweringError

TARGETS = pytest.mark.parametrize(
    "hardware, tiles",
    [
        (H200, {"tile.block": [8, 8], "tile.k": 4, "tile.threads": 16}),
        # 12 threads: the b tile (4x8) takes three staging rounds, the last one partly filled.
        (H200, {"tile.block": [6, 8], "tile.k": 4, "tile.threads": 12}),
        # Worker blocks of 8 rows (two 4-row register blocks) by one 32-wide vector panel.
        (CPU, {"tile.block": [8, 32]}),
    ],
    ids=["h200", "h200-odd-threads", "cpu"],
)


def t(*shape, element=f32):
    return TensorType(shape, element)


def matmul(b, x, y, **attrs):
    return b.create(T.MatmulOp, [x, y], attrs or None).result


def op(b, cls, *operands, **attrs):
    return b.create(cls, list(operands), attrs or None).result


@TARGETS
def test_bias_gelu_on_shapes_the_tiles_do_not_divide(hardware, tiles):
    module = group_module(
        "matmul",
        [t(13, 19), t(19, 17), t(17)],
        lambda b, a: [op(b, T.GeluOp, op(b, T.AddOp, matmul(b, a[0], a[1]), a[2]))],
        tiles,
    )
    assert_lowering_matches(module, hardware)


@TARGETS
def test_batched_with_broadcast_batch(hardware, tiles):
    module = group_module("matmul", [t(2, 1, 5, 6), t(3, 6, 9)], lambda b, a: [op(b, T.ReluOp, matmul(b, a[0], a[1]))], tiles)
    assert_lowering_matches(module, hardware)


@TARGETS
@pytest.mark.parametrize("transpose_a, transpose_b", [(True, False), (False, True), (True, True)])
def test_transposed_operands(hardware, tiles, transpose_a, transpose_b):
    m, k, n = 9, 6, 10
    a = t(k, m) if transpose_a else t(m, k)
    bt = t(2, n, k) if transpose_b else t(2, k, n)
    module = group_module("matmul", [a, bt], lambda b, x: [matmul(b, x[0], x[1], transpose_a=transpose_a, transpose_b=transpose_b)], tiles)
    assert_lowering_matches(module, hardware)


@TARGETS
@pytest.mark.parametrize("a, b", [((6,), (6, 7)), ((5, 6), (6,)), ((2, 5, 6), (6,)), ((6,), (2, 6, 7)), ((6,), (6,))], ids=str)
def test_vector_operands_are_promoted_as_numpy_does(hardware, tiles, a, b):
    module = group_module("matmul", [t(*a), t(*b)], lambda bld, x: [matmul(bld, x[0], x[1])], tiles)
    assert_lowering_matches(module, hardware)


@TARGETS
def test_residual_and_cast_to_f16_yielding_the_product_too(hardware, tiles):
    def body(b, a):
        product = matmul(b, a[0], a[1])
        summed = op(b, T.AddOp, product, a[2])
        return [product, b.create(T.CastOp, [summed], result_types=[t(11, 10, element=f16)]).result]

    module = group_module("matmul", [t(11, 7), t(7, 10), t(11, 10)], body, tiles)
    assert_lowering_matches(module, hardware, rtol=1e-3, atol=1e-3)


@TARGETS
def test_f16_operands_with_a_prologue_that_is_not_zero_at_zero(hardware, tiles):
    # exp(0) = 1: padding past K must still contribute nothing, on both sides.
    def body(b, a):
        return [matmul(b, op(b, T.ExpOp, a[0]), op(b, T.SigmoidOp, a[1]))]

    module = group_module("matmul", [t(5, 7, element=f16), t(7, 9, element=f16)], body, tiles)
    assert_lowering_matches(module, hardware, rtol=2e-3, atol=2e-3)


@TARGETS
def test_integer_matmul_is_exact(hardware, tiles):
    module = group_module("matmul", [t(5, 7, element=i32), t(7, 9, element=i32)], lambda b, a: [matmul(b, a[0], a[1])], tiles)
    assert_lowering_matches(module, hardware, rtol=0, atol=0)


@TARGETS
def test_head_split_in_the_epilogue_is_an_index_map(hardware, tiles):
    # x @ w + bias -> [B*S, H*D] -> [B, S, H, D] -> [B, H, S, D]
    def body(b, a):
        y = op(b, T.AddOp, matmul(b, a[0], a[1]), a[2])
        split = b.create(T.ReshapeOp, [y], result_types=[t(2, 3, 2, 5)]).result
        return [op(b, T.TransposeOp, split, perm=[0, 2, 1, 3])]

    module = group_module("matmul", [t(6, 4), t(4, 10), t(10)], body, tiles)
    assert_lowering_matches(module, hardware)


def test_gpu_tiles_whose_rows_hold_whole_staging_rounds():
    # 16 threads stage the 4x32 b tile as two rounds of half rows each.
    module = group_module("matmul", [t(11, 9), t(9, 40)], lambda b, a: [matmul(b, a[0], a[1])], {"tile.block": [16, 32], "tile.k": 4, "tile.threads": 16})
    assert_lowering_matches(module, H200)


def test_cpu_blocks_and_panels_that_overhang_the_matrix():
    # 37 rows = 32 + 5 in blocks of two 16-row register tiles (a ragged block
    # and a ragged tile), 70 columns = 64 + 6 in blocks of four 16-wide panels
    # (a ragged block and a ragged panel).
    module = group_module("matmul", [t(37, 5), t(5, 70), t(37, 70)], lambda b, a: [op(b, T.SubOp, matmul(b, a[0], a[1]), a[2])], {"tile.block": [32, 64]})
    lowered = assert_lowering_matches(module, CPU)
    (worker,) = [o for o in lowered.walk() if o.name == "loop.parallel" and o.mapping == ["worker"]]
    assert worker.upper == [4]


def kernel_names(lowered) -> list[str]:
    return [o.sym_name for o in lowered.body if o.name == "loop.kernel"]


@pytest.mark.parametrize(
    "shapes, attrs",
    [
        ([t(37, 24), t(24, 70)], {}),
        ([t(2, 37, 24), t(70, 24)], {"transpose_b": True}),  # B broadcast over the batch, stored [N, K]
        ([t(3, 24, 37), t(3, 24, 45)], {"transpose_a": True}),
    ],
    ids=["plain", "batched-a-transposed-b", "transposed-a"],
)
def test_cpu_packs_operands_with_prologues_into_panels(shapes, attrs):
    """Operands computed in the group: kernels `_pack_a` and `_pack_b` copy
    A and B (prologue applied, zero past M and N) into panels of MR rows
    and NR columns in the arena first; the product reads them unguarded."""
    from fusecc.passes.tiling.cpu_matmul_tiles import CPU_MICRO_ROWS, CPU_MICRO_VECTORS

    def body(b, a):
        # prologues on A and B, computed while packing
        return [op(b, T.GeluOp, matmul(b, op(b, T.MulOp, a[0], a[0]), op(b, T.MulOp, a[1], a[1]), **attrs))]

    module = group_module("matmul", shapes, body)
    lowered = assert_lowering_matches(module, CPU)
    assert kernel_names(lowered) == ["fused_0_matmul_pack_a", "fused_0_matmul_pack_b", "fused_0_matmul"]
    product = lowered.lookup("fused_0_matmul")
    packed = [a.type for a in product.body.args[-2:]]
    m = shapes[0].shape[-1] if attrs.get("transpose_a") else shapes[0].shape[-2]
    n = shapes[1].shape[-2] if attrs.get("transpose_b") else shapes[1].shape[-1]
    mr, nr = CPU_MICRO_ROWS, CPU_MICRO_VECTORS * CPU.warp_size
    assert [p.shape[1:] for p in packed] == [(-(-m // mr), 24, mr), (-(-n // nr), 24, nr)]
    # the product reads A and B only through the panels (B's prologue is in _pack_b)
    a_arg, b_arg = product.body.args[:2]
    assert not any(o.name == "loop.load" and o.operands[0] in (a_arg, b_arg) for o in product.walk())
    views = [o for o in lowered.lookup("main").walk() if o.name == "loop.arena_view"]
    assert len(views) == 2


def test_cpu_short_rows_are_not_packed():
    module = group_module("matmul", [t(37, 24), t(24, 70)], lambda b, a: [matmul(b, a[0], a[1])])
    assert kernel_names(assert_lowering_matches(module, CPU)) == ["fused_0_matmul"]


def test_cpu_long_rows_pack_b_only(monkeypatch):
    """Rows of PACK_ROW_BYTES or more (the threshold is lowered here so
    that the interpreter stays quick): B is packed, A read in place."""
    import fusecc.passes.lowering.matmul as templates

    monkeypatch.setattr(templates, "PACK_ROW_BYTES", 64)
    module = group_module("matmul", [t(37, 24), t(24, 70)], lambda b, a: [matmul(b, a[0], a[1])])
    assert kernel_names(assert_lowering_matches(module, CPU)) == ["fused_0_matmul_pack_b", "fused_0_matmul"]


def test_cpu_packs_an_operand_with_a_prologue():
    """B scaled by a constant: `_pack_b` evaluates the prologue once per
    element, the product reads plain panels. (Pieces concatenated along K
    are no prologue: the product's K loops read them piece by piece.)"""

    def scaled(b, a):
        c = b.insert(T.ConstantOp.of(np.float32(0.5), t())).result
        return [matmul(b, a[0], op(b, T.MulOp, a[1], c))]

    def stacked(b, a):
        return [matmul(b, a[0], b.create(T.ConcatOp, [a[1], a[2]], {"axis": 0}).result)]

    lowered = assert_lowering_matches(group_module("matmul", [t(37, 24), t(24, 30)], scaled), CPU)
    assert kernel_names(lowered) == ["fused_0_matmul_pack_b", "fused_0_matmul"]
    product = lowered.lookup("fused_0_matmul")
    assert not any(o.name == "loop.load" and o.operands[0] is product.body.args[1] for o in product.walk())
    stacked_module = group_module("matmul", [t(37, 24), t(10, 30), t(14, 30)], stacked)
    assert kernel_names(assert_lowering_matches(stacked_module, CPU)) == ["fused_0_matmul"]


def test_cpu_pieces_are_read_directly_or_packed_on_panel_edges(monkeypatch):
    """Sibling weights concatenated along N (the merged Q/K/V projection)
    are spans of the output (piece_bounds), each reading its piece: no pack
    kernel for short rows. Long rows (threshold lowered here) pack B, when
    every piece is whole panels (32 + 32 columns), not otherwise (30 + 20)."""
    import fusecc.passes.lowering.matmul as templates

    def body(b, a):
        return [matmul(b, a[0], b.create(T.ConcatOp, [a[1], a[2]], {"axis": 1}).result)]

    aligned = [t(37, 24), t(24, 32), t(24, 32)]
    assert kernel_names(assert_lowering_matches(group_module("matmul", aligned, body), CPU)) == ["fused_0_matmul"]
    monkeypatch.setattr(templates, "PACK_ROW_BYTES", 64)
    packed = assert_lowering_matches(group_module("matmul", aligned, body), CPU)
    assert kernel_names(packed) == ["fused_0_matmul_pack_b", "fused_0_matmul"]
    ragged = assert_lowering_matches(group_module("matmul", [t(37, 24), t(24, 30), t(24, 20)], body), CPU)
    assert kernel_names(ragged) == ["fused_0_matmul"]


@TARGETS
def test_a_constant_in_both_prologue_and_epilogue(hardware, tiles):
    # One constant vector scales A's columns (inside the K loop) and is added
    # to the result's columns (after it).
    def body(b, a):
        c = b.insert(T.ConstantOp.of(np.arange(1, 7, dtype=np.float32) / 4, t(6))).result
        return [op(b, T.AddOp, matmul(b, op(b, T.MulOp, a[0], c), a[1]), c)]

    module = group_module("matmul", [t(5, 6), t(6, 6)], body, tiles)
    assert_lowering_matches(module, hardware)


def test_an_epilogue_that_reduces_the_product_is_refused():
    module = group_module("matmul", [t(4, 4), t(4, 4)], lambda b, a: [op(b, T.ReduceSumOp, matmul(b, a[0], a[1]), axes=[1])])
    with pytest.raises(LoweringError, match="tensor.reduce_sum.*cannot consume the matmul result"):
        lower_group(module, H200)


def test_an_epilogue_that_reads_another_element_is_refused():
    def body(b, a):
        product = matmul(b, a[0], a[1])
        return [op(b, T.AddOp, product, op(b, T.TransposeOp, product, perm=[1, 0]))]

    module = group_module("matmul", [t(4, 4), t(4, 4)], body)
    with pytest.raises(LoweringError, match="at another element"):
        lower_group(module, CPU)


def test_a_group_yielding_a_value_not_computed_from_the_product_is_refused():
    module = group_module("matmul", [t(4, 4), t(4, 4)], lambda b, a: [matmul(b, a[0], a[1]), op(b, T.ExpOp, a[0])])
    with pytest.raises(LoweringError, match="not computed from the matmul result"):
        lower_group(module, H200)


# --------------------------------------------------------------------------- tiles and resources


def test_default_tiles_fit_the_h200_and_say_what_they_use():
    module = group_module("matmul", [t(1024, 1024), t(1024, 1024)], lambda b, a: [matmul(b, a[0], a[1])])
    group = next(o for o in module.walk() if o.name == "fusion.group")
    tiles = gpu_matmul_tiles(group, MatmulProblem.of(group), H200)
    # 128×64 tiles would leave 4 of the 132 SMs idle (128 blocks): the fullest tile that fills them, double-buffered
    assert tiles == GpuMatmulTiles(64, 64, 32, 128, stages=2) and tiles.micro_tile == (4, 8)
    resources = check_gpu_tiles(tiles, f32, H200)
    assert resources.threads == 128
    assert resources.shared_bytes == 2 * (64 + 64 + 2 * 4) * 32 * 4  # two stages, rows padded by 4 words at most
    # + a 64-bit address per cp.async in flight: (64 + 64) x 32 elements over 128 threads
    assert resources.registers_per_thread == 4 * 8 + 4 + 8 + 32 + 2 * 32


def test_tiles_the_hardware_cannot_hold_are_refused():
    with pytest.raises(LoweringError, match="registers per thread"):
        check_gpu_tiles(GpuMatmulTiles(256, 256, 8, 256), f32, H200)
    with pytest.raises(LoweringError, match="bytes of shared memory"):
        check_gpu_tiles(GpuMatmulTiles(128, 128, 256, 256), f32, H200)
    with pytest.raises(LoweringError, match="threads per block"):
        check_gpu_tiles(GpuMatmulTiles(128, 128, 8, 4096), f32, H200)
    with pytest.raises(LoweringError, match="equal rectangles"):
        check_gpu_tiles(GpuMatmulTiles(64, 64, 8, 96), f32, H200)
    assert GpuMatmulTiles(128, 128, 8, 256).micro_tile == (8, 8)
    assert GpuMatmulTiles(64, 64, 32, 128).micro_tile == (4, 8)
    assert gpu_matmul_resources(GpuMatmulTiles(128, 128, 8, 256), f32).registers_per_thread == 64 + 16 + 32


def test_the_gpu_kernel_has_the_tiled_structure():
    module = group_module(
        "matmul", [t(13, 19), t(19, 17)], lambda b, a: [matmul(b, a[0], a[1])], {"tile.block": [8, 8], "tile.k": 4, "tile.threads": 16}
    )
    lowered = lower_group(module, H200)
    (kernel,) = [o for o in lowered.walk() if o.name == "loop.kernel"]
    assert kernel.launch_dims() == ((3, 2, 1), (16, 1, 1))
    # two stages of a k-major 4x(8 + 4) A tile (rows padded: A has k fastest) and a 4x8 B tile
    assert kernel.shared_memory_bytes() == 2 * 4 * (8 + 4) * 4 + 2 * 4 * 8 * 4
    assert sum(o.name == "loop.barrier" for o in kernel.walk()) == 2
    # on sm_90 the operands travel by cp.async, double-buffered: one group in flight while a tile is multiplied
    copies = [o for o in kernel.walk() if o.name == "loop.copy_async"]
    assert copies and all(o.guard is not None for o in copies)  # 13, 17 and 19 overhang every tile
    assert [o.attr("pending") for o in kernel.walk() if o.name == "loop.async_wait"] == [1, 0]  # and none in flight past the loop
    assert not [o for o in kernel.walk() if o.name == "loop.load" and o.buffer.type.memory_space == "global"]
