"""Row reductions (softmax, layernorm, rmsnorm, reduce_*), fused, split or staged,
compute what the reference computes, on both targets."""

from __future__ import annotations

import pytest
from harness import HALF, REDUCTION, TARGETS, check_lowering, kernels, launches, parse

from fusecc.dialects import loop


def single_group(body: str, args: str, results: str, kind: str = "reduction") -> str:
    """@main(args) -> results around one group whose block takes the same args."""
    names = [a.split(":")[0].strip() for a in args.split(", ")]
    types = [a.split(":")[1].strip() for a in args.split(", ")]
    result_types = [t.strip() for t in results.split(", ")]
    inner = ", ".join(f"%i{n[1:]}: {t}" for n, t in zip(names, types))
    count = len(result_types)
    head = "%r" if count == 1 else f"%r:{count}"
    uses = "%r" if count == 1 else ", ".join(f"%r#{i}" for i in range(count))
    return f"""
func.func @main({args}) -> ({results}) {{
  {head} = fusion.group {", ".join(names)} {{kind = "{kind}"}} : ({", ".join(types)}) -> ({results}) {{
  ^bb0({inner}):
{body}
  }}
  func.return {uses} : {results}
}}
"""


CHAIN = single_group(
    """
    %m = tensor.reduce_max %ix {axes = [1], keepdims = true} : (tensor<8x48xf32>) -> tensor<8x1xf32>
    %s = tensor.sub %ix, %m : (tensor<8x48xf32>, tensor<8x1xf32>) -> tensor<8x48xf32>
    %e = tensor.exp %s : (tensor<8x48xf32>) -> tensor<8x48xf32>
    %t = tensor.reduce_sum %e {axes = [-1], keepdims = true} : (tensor<8x48xf32>) -> tensor<8x1xf32>
    %y = tensor.div %e, %t : (tensor<8x48xf32>, tensor<8x1xf32>) -> tensor<8x48xf32>
    %l = tensor.layernorm %y, %ig, %ib : (tensor<8x48xf32>, tensor<48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
    %q = tensor.softmax %l : (tensor<8x48xf32>) -> tensor<8x48xf32>
    %n = tensor.rmsnorm %q, %ig {epsilon = 0.001} : (tensor<8x48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
    fusion.yield %y, %n, %t : tensor<8x48xf32>, tensor<8x48xf32>, tensor<8x1xf32>""",
    "%x: tensor<8x48xf32>, %g: tensor<48xf32>, %b: tensor<48xf32>",
    "tensor<8x48xf32>, tensor<8x48xf32>, tensor<8x1xf32>",
)

LONG_ROWS = single_group(
    """
    %l = tensor.layernorm %ix, %ig, %ib : (tensor<4x300xf32>, tensor<300xf32>, tensor<300xf32>) -> tensor<4x300xf32>
    %q = tensor.softmax %l : (tensor<4x300xf32>) -> tensor<4x300xf32>
    %m = tensor.reduce_mean %q {axes = [1]} : (tensor<4x300xf32>) -> tensor<4xf32>
    fusion.yield %q, %m : tensor<4x300xf32>, tensor<4xf32>""",
    "%x: tensor<4x300xf32>, %g: tensor<300xf32>, %b: tensor<300xf32>",
    "tensor<4x300xf32>, tensor<4xf32>",
)

LEADING_AXES = single_group(
    """
    %s = tensor.reduce_sum %ix {axes = [0]} : (tensor<6x10xf32>) -> tensor<10xf32>
    %e = tensor.exp %iy : (tensor<3x4x5xf32>) -> tensor<3x4x5xf32>
    %m = tensor.reduce_max %e {axes = [0, 2], keepdims = true} : (tensor<3x4x5xf32>) -> tensor<1x4x1xf32>
    %n = tensor.reduce_min %iy {axes = [2, 0]} : (tensor<3x4x5xf32>) -> tensor<4xf32>
    fusion.yield %s, %m, %n : tensor<10xf32>, tensor<1x4x1xf32>, tensor<4xf32>""",
    "%x: tensor<6x10xf32>, %y: tensor<3x4x5xf32>",
    "tensor<10xf32>, tensor<1x4x1xf32>, tensor<4xf32>",
    kind="opaque",
)

# Row-local in disguise: softmax over columns, read transposed, needs each
# column's stats only while that column is the row being computed.
TRANSPOSED_ROWS = single_group(
    """
    %s = tensor.reduce_sum %ix {axes = [1]} : (tensor<6x6xf32>) -> tensor<6xf32>
    %d = tensor.sub %ix, %s : (tensor<6x6xf32>, tensor<6xf32>) -> tensor<6x6xf32>
    %q = tensor.softmax %d {axis = 0} : (tensor<6x6xf32>) -> tensor<6x6xf32>
    %t = tensor.transpose %q {perm = [1, 0]} : (tensor<6x6xf32>) -> tensor<6x6xf32>
    fusion.yield %t : tensor<6x6xf32>""",
    "%x: tensor<6x6xf32>",
    "tensor<6x6xf32>",
)

# numpy broadcasting aligns a row sum with the columns: row i needs all sums.
NOT_ROW_LOCAL = single_group(
    """
    %s = tensor.reduce_sum %ix {axes = [1]} : (tensor<6x6xf32>) -> tensor<6xf32>
    %d = tensor.sub %ix, %s : (tensor<6x6xf32>, tensor<6xf32>) -> tensor<6x6xf32>
    %q = tensor.softmax %d : (tensor<6x6xf32>) -> tensor<6x6xf32>
    fusion.yield %q : tensor<6x6xf32>""",
    "%x: tensor<6x6xf32>",
    "tensor<6x6xf32>",
)

KEEPDIMS_AND_SCALARS = single_group(
    """
    %s = tensor.reduce_sum %ix {axes = [1]} : (tensor<4x6xf32>) -> tensor<4xf32>
    %r = tensor.reshape %s : (tensor<4xf32>) -> tensor<4x1xf32>
    %d = tensor.sub %ix, %r : (tensor<4x6xf32>, tensor<4x1xf32>) -> tensor<4x6xf32>
    %a = tensor.reduce_mean %d : (tensor<4x6xf32>) -> tensor<f32>
    fusion.yield %d, %a : tensor<4x6xf32>, tensor<f32>""",
    "%x: tensor<4x6xf32>",
    "tensor<4x6xf32>, tensor<f32>",
)

INTEGERS = single_group(
    """
    %s = tensor.reduce_sum %in {axes = [1]} : (tensor<5x9xi32>) -> tensor<5xi32>
    %m = tensor.reduce_max %in {axes = [1], keepdims = true} : (tensor<5x9xi32>) -> tensor<5x1xi32>
    %z = tensor.constant {value = dense<3> : tensor<i32>} : () -> tensor<i32>
    %c = tensor.cmp %in, %z {predicate = "gt"} : (tensor<5x9xi32>, tensor<i32>) -> tensor<5x9xi1>
    %any = tensor.reduce_max %c {axes = [1]} : (tensor<5x9xi1>) -> tensor<5xi1>
    %all = tensor.reduce_min %c {axes = [1]} : (tensor<5x9xi1>) -> tensor<5xi1>
    %d = tensor.sub %in, %m : (tensor<5x9xi32>, tensor<5x1xi32>) -> tensor<5x9xi32>
    fusion.yield %s, %d, %any, %all : tensor<5xi32>, tensor<5x9xi32>, tensor<5xi1>, tensor<5xi1>""",
    "%n: tensor<5x9xi32>",
    "tensor<5xi32>, tensor<5x9xi32>, tensor<5xi1>, tensor<5xi1>",
)

# Three stats of two types reduced in one pass over rows of two warps.
MANY_STATS = single_group(
    """
    %s = tensor.reduce_sum %ix {axes = [1]} : (tensor<3x300xf32>) -> tensor<3xf32>
    %m = tensor.reduce_max %ix {axes = [1]} : (tensor<3x300xf32>) -> tensor<3xf32>
    %z = tensor.constant {value = dense<2.5> : tensor<f32>} : () -> tensor<f32>
    %c = tensor.cmp %ix, %z {predicate = "gt"} : (tensor<3x300xf32>, tensor<f32>) -> tensor<3x300xi1>
    %any = tensor.reduce_max %c {axes = [1]} : (tensor<3x300xi1>) -> tensor<3xi1>
    fusion.yield %s, %m, %any : tensor<3xf32>, tensor<3xf32>, tensor<3xi1>""",
    "%x: tensor<3x300xf32>",
    "tensor<3xf32>, tensor<3xf32>, tensor<3xi1>",
)

HALF_NORM = single_group(
    """
    %l = tensor.layernorm %ix, %ig, %ib : (tensor<2x3x40xf16>, tensor<40xf16>, tensor<40xf16>) -> tensor<2x3x40xf16>
    %q = tensor.softmax %l : (tensor<2x3x40xf16>) -> tensor<2x3x40xf16>
    fusion.yield %q : tensor<2x3x40xf16>""",
    "%x: tensor<2x3x40xf16>, %g: tensor<40xf16>, %b: tensor<40xf16>",
    "tensor<2x3x40xf16>",
)

PROGRAMS = {
    "chain": CHAIN,
    "long_rows": LONG_ROWS,
    "leading_axes": LEADING_AXES,
    "transposed_rows": TRANSPOSED_ROWS,
    "not_row_local": NOT_ROW_LOCAL,    "keepdims": KEEPDIMS_AND_SCALARS,
    "many_stats": MANY_STATS,
    "integers": INTEGERS,
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_reduction_groups_match_the_reference(name, target):
    check_lowering(parse(PROGRAMS[name]), target, REDUCTION)


@pytest.mark.parametrize("target", TARGETS)
def test_f16_norms(target):
    check_lowering(parse(HALF_NORM), target, HALF)


def ops_of(kernel, cls):
    return [op for op in kernel.walk() if isinstance(op, cls)]


def test_short_rows_reduce_within_a_warp_without_shared_memory():
    # 48 elements a row: 8 threads per row, 8 rows in a 64-thread block
    (kernel,) = kernels(check_lowering(parse(CHAIN), "h200"))
    assert kernel.launch_dims() == ((1, 1, 1), (64, 1, 1))
    assert not ops_of(kernel, loop.BarrierOp) and not ops_of(kernel, loop.AllocOp)
    assert {op.offset for op in ops_of(kernel, loop.ShuffleXorOp)} == {4, 2, 1}


def test_rows_of_several_warps_combine_through_shared_memory():
    # 300 elements a row: 64 threads per row, 4 rows in a 256-thread block
    (kernel,) = kernels(check_lowering(parse(LONG_ROWS), "h200"))
    assert kernel.launch_dims() == ((1, 1, 1), (256, 1, 1))
    (partials,) = ops_of(kernel, loop.AllocOp)
    assert partials.result.type.memory_space == "shared" and partials.result.type.shape == (1, 8)
    assert ops_of(kernel, loop.BarrierOp)


def test_stats_of_one_level_share_a_loop_and_the_partial_buffers():
    (kernel,) = kernels(check_lowering(parse(MANY_STATS), "h200"))
    loops = [op for op in kernel.walk() if isinstance(op, loop.ForOp) and len(op.results) == 3]
    assert len(loops) == 1  # sum, max and any in one pass over the row
    shared = sorted((str(a.result.type)) for a in ops_of(kernel, loop.AllocOp))
    assert shared == ["memref<3x8xf32, shared>", "memref<3x8xi1, shared>"]


@pytest.mark.parametrize("target", TARGETS)
def test_long_rows_split_over_several_blocks(target):
    """layernorm (2 stat levels) then softmax (2 more) then a mean: 5 levels, 6 kernels."""
    threads = " threads=64" if target == "h200" else ""  # two warps a block: partials in shared memory, and fast to interpret
    lowered = check_lowering(parse(LONG_ROWS), target, REDUCTION, extra=f"tile{{target={target} split=3{threads}}}")
    names = launches(lowered)
    assert names == [f"fused_0_reduction_level{i}" for i in range(5)] + ["fused_0_reduction"]
    first = lowered.lookup(names[0])
    outer = next(op for op in first.body if isinstance(op, loop.ParallelOp))
    assert outer.upper == [4 * 3]  # rows x chunks


@pytest.mark.parametrize("target", TARGETS)
def test_rows_that_read_other_rows_are_staged(target):
    lowered = check_lowering(parse(NOT_ROW_LOCAL), target)
    # sum (level 0), then the softmax's max and sum (levels 1, 2), then the outputs
    assert launches(lowered) == ["fused_0_reduction_level0", "fused_0_reduction_level1", "fused_0_reduction_level2", "fused_0_reduction"]


def test_row_locality_is_decided_by_the_indices_not_the_shapes():
    assert launches(check_lowering(parse(TRANSPOSED_ROWS), "h200")) == ["fused_0_reduction"]


def test_cpu_rows_accumulate_partials_in_lanes_and_fold_them_as_a_tree():
    (kernel,) = kernels(check_lowering(parse(LONG_ROWS), "cpu"))
    outer = next(op for op in kernel.body if isinstance(op, loop.ParallelOp))
    assert outer.mapping == ["worker"] and outer.upper == [4]
    lanes = ops_of(kernel, loop.AllocOp)
    # rows of 300: 64 lanes (four registers of partials), 4 chunks and a scalar tail of 44
    assert lanes and all(a.result.type.memory_space == "local" and a.result.type.shape == (64,) for a in lanes)
    vectors = [op for op in ops_of(kernel, loop.ParallelOp) if op.mapping == ["vector"]]
    # clearing and chunks of 64, the fold (32, 16, ..., 1), the outputs (300)
    assert {op.upper[0] for op in vectors} == {64, 32, 16, 8, 4, 2, 1, 300}
    for v in vectors:  # straight-line vector bodies
        assert not any(isinstance(op, (loop.ForOp, loop.ParallelOp)) for op in v.walk(include_self=False))


SOFTMAX_ROWS = single_group(
    """
    %q = tensor.softmax %ix : (tensor<4x300xf32>) -> tensor<4x300xf32>
    %h = tensor.cast %q : (tensor<4x300xf32>) -> tensor<4x300xf16>
    fusion.yield %q, %h : tensor<4x300xf32>, tensor<4x300xf16>""",
    "%x: tensor<4x300xf32>",
    "tensor<4x300xf32>, tensor<4x300xf16>",
)


def exps_in(op) -> int:
    return sum(1 for inner in op.walk(include_self=False) if inner.name == "math.exp")


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_outputs_match_the_reference(target):
    check_lowering(parse(SOFTMAX_ROWS), target, REDUCTION)


def test_cpu_softmax_keeps_its_exponentials_in_the_output_row():
    """exp(x - max) is stored into the f32 output while it is summed; the
    output pass reads it back (no second exp) and divides in place."""
    (kernel,) = kernels(check_lowering(parse(SOFTMAX_ROWS), "cpu", REDUCTION))
    out = kernel.body.args[1]
    (output_loop,) = [op for op in ops_of(kernel, loop.ParallelOp) if op.upper == [300]]
    assert exps_in(output_loop) == 0
    assert any(isinstance(op, loop.LoadOp) and op.buffer is out for op in output_loop.walk())
    summing = [op for op in ops_of(kernel, loop.ParallelOp) if op.upper == [64] and exps_in(op)]
    assert summing and any(isinstance(op, loop.StoreOp) and op.buffer is out for op in summing[0].walk())
    assert exps_in(kernel) == 2  # the summing chunks and their scalar tail


def test_cpu_softmax_without_an_f32_output_keeps_its_exponentials_in_a_local_row():
    (kernel,) = kernels(check_lowering(parse(HALF_NORM), "cpu", HALF))
    kept = [a for a in ops_of(kernel, loop.AllocOp) if a.result.name_hint == "kept_sum"]
    assert [a.result.type.shape for a in kept] == [(40,)]
    output_loops = [op for op in ops_of(kernel, loop.ParallelOp) if op.upper == [40]]
    assert output_loops and all(exps_in(op) == 0 for op in output_loops)


def test_gpu_softmax_recomputes_its_exponentials():
    (kernel,) = kernels(check_lowering(parse(SOFTMAX_ROWS), "h200", REDUCTION))
    assert exps_in(kernel) == 2  # the sum and the outputs
