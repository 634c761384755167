"""The CPU matmul's worker blocks split evenly over the cores
(`cpu_matmul_tiles.balanced_block_n`), and the kernels built with the
balanced blocks agree with the reference.

The runtime hands each thread one contiguous run of a launch's worker
iterations (`executor.split_range`); the lowering numbers the MC×NC blocks
batch, row block, column block, the column fastest. The balance is checked
against that split here, not against the chooser's own model of it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fusecc.compiler.parser import parse_module
from fusecc.dialects import tensor as T
from fusecc.passes.backends.hardware import CPU, CPU_AVX2
from fusecc.passes.tiling.contraction_shapes import MatmulShape
from fusecc.passes.tiling.cpu_matmul_tiles import CPU_BLOCK, choose_cpu_matmul_tiles
from fusecc.passes.tiling.shapes import ceil_div
from fusecc.runtime.cpu.executor import split_range
from numerics import salted  # tests/numerics.py


def matmul_shape(batch: int, m: int, k: int, n: int) -> MatmulShape:
    lead = f"{batch}x" if batch > 1 else ""
    x, w, y = f"tensor<{lead}{m}x{k}xf32>", f"tensor<{k}x{n}xf32>", f"tensor<{lead}{m}x{n}xf32>"
    module = parse_module(f"func.func @main(%x: {x}, %w: {w}) -> {y} {{\n  %y = tensor.matmul %x, %w : ({x}, {w}) -> {y}\n  func.return %y : {y}\n}}\n")
    (op,) = [op for op in module.walk() if isinstance(op, T.MatmulOp)]
    return MatmulShape.of_op(op)


def cores(hardware, count: int):
    return replace(hardware, sm_count=count)


def register_tiles_per_thread(shape: MatmulShape, tiles, threads: int) -> list[int]:
    """MR×NR register tiles (ragged ones whole) each thread computes when the
    runtime splits the worker iterations as it does."""
    row_blocks = [ceil_div(min(tiles.block_m, shape.m - r), tiles.micro_m) for r in range(0, shape.m, tiles.block_m)]
    col_blocks = [ceil_div(min(tiles.block_n, shape.n - c), tiles.micro_n) for c in range(0, shape.n, tiles.block_n)]
    work = [row * col for _ in range(shape.batch_size) for row in row_blocks for col in col_blocks]
    return [sum(work[begin:end]) for begin, end in split_range(len(work), threads)]


# (batch, M, K, N) of the models' matmuls: MiniLM (hidden 384, FFN 1536) and
# BERT-base (768, 3072) at one sequence of 128 tokens, 8 of them, one of 384;
# with the worker blocks (batch × row blocks × column blocks) at 1 and 2 cores.
MODEL_SHAPES = {
    "MiniLM q/k/v, out B1 S128": ((1, 128, 384, 384), 3, 4),
    "MiniLM merged qkv B1 S128": ((1, 128, 384, 1152), 9, 12),
    "MiniLM ffn up B1 S128": ((1, 128, 384, 1536), 12, 12),
    "MiniLM ffn down B1 S128": ((1, 128, 1536, 384), 3, 4),
    "MiniLM out B1 S384": ((1, 384, 384, 384), 9, 12),
    "MiniLM out B8 S128": ((1, 1024, 384, 384), 24, 24),
    "MiniLM out B8 S128, batched": ((8, 128, 384, 384), 24, 24),
    "BERT out B1 S128": ((1, 128, 768, 768), 6, 6),
    "BERT qkv B1 S128": ((1, 128, 768, 2304), 18, 18),
    "BERT ffn up B1 S128": ((1, 128, 768, 3072), 24, 24),
    "BERT ffn down B1 S384": ((1, 384, 3072, 768), 18, 18),
}


@pytest.mark.parametrize("name", MODEL_SHAPES)
def test_model_shapes_split_evenly_over_two_cores(name):
    (batch, m, k, n), blocks_one_core, blocks_two_cores = MODEL_SHAPES[name]
    shape = matmul_shape(batch, m, k, n)
    for count, blocks in ((1, blocks_one_core), (2, blocks_two_cores)):
        tiles = choose_cpu_matmul_tiles(shape, cores(CPU, count))
        assert batch * ceil_div(m, tiles.block_m) * ceil_div(n, tiles.block_n) == blocks, (count, tiles)
    tiles = choose_cpu_matmul_tiles(shape, cores(CPU, 2))
    per_thread = register_tiles_per_thread(shape, tiles, 2)
    assert per_thread[0] == per_thread[1], per_thread


@pytest.mark.parametrize("hardware", [CPU, CPU_AVX2], ids=["avx512", "avx2"])
def test_one_core_keeps_the_measured_block(hardware):
    """On one core nothing is uneven: NC stays CPU_BLOCK's (the 1-thread
    rate it was measured for), cut to N."""
    for m, k, n in [(128, 384, 384), (128, 384, 1152), (17, 129, 3), (384, 17, 129), (1000, 1000, 1000)]:
        tiles = choose_cpu_matmul_tiles(matmul_shape(1, m, k, n), cores(hardware, 1))
        assert tiles.block_n == min(CPU_BLOCK[1], ceil_div(n, tiles.micro_n) * tiles.micro_n)


@pytest.mark.parametrize("hardware", [CPU, CPU_AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("m, n", [(1, 384), (3, 129), (17, 1000), (129, 384), (384, 129), (1000, 17)])
def test_two_cores_are_never_less_even_than_the_measured_block(hardware, m, n):
    """Ragged shapes: the busiest thread's register tiles with the balanced
    NC are at most those with CPU_BLOCK's, and NC is whole NR panels."""
    shape = matmul_shape(1, m, 17, n)
    two = cores(hardware, 2)
    tiles = choose_cpu_matmul_tiles(shape, two)
    fixed = choose_cpu_matmul_tiles(shape, two, CPU_BLOCK)
    assert tiles.block_n % tiles.micro_n == 0 and tiles.block_m == fixed.block_m
    assert max(register_tiles_per_thread(shape, tiles, 2)) <= max(register_tiles_per_thread(shape, fixed, 2))


def test_a_forced_block_is_kept():
    tiles = choose_cpu_matmul_tiles(matmul_shape(1, 128, 384, 384), cores(CPU, 2), (64, 128))
    assert (tiles.block_m, tiles.block_n) == (64, 128)


# --------------------------------------------------------------------------- the kernels built with them

SALTED_SHAPES = [(17, 129, 384), (384, 17, 129), (1, 1000, 384), (3, 3, 129)]


@pytest.mark.parametrize("isa", ["host", "avx2"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, k, n", SALTED_SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SALTED_SHAPES])
def test_balanced_blocks_match_the_reference(m, k, n, threads, isa, monkeypatch):
    """The matmul + bias kernel with the balanced blocks of this host, and of
    an AVX2 host ($FUSECC_CPU_FEATURES: 16-float panels, other widths), its
    worker range the chooser's block count, against the reference on ragged
    shapes and inputs salted with NaN, ±inf and -0.0, on 1 and 2 threads."""
    pytest.importorskip("llvmlite")
    from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
    from fusecc.driver.pipelines import pipeline_for_level
    from fusecc.passes.backends.hardware import CPU_FEATURES_ENV, host_cpu
    from fusecc.runtime.cpu import jit
    from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool
    from fusecc.runtime.reference import evaluate

    if isa == "avx2":
        if not {"avx2", "fma"} <= jit.host_isa():
            pytest.skip("the host has no AVX2 + FMA")
        monkeypatch.setenv(CPU_FEATURES_ENV, "+avx2,+fma,-avx512f")
        assert host_cpu() is CPU_AVX2

    x, w, b, y = f"tensor<{m}x{k}xf32>", f"tensor<{k}x{n}xf32>", f"tensor<{n}xf32>", f"tensor<{m}x{n}xf32>"
    text = (f"func.func @main(%x: {x}, %w: {w}, %b: {b}) -> {y} {{\n  %p = tensor.matmul %x, %w : ({x}, {w}) -> {y}\n"
            f"  %s = tensor.add %p, %b : ({y}, {b}) -> {y}\n  func.return %s : {y}\n}}\n")
    module, reference = parse_module(text), parse_module(text)
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    program = CompiledProgram(module, pool=WorkerPool(threads))
    tiles = choose_cpu_matmul_tiles(matmul_shape(1, m, k, n), host_cpu())
    (extent,) = [kernel.abi.worker_extent for name, kernel in program.kernels.items() if name.endswith("_matmul")]
    assert extent == ceil_div(m, tiles.block_m) * ceil_div(n, tiles.block_n)
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    args = [salted(rng, (m, k), 0.01), salted(rng, (k, n), 0.001), salted(rng, (n,), 0.01)]
    (want,) = evaluate(reference, "main", args)
    (got,) = program.run(args, "main")
    want = np.asarray(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=4e-6 * scale * np.sqrt(k))


def test_the_model_shape_the_balance_is_for_changes_its_blocks():
    """The shape of issue 11's 2-thread row: 3 blocks of 128 columns before,
    4 of 96 now, on the AVX-512 entry of this 2-core machine."""
    tiles = choose_cpu_matmul_tiles(matmul_shape(1, 128, 384, 384), CPU)
    assert CPU.sm_count == 2 and (tiles.block_m, tiles.block_n) == (128, 96)
