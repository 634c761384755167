"""The GPU matmul template (passes/lowering/matmul_gpu.py) on the CPU harness:
the exact generated CUDA C, sanitized (races, uninitialised and
out-of-bounds accesses, thread-order dependence), against the reference, at
ragged edges (M, N, K from {1, 3, 17, 129, 384, 1000}) with NaN, ±inf and
-0.0 among the inputs; the double-buffered cp.async path (sm_90, sm_80) and
the plain one (one stage, before sm_80); shared loads per FMA in the main
loop; tiny, odd and empty extents (K = N = 1 batched, K = 0, an empty
concatenated piece of K). The harness compiles are slow: few programs, each with several matmuls."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from template_harness import group_module, lower_group, the_group

from fusecc.compiler import parse_module, verify
from fusecc.compiler.types import TensorType, f32
from fusecc.dialects import tensor as T
from fusecc.dialects.loop_vector import LoadVectorOp
from fusecc.driver import cuda_level
from fusecc.passes.backends.cuda.emit import emit_cuda
from fusecc.passes.backends.hardware import H200
from fusecc.passes.tiling.gpu_matmul_tiles import GPU_MATMUL_TILES as GPU_TILES
from fusecc.passes.tiling.contraction_shapes import MatmulShape
from fusecc.runtime.cuda.cpu_harness.loader import HostCompilerMissing
from fusecc.runtime.cuda.cpu_harness.sanitizer import run_sanitized
from fusecc.runtime.reference import evaluate

# (M, K, N, transpose_b, epilogue): every size of the set on every axis
RAGGED = [
    (1, 17, 1000, False, "relu"),
    (3, 1000, 17, True, "gelu"),
    (17, 384, 129, False, "relu"),
    (129, 129, 3, True, "none"),
    (384, 1, 17, False, "gelu"),
    (1000, 3, 1, False, "relu"),
    (129, 17, 384, False, "none"),
]


def ragged_program() -> str:
    args, body, results = [], [], []
    for i, (m, k, n, transpose_b, epilogue) in enumerate(RAGGED):
        b_shape = f"{n}x{k}" if transpose_b else f"{k}x{n}"
        args += [f"%a{i}: tensor<{m}x{k}xf32>", f"%b{i}: tensor<{b_shape}xf32>", f"%c{i}: tensor<{n}xf32>"]
        out = f"tensor<{m}x{n}xf32>"
        attrs = " {transpose_b = true}" if transpose_b else ""
        body.append(f"  %p{i} = tensor.matmul %a{i}, %b{i}{attrs} : (tensor<{m}x{k}xf32>, tensor<{b_shape}xf32>) -> {out}")
        body.append(f"  %s{i} = tensor.add %p{i}, %c{i} : ({out}, tensor<{n}xf32>) -> {out}")
        last = f"%s{i}"
        if epilogue == "relu":
            body.append(f"  %r{i} = tensor.relu %s{i} : ({out}) -> {out}")
            last = f"%r{i}"
        elif epilogue == "gelu":
            body.append(f"  %r{i} = tensor.gelu %s{i} : ({out}) -> {out}")
            last = f"%r{i}"
        results.append((last, out))
    head = f"func.func @main({', '.join(args)}) -> ({', '.join(t for _, t in results)}) {{"
    tail = f"  func.return {', '.join(v for v, _ in results)} : {', '.join(t for _, t in results)}\n}}\n"
    return "\n".join([head, *body, tail])


def special_inputs(func, rng) -> list[np.ndarray]:
    """Uniform in [-1, 1), with NaN, +inf, -inf and -0.0 planted in the
    operands of some matmuls (and a whole row of -0.0 in one)."""
    inputs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in func.function_type.inputs]
    for i in (0, 2, 4):  # the A operands of three matmuls
        a = inputs[3 * i]
        flat = a.reshape(-1)
        for position, value in zip(rng.choice(flat.size, size=min(4, flat.size), replace=False), (np.nan, np.inf, -np.inf, -0.0)):
            flat[position] = value
    inputs[3 * 6][0, :] = -0.0  # a row of -0.0 (129x17): its products are ±0
    inputs[3 * 1 + 1][2, 5] = np.inf  # B of the transposed one
    return inputs


def run_clean(manifest, source: str, inputs, cache_dir) -> dict:
    """The outputs of a sanitized harness run, which must report nothing
    (skipped where no host compiler builds the harness)."""
    try:
        outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cache_dir)
    except HostCompilerMissing as exc:
        pytest.skip(f"no host compiler for the CPU harness: {exc}")
    assert not findings, "\n".join(map(str, findings))
    return outputs


def run_lowered_sanitized(lowered, name: str, inputs, cache_dir) -> dict:
    """`run_clean` of a lowered loop-level module's CUDA C."""
    cuda = emit_cuda(lowered, f"{name}.ir")
    return run_clean(cuda_level.build_manifest(lowered, cuda, f"{name}.cu"), cuda.text, inputs, cache_dir)


def check(outputs: dict, expected: list[np.ndarray]) -> None:
    for (name, got), want in zip(sorted(outputs.items()), expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
        assert np.array_equal(np.isnan(got), np.isnan(want)), name  # NaN exactly where the reference has it
        assert np.array_equal(np.isposinf(got), np.isposinf(want)) and np.array_equal(np.isneginf(got), np.isneginf(want)), name


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_ragged_matmuls_with_special_values_run_clean_and_right(arch, cuda_cache_dir):
    from fusecc.driver.cuda_target import compile_program

    module = parse_module(ragged_program(), "ragged.ir")
    verify(module)
    func = module.lookup("main")
    inputs = special_inputs(func, np.random.default_rng(1))
    expected = evaluate(module, "main", inputs)
    source, manifest = compile_program(module, "main", arch)  # lowers `module` in place
    assert "fusecc_cp_async<4>" in source and "fusecc_load_vector<float4>" in source
    outputs = run_clean(manifest, source, inputs, cuda_cache_dir)
    check(outputs, expected)


def bias_relu(b, a, **attrs):
    product = b.create(T.MatmulOp, [a[0], a[1]], attrs or None).result
    return [b.create(T.ReluOp, [b.create(T.AddOp, [product, a[2]]).result]).result]


def t(*shape):
    return TensorType(shape, f32)


# Before sm_80 there is no cp.async: one stage, plain guarded loads and stores.
OLD_GPU = dataclasses.replace(H200, name="sm_75 test gpu", arch="sm_75")


@pytest.mark.parametrize("transpose_b", [False, True])
def test_the_single_stage_path_without_cp_async(transpose_b, cuda_cache_dir):
    b_shape = (70, 45) if transpose_b else (45, 70)
    module = group_module("matmul", [t(37, 45), t(*b_shape), t(70)], lambda b, a: bias_relu(b, a, transpose_b=transpose_b) if transpose_b else bias_relu(b, a))
    lowered = lower_group(module, OLD_GPU)
    ops = [o.name for o in lowered.walk()]
    assert "loop.copy_async" not in ops and "loop.async_wait" not in ops
    allocs = [o.result.type for o in lowered.walk() if o.name == "loop.alloc"]
    assert allocs and all(a.shape[0] == 1 for a in allocs)  # one stage
    rng = np.random.default_rng(2)
    inputs = [rng.uniform(-1, 1, a.type.shape).astype(np.float32) for a in module.lookup("main").body.args]
    outputs = run_lowered_sanitized(lowered, "single_stage", inputs, cuda_cache_dir)
    ((_, got),) = outputs.items()
    np.testing.assert_allclose(got, evaluate(module, "main", inputs)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(128, 768, 2304), (128, 3072, 768), (4096, 4096, 4096), (8, 8, 8)], ids=["qkv", "ffn_down", "4096", "tiny"])
def test_main_loop_makes_at_most_one_shared_load_per_four_fmas(shape):
    m, k, n = shape
    module = group_module("matmul", [t(m, k), t(k, n), t(n)], bias_relu)
    lowered = lower_group(module, H200)
    (inner,) = [o for o in lowered.walk() if o.name == "loop.for" and o.body.args[0].name_hint == "kk"]
    loads = [o for o in inner.walk() if o.name in ("loop.load", "loop.load_vector") and o.buffer.type.memory_space == "shared"]
    fmas = [o for o in inner.walk() if o.name == "arith.mul"]
    assert loads and all(isinstance(o, LoadVectorOp) for o in loads)  # every shared load a float2/float4
    assert len(loads) * 4 <= len(fmas)


@pytest.mark.parametrize(
    "shape, splits",
    [((1, 2816, 1024), 9), ((2, 3, 3000, 17), 11)],
    ids=["decode-1x2816x1024", "batched-ragged-k"],
)
def test_split_k_fills_the_sms_and_adds_in_a_fixed_order(shape, splits, cuda_cache_dir):
    # A decoding step (one row against a 2816x1024 weight: 64 blocks of 16x16
    # for 132 SMs, 576 with K in 9 ranges) and a batched matmul with a ragged
    # K (4 blocks; K = 3000 in 11 ranges of 9 BK steps, the last 120 long):
    # partial sums to scratch, a second kernel adds them in order.
    *batch, m, k, n = shape
    module = group_module("matmul", [t(*batch, m, k), t(k, n), t(n)], bias_relu)
    lowered = lower_group(module, H200)
    partial, reduce = [o for o in lowered.walk() if o.name == "loop.kernel"]
    (grid, _), (reduce_grid, reduce_block) = partial.launch_dims(), reduce.launch_dims()
    assert grid[2] == splits * (batch[0] if batch else 1)
    assert reduce.sym_name.endswith("_reduce") and reduce_grid[0] * reduce_block[0] >= (batch[0] if batch else 1) * m * n
    scratch = [o for o in reduce.walk() if o.name == "loop.load" and o.buffer.type.rank == 4]
    assert len(scratch) == splits  # one load per split, summed in split order: no atomics
    rng = np.random.default_rng(3)
    inputs = [rng.uniform(-1, 1, a.type.shape).astype(np.float32) for a in module.lookup("main").body.args]
    outputs = run_lowered_sanitized(lowered, "split_k", inputs, cuda_cache_dir)
    ((_, got),) = outputs.items()
    np.testing.assert_allclose(got, evaluate(module, "main", inputs)[0], rtol=1e-4, atol=1e-4)


def test_split_k_where_the_model_finds_it_pays():
    """Split-K ranges are whole BK steps, at least SPLIT_K_MIN_STEPS each;
    the chooser splits where the second kernel's launch and read-back cost
    less than the SMs an unsplit grid leaves idle."""
    from fusecc.compiler.types import f32
    from fusecc.passes.tiling.gpu_matmul_tiles import GpuMatmulTiles, best_split_k, split_k_choices, split_k_ranges

    assert split_k_choices(2816, 32) == list(range(1, 12))  # 2816 / (8 x 32)
    assert split_k_choices(100, 32) == [1]  # K too short to share
    assert split_k_choices(0, 32) == [1]  # an empty K
    assert split_k_ranges(3000, 32, 11) == 11 and split_k_ranges(1000, 32, 3) == 3
    assert split_k_ranges(288, 32, 8) == 5  # ranges of 36 -> 64 (whole BK steps): 5, none empty
    tile = GpuMatmulTiles(16, 16, 32, 32, 2)
    assert best_split_k(1, 1, 1024, 2816, tile, f32, H200) == 9  # 64 blocks: 576 with K in 9 ranges
    assert best_split_k(1, 4096, 4096, 4096, tile, f32, H200) == 1  # 65536 blocks fill the SMs already
    assert best_split_k(0, 4, 4, 4096, tile, f32, H200) == 1  # an empty output


# Tiny and odd extents, batched (K = N = 1 among them), and a K with an empty
# concatenated piece in front (fuzz seed 5120: the empty span's prologue
# staged its first BK tile unguarded and read past the end of both inputs).
TINY = [
    ("2x2x8x1", "2x2x1x1", "2x2x8x1"),
    ("1x3", "3x1", "1x1"),
    ("5x1", "1x7", "5x7"),
    ("2x3x1x5", "5x1", "2x3x1x1"),
    ("4x0", "0x7", "4x7"),  # K = 0: zeros, nothing read
]


def tiny_program() -> str:
    args = [f"%a{i}: tensor<{a}xf32>, %b{i}: tensor<{b}xf32>" for i, (a, b, _) in enumerate(TINY)]
    body = [f"  %p{i} = tensor.matmul %a{i}, %b{i} : (tensor<{a}xf32>, tensor<{b}xf32>) -> tensor<{r}xf32>" for i, (a, b, r) in enumerate(TINY)]
    args.append("%e: tensor<2x2x8x0xf32>")
    body.append("  %k = tensor.concat %e, %a0 {axis = 3} : (tensor<2x2x8x0xf32>, tensor<2x2x8x1xf32>) -> tensor<2x2x8x1xf32>")
    body.append("  %q = tensor.matmul %k, %b0 : (tensor<2x2x8x1xf32>, tensor<2x2x1x1xf32>) -> tensor<2x2x8x1xf32>")
    results = [(f"%p{i}", r) for i, (_, _, r) in enumerate(TINY)] + [("%q", "2x2x8x1")]
    types = ", ".join(f"tensor<{r}xf32>" for _, r in results)
    return "\n".join([f"func.func @main({', '.join(args)}) -> ({types}) {{", *body, f"  func.return {', '.join(v for v, _ in results)} : {types}\n}}\n"])


def test_tiny_odd_and_empty_extents_run_clean_and_right(cuda_cache_dir):
    from fusecc.driver.cuda_target import compile_program

    module = parse_module(tiny_program(), "tiny.ir")
    verify(module)
    rng = np.random.default_rng(4)
    inputs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in module.lookup("main").function_type.inputs]
    expected = evaluate(module, "main", inputs)
    source, manifest = compile_program(module, "main", "sm_90")
    assert "fusecc_cp_async<4>" in source
    outputs = run_clean(manifest, source, inputs, cuda_cache_dir)
    got = [outputs[f"result{i}"] for i in range(len(expected))]
    for g, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    assert not got[4].any()  # K = 0


def test_empty_pieces_make_no_span():
    from fusecc.passes.lowering.spans import Span, spans

    assert spans((0, 0, 1), 8) == [Span(0, 1, 0, 1)]  # seed 5120's K: an 8x0 piece, then the 8x1 one
    assert spans((0, 3, 3, 5), 2) == [Span(0, 3, 0, 2), Span(3, 5, 2, 1)]
    assert spans((0, 0), 8) == [Span(0, 0, 0, 0)]  # an empty axis keeps one (tile-less) span to dispatch to


def assert_vector_accesses_aligned(cuda_text: str) -> None:
    """Every static shared array that a vector load or store reaches, directly
    or through a view (`float* c_tile = a_tile + 8;`), is declared
    __align__(16): a float array is only 4-byte aligned otherwise, and a GPU
    faults on a misaligned float4 access (fuzz seed 2985: a K = 0 matmul zeroed
    its output tile, a view of the unaligned A tile, with float4 stores)."""
    aliases = dict(re.findall(r"\b\w+\* (\w+) = (\w+)\b", cuda_text))
    declared = dict((name, align) for align, name in re.findall(r"__shared__ (__align__\(16\) )?\w+ (\w+)\[", cuda_text))
    accessed = re.findall(r"fusecc_(?:load|store)_vector<\w+>\(&?(\w+)\[", cuda_text)
    for name in accessed:
        while name in aliases:
            name = aliases[name]
        if name in declared:
            assert declared[name], f"{name} is read or written by vector accesses but not declared __align__(16)"


@pytest.mark.parametrize("a, b", [((0, 5), (5, 7)), ((4, 5), (5, 0)), ((4, 0), (0, 7)), ((2, 0, 5), (5, 6)), ((1, 0), (0, 2816))], ids=["m0", "n0", "k0", "batched-m0", "decode-k0"])
def test_empty_matmuls_lower_through_the_template_and_split_k(a, b):
    from fusecc.passes.lowering.matmul import MatmulProblem, gpu_matmul_tiles, lower_matmul_split_k

    module = group_module("matmul", [t(*a), t(*b)], lambda bb, x: [bb.create(T.MatmulOp, [x[0], x[1]]).result])
    lowered = lower_group(module, H200)
    text = emit_cuda(lowered, "empty.ir").text
    assert "__global__" in text
    assert_vector_accesses_aligned(text)
    if 0 in a[-1:]:  # K = 0: the kernel reads nothing
        assert not [o for o in lowered.walk() if o.name in ("loop.copy_async", "loop.load_vector")]
    group = the_group(module)
    problem = MatmulProblem.of(group)
    split = lower_matmul_split_k(group, problem, dataclasses.replace(gpu_matmul_tiles(group, problem, H200), split_k=2), H200)
    assert len(split.launches) == 2


def _forced_tile_module(bm: int, bn: int, threads: int):
    """One ragged matmul (M = N = K = 129: a partial tile on every axis and a
    partial BK step) + bias + ReLU, with the tile forced as the tiler writes it."""
    attrs = {"tile.block": [bm, bn], "tile.k": 32, "tile.threads": threads}
    return group_module("matmul", [t(129, 129), t(129, 129), t(129)], bias_relu, attrs)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("tile", GPU_TILES, ids=[f"{m}x{n}x{th}" for m, n, th in GPU_TILES])
def test_every_chooser_tile_compiles_without_spills(tile, arch):
    from fusecc.passes.lowering.matmul import MatmulProblem, gpu_matmul_resources, gpu_matmul_tiles
    from fusecc.runtime.cuda import resources
    from fusecc.runtime.cuda.nvrtc import NvrtcUnavailable

    module = _forced_tile_module(*tile)
    hardware = H200 if arch == "sm_90" else dataclasses.replace(H200, arch="sm_80")
    group = the_group(module)
    tiles = gpu_matmul_tiles(group, MatmulProblem.of(group), hardware)
    assert (tiles.block_m, tiles.block_n, tiles.threads) == tile
    estimate = gpu_matmul_resources(tiles, f32).registers_per_thread
    cuda = emit_cuda(lower_group(module, hardware), "tile.ir")
    try:
        (usage,) = resources.resource_usage(cuda.text, "tile.cu", arch).values()
    except NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")
    assert not usage.spills and usage.stack_bytes == 0
    assert usage.registers <= 1.15 * estimate, f"ptxas uses {usage.registers} registers, the estimate says {estimate}"


@pytest.mark.parametrize("tile", GPU_TILES, ids=[f"{m}x{n}x{th}" for m, n, th in GPU_TILES])
def test_every_chooser_tile_runs_ragged_extents_clean_and_right(tile, cuda_cache_dir):
    module = _forced_tile_module(*tile)
    rng = np.random.default_rng(5)
    inputs = [rng.uniform(-1, 1, a.type.shape).astype(np.float32) for a in module.lookup("main").body.args]
    flat = inputs[0].reshape(-1)
    flat[[7, 300, 4000, 9000]] = (np.nan, np.inf, -np.inf, -0.0)
    expected = evaluate(module, "main", inputs)[0]
    lowered = lower_group(module, H200)
    outputs = run_lowered_sanitized(lowered, "tile", inputs, cuda_cache_dir)
    ((_, got),) = outputs.items()
    check({"out": got}, [expected])


# A matmul whose K operand is concatenated along K (FFN-down over two halves
# of the hidden state, or a weight stored in two pieces): the template reads
# each piece's span in its own K loop and cannot split K
# (`MatmulShape.k_splittable`), so the chooser and the cost model must tile
# and cost it unsplit. (They assumed the split: FFN-down's 128x64 tile, chosen
# for K in 11 ranges, ran unsplit in 12 blocks on 132 SMs.)
def concat_k_program(m: int, pieces: tuple[int, ...], n: int, b_pieces: tuple[int, ...] = ()) -> str:
    """A = concat of `pieces` along K, times B (itself concatenated along K
    when `b_pieces` is given), + bias."""
    k = sum(pieces)
    args = [f"%x{i}: tensor<{m}x{p}xf32>" for i, p in enumerate(pieces)]
    args += [f"%w{i}: tensor<{p}x{n}xf32>" for i, p in enumerate(b_pieces)] if b_pieces else [f"%w: tensor<{k}x{n}xf32>"]
    args.append(f"%c: tensor<{n}xf32>")
    a_types = ", ".join(f"tensor<{m}x{p}xf32>" for p in pieces)
    body = [f"  %a = tensor.concat {', '.join(f'%x{i}' for i in range(len(pieces)))} {{axis = 1}} : ({a_types}) -> tensor<{m}x{k}xf32>"]
    weight = "%w"
    if b_pieces:
        b_types = ", ".join(f"tensor<{p}x{n}xf32>" for p in b_pieces)
        body.append(f"  %wk = tensor.concat {', '.join(f'%w{i}' for i in range(len(b_pieces)))} {{axis = 0}} : ({b_types}) -> tensor<{k}x{n}xf32>")
        weight = "%wk"
    out = f"tensor<{m}x{n}xf32>"
    body.append(f"  %p = tensor.matmul %a, {weight} : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> {out}")
    body.append(f"  %s = tensor.add %p, %c : ({out}, tensor<{n}xf32>) -> {out}")
    return "\n".join([f"func.func @main({', '.join(args)}) -> {out} {{", *body, f"  func.return %s : {out}\n}}\n"])


def test_a_concatenated_k_is_tiled_costed_and_lowered_unsplit():
    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.compiler.pass_manager import PassContext
    from fusecc.driver.cuda_target import lower_to_cuda
    from fusecc.driver.reporting import report_data
    from fusecc.passes.tiling.gpu_matmul_tiles import choose_gpu_matmul_tiles, gpu_matmul_seconds

    text = concat_k_program(128, (1536, 1536), 768)
    module = parse_module(text, "concat_k.ir")
    verify(module)
    (op,) = [o for o in module.walk() if o.name == "tensor.matmul"]
    problem = MatmulShape.of_op(op)
    assert not problem.k_splittable and problem.piece_bounds()["k"] == (0, 1536, 3072)
    contiguous = MatmulShape.of_op(op, inside=[op])  # the concat outside the group: A is read whole
    assert contiguous.k_splittable
    for_splitting = choose_gpu_matmul_tiles(contiguous, H200)
    assert for_splitting.split_k > 1  # FFN-down's shape: split where it can be
    chosen = choose_gpu_matmul_tiles(problem, H200)
    blocks = (128 // chosen.block_m) * (768 // chosen.block_n)
    assert chosen.split_k == 1 and blocks >= H200.sm_count
    unsplit = dataclasses.replace(for_splitting, split_k=1)  # what the old chooser's tile ran as: 12 blocks
    assert gpu_matmul_seconds(1, 128, 768, 3072, chosen, f32, H200) < gpu_matmul_seconds(1, 128, 768, 3072, unsplit, f32, H200)
    # the cost model times that grid, and the lowering launches it: one kernel, no partial sums
    (group,) = [g for g in report_data(module, "h200", DiagnosticEngine())["groups"] if g["kind"] == "matmul"]
    assert group["blocks"] == blocks and group["threads_per_block"] == chosen.threads
    lowered = parse_module(text, "concat_k.ir")
    lower_to_cuda(lowered, "sm_90", PassContext(target="h200"))
    (kernel,) = [o for o in lowered.walk() if o.name == "loop.kernel"]
    (grid, block) = kernel.launch_dims()
    assert (grid[0] * grid[1] * grid[2], block[0]) == (blocks, chosen.threads)


def test_a_concatenated_k_runs_clean_and_right(cuda_cache_dir):
    """Ragged pieces of K on both operands (A's 1000 + 129, B's 384 + 745: the
    spans cut K at 384 and 1000), M = 17, N = 129: a grid the chooser would
    have split, run unsplit, sanitized, with NaN, ±inf and -0.0 in A and B."""
    from fusecc.driver.cuda_target import compile_program

    module = parse_module(concat_k_program(17, (1000, 129), 129, (384, 745)), "concat_k.ir")
    verify(module)
    (op,) = [o for o in module.walk() if o.name == "tensor.matmul"]
    problem = MatmulShape.of_op(op)
    assert not problem.k_splittable and problem.piece_bounds()["k"] == (0, 384, 1000, 1129)
    rng = np.random.default_rng(6)
    inputs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in module.lookup("main").function_type.inputs]
    inputs[0][[0, 3, 9, 16], [5, 999, 0, 512]] = (np.nan, np.inf, -np.inf, -0.0)
    inputs[1][4, :] = -0.0
    inputs[3][10, 7] = np.inf
    expected = evaluate(module, "main", inputs)
    source, manifest = compile_program(module, "main", "sm_90")
    assert "_reduce" not in source  # one kernel: K unsplit
    outputs = run_clean(manifest, source, inputs, cuda_cache_dir)
    check(outputs, expected)

