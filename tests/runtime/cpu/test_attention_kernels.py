"""The CPU flash attention (passes/lowering/attention.py, `lower_attention_cpu`)
against the reference, and `exp` where it underflows.

The kernel's row max and row sum over a key tile run as per-lane partial
results, its q·k and p·V accumulate with `math.fma`, and masked keys
(additive masks of -10000 or -inf) make `exp` underflow, which the AVX-512
expansion selects to 0 instead of scaling into the subnormal range. Each on
ragged shapes (S, T ∈ {1, 3, 17, 129, 384} at the chooser's tiles: 32 to
384 query rows, up to 128 keys; head dims 8 to 80; 4- and 8-row register
tiles of up to 4 vectors of keys; causal and not; AVX-512 and AVX2), with
masks and inputs salted with NaN, ±inf and -0.0, and small cases against
the loop interpreter within the CPU's tolerance policy (cpu_tolerance.py:
exp is an expansion within a few ulp).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from cpu_tolerance import KERNEL_RTOL  # noqa: E402

from fusecc.compiler.parser import parse_module  # noqa: E402
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline  # noqa: E402
from fusecc.driver.pipelines import pipeline_for_level  # noqa: E402
from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool  # noqa: E402
from fusecc.runtime.loop_interpreter import run_schedule  # noqa: E402
from fusecc.runtime.reference import evaluate  # noqa: E402

# (heads, S, T, D): every size on the S and T axes; the last two with
# enough heads for whole-sequence query tiles (136 rows for S = 129, 7 past
# the end; 384) and 128-key tiles (a ragged last one of T = 129).
SHAPES = [(2, 1, 384, 32), (3, 3, 17, 8), (2, 17, 129, 32), (1, 129, 3, 8), (2, 384, 1, 32), (1, 129, 384, 16), (8, 129, 384, 32), (8, 384, 129, 16)]


def program_text(h: int, s: int, t: int, d: int, mask_shape: tuple[int, ...], causal: bool = False) -> str:
    q, k, o, m = f"tensor<{h}x{s}x{d}xf32>", f"tensor<{h}x{t}x{d}xf32>", f"tensor<{h}x{s}x{d}xf32>", f"tensor<{'x'.join(map(str, mask_shape))}xf32>"
    attributes = " {causal = true}" if causal else ""
    return (
        f"func.func @main(%q: {q}, %k: {k}, %v: {k}, %m: {m}) -> {o} {{\n"
        f"  %o = tensor.attention %q, %k, %v, %m{attributes} : ({q}, {k}, {k}, {m}) -> {o}\n"
        f"  func.return %o : {o}\n}}\n"
    )


def compiled(text: str, threads: int = 1):
    module = parse_module(text)
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    return module, CompiledProgram(module, pool=WorkerPool(threads))


def padding_mask(rng, shape, masked_value: float) -> np.ndarray:
    """0 where a key is kept, `masked_value` on the last quarter of the keys
    of every other row group, as a padded batch would have."""
    mask = np.zeros(shape, np.float32)
    t = shape[-1]
    mask[..., t - max(1, t // 4):] = masked_value
    if t > 1:
        mask[..., 0] = 0.0  # every row keeps a key
    return mask


def salt(rng, a: np.ndarray, fraction: float = 0.01) -> np.ndarray:
    flat = a.reshape(-1)
    places = rng.choice(flat.size, size=max(4, int(flat.size * fraction)) if flat.size >= 4 else 0, replace=False)
    for special, chosen in zip((np.nan, np.inf, -np.inf, -0.0), np.array_split(places, 4)):
        flat[chosen] = special
    return a


def assert_matches_reference(got, want) -> None:
    want = np.asarray(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("masked_value", [-10000.0, -np.inf], ids=["mask-10000", "mask-inf"])
@pytest.mark.parametrize("h, s, t, d", SHAPES, ids=[f"{h}x{s}x{t}x{d}" for h, s, t, d in SHAPES])
def test_masked_attention_matches_the_reference_on_ragged_shapes(h, s, t, d, masked_value):
    rng = np.random.default_rng(h * 7919 + s * 131 + t + d)
    mask_shape = (s, t)
    _, program = compiled(program_text(h, s, t, d, mask_shape), threads=2 if (s + t) % 2 else 1)
    reference = parse_module(program_text(h, s, t, d, mask_shape))
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((h, s, d), (h, t, d), (h, t, d)))
    mask = padding_mask(rng, mask_shape, masked_value)
    (got,) = program.run([q, k, v, mask], "main")
    (want,) = evaluate(reference, "main", [q, k, v, mask])
    assert_matches_reference(got, want)


def test_large_tiles_are_what_the_ragged_shapes_above_exercise():
    from fusecc.passes.backends.hardware import CPU
    from fusecc.passes.tiling.attention_tiles import choose_cpu_attention_tiles
    from fusecc.passes.lowering.attention import AttentionProblem
    from fusecc.dialects import tensor as T

    # Without a causal mask a head's queries are one tile (rounded up to 8
    # rows: S = 129 leaves 7 rows past the end), unless that leaves fewer
    # than 4 iterations per core; causal tiles stay at most 128 rows.
    cases = {(8, 129, 384, 32, False): (136, 128), (8, 384, 129, 16, False): (384, 128), (1, 129, 384, 16, False): (32, 128), (2, 17, 129, 32, False): (32, 128),
             (2, 384, 1, 32, False): (96, 1), (12, 1000, 1000, 64, False): (504, 128), (8, 384, 129, 80, True): (128, 128), (8, 128, 128, 64, True): (128, 128)}
    for (h, s, t, d, causal), want in cases.items():
        module = parse_module(program_text(h, s, t, d, (s, t), causal))
        op = next(o for o in module.walk() if isinstance(o, T.AttentionOp))
        tiles = choose_cpu_attention_tiles(AttentionProblem.of_op(op), CPU)
        assert (tiles.block_q, tiles.block_t) == want, (h, s, t, d, causal)


@pytest.mark.parametrize("h, s, t, d", [(2, 17, 129, 8), (8, 129, 384, 16)])
def test_salted_inputs_and_mask(h, s, t, d):
    rng = np.random.default_rng(3)
    _, program = compiled(program_text(h, s, t, d, (s, t)), threads=2)
    reference = parse_module(program_text(h, s, t, d, (s, t)))
    q, k, v = (salt(rng, rng.standard_normal(shape).astype(np.float32), 0.003) for shape in ((h, s, d), (h, t, d), (h, t, d)))
    mask = salt(rng, padding_mask(rng, (s, t), -10000.0), 0.01)
    (got,) = program.run([q, k, v, mask], "main")
    (want,) = evaluate(reference, "main", [q, k, v, mask])
    assert_matches_reference(got, want)


@pytest.mark.parametrize("h, s, t, d", [(1, 5, 70, 4), (2, 3, 17, 8)])
def test_kernel_agrees_with_the_loop_interpreter(h, s, t, d):
    """The partial maxima and sums are loop IR like the rest: the compiled
    kernel and the interpreter add in the same order and FMAs round once;
    only exp differs (a few ulp), and exp of masked scores (-10000, -inf)
    is exactly 0 in both."""
    module, program = compiled(program_text(h, s, t, d, (s, t)))
    rng = np.random.default_rng(s * t)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in ((h, s, d), (h, t, d), (h, t, d))]
    mask = padding_mask(rng, (s, t), -10000.0)
    mask[-1, 1] = -np.inf
    (got,) = program.run([*inputs, mask], "main")
    (want,) = run_schedule(module, "main", [*inputs, mask])
    want = np.asarray(want, np.float32)
    scale = float(np.max(np.abs(want)))
    np.testing.assert_allclose(got, want, rtol=0, atol=KERNEL_RTOL * scale)


def test_exp_where_it_underflows_is_exact():
    """Around the underflow thresholds: results that round to 0 are +0.0,
    subnormal results are the correctly rounded ones (the AVX-512 path
    selects 0 below -103.97208 rather than scaling into the subnormals)."""
    text = "func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {\n  %y = tensor.exp %x : (tensor<64xf32>) -> tensor<64xf32>\n  func.return %y : tensor<64xf32>\n}\n"
    _, program = compiled(text)
    edge = np.float32(-103.97208)
    below = np.nextafter(edge, np.float32(-np.inf))
    values = [-np.inf, -1e30, -10000.0, -150.0, -104.0, below, edge, np.nextafter(edge, np.float32(0)), -103.28, -100.0, -87.5, -87.33, -80.0, 0.0, -0.0, np.nan]
    x = np.resize(np.array(values, np.float32), 64)
    (got,) = program.run([x], "main")
    exact = np.exp(x.astype(np.float64)).astype(np.float32)  # float64 exp rounded once: within an ulp, 0 where it underflows
    assert np.all(got[x < edge] == 0) and not np.any(np.signbit(got[x < edge]))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    ulps = np.abs(got.view(np.int32).astype(np.int64) - exact.view(np.int32).astype(np.int64))
    assert np.all(ulps[~np.isnan(x)] <= 1), ulps


# (heads, S, T, D, causal): every size of S and T, head dims 8/32/64/80, at
# the chooser's tiles (128 keys: two 64-key register tiles per key tile on
# AVX-512, a ragged last key tile at T = 129 and 17), causal and not.
HEAD_DIMS = [(8, 129, 384, 64, False), (8, 384, 129, 80, True), (2, 17, 3, 64, True), (3, 1, 129, 80, False), (8, 128, 128, 64, True), (2, 3, 384, 32, False), (4, 384, 17, 8, True)]


@pytest.mark.parametrize("h, s, t, d, causal", HEAD_DIMS, ids=[f"{h}x{s}x{t}x{d}{'-causal' if c else ''}" for h, s, t, d, c in HEAD_DIMS])
def test_head_dims_and_causal_with_salted_inputs(h, s, t, d, causal):
    """The q·k register tiles of several vectors of keys (`score_tile_width`)
    against the reference, with NaN, ±inf and -0.0 in q, k, v and the mask
    (causal: in v past a query tile's diagonal too, where 0·inf makes the
    reference's column NaN: `causal_visit_end`)."""
    rng = np.random.default_rng(h * 31 + s * 7 + t + d)
    text = program_text(h, s, t, d, (s, t), causal)
    _, program = compiled(text, threads=2 if (s + t) % 2 else 1)
    q, k = (salt(rng, rng.standard_normal(shape).astype(np.float32), 0.002) for shape in ((h, s, d), (h, t, d)))
    v = salt(rng, rng.standard_normal((h, t, d)).astype(np.float32), 0.002)
    mask = salt(rng, padding_mask(rng, (s, t), -10000.0), 0.005)
    (got,) = program.run([q, k, v, mask], "main")
    (want,) = evaluate(parse_module(text), "main", [q, k, v, mask])
    assert_matches_reference(got, want)


def test_score_tiles_are_whole_vectors_that_fit_half_the_registers():
    from fusecc.passes.backends.hardware import CPU, CPU_AVX2
    from fusecc.passes.lowering.attention import query_rows_per_group, score_tile_width

    # 8 rows where 8 × Dv's vectors of p·V accumulators fit 16 zmm (Dv <= 32), else 4
    assert [query_rows_per_group(128, dv, CPU) for dv in (8, 16, 32, 33, 64, 80)] == [8, 8, 8, 4, 4, 4]
    assert [query_rows_per_group(bq, 32, CPU) for bq in (136, 132, 6, 5)] == [8, 4, 2, 1]
    assert [query_rows_per_group(128, dv, CPU_AVX2) for dv in (8, 16, 32)] == [8, 4, 4]
    assert [score_tile_width(128, 8, hw) for hw in (CPU, CPU_AVX2)] == [32, 8]

    # 4 rows × 4 zmm (16 of 32) on AVX-512, 4 rows × 2 ymm (8 of 16) on AVX2
    assert [score_tile_width(bt, 4, CPU) for bt in (128, 64, 32, 16, 48, 8, 24)] == [64, 64, 32, 16, 16, 8, 24]
    assert [score_tile_width(bt, 4, CPU_AVX2) for bt in (128, 64, 32, 8, 4)] == [16, 16, 16, 8, 4]
    assert [score_tile_width(128, rr, CPU) for rr in (1, 2, 4)] == [64, 64, 64]


def test_a_128_key_tile_takes_two_register_tiles_of_64_keys():
    """The emitted q·k: a loop over two 64-key chunks around a 64-wide vector
    loop (one widened chunk: 4 rows × 4 vectors of accumulators; D = 64:
    8-row tiles only where Dv <= 32)."""
    from fusecc.dialects import loop

    module, _ = compiled(program_text(8, 128, 128, 64, (128, 128)))
    chunks = [op for op in module.walk() if isinstance(op, loop.ForOp) and any(isinstance(inner, loop.ParallelOp) and list(inner.attributes["upper"].value) == [64] for inner in op.walk() if inner is not op)]
    assert chunks, "no loop over 64-key chunks"


@pytest.fixture
def avx2(monkeypatch):
    from fusecc.passes.backends.hardware import CPU_FEATURES_ENV
    from fusecc.runtime.cpu import jit

    if not {"avx2", "fma"} <= jit.host_isa():
        pytest.skip("the host has no AVX2 + FMA")
    monkeypatch.setenv(CPU_FEATURES_ENV, "+avx2,+fma,-avx512f")


@pytest.mark.parametrize("h, s, t, d, causal", [(8, 129, 384, 64, True), (2, 17, 129, 80, False)])
def test_the_avx2_path_matches_the_reference(avx2, h, s, t, d, causal):
    """The same kernel compiled for AVX2 (8 lanes: 4 rows × 2 ymm score tiles), salted."""
    rng = np.random.default_rng(s + t)
    text = program_text(h, s, t, d, (s, t), causal)
    _, program = compiled(text)
    q, k = (salt(rng, rng.standard_normal(shape).astype(np.float32), 0.002) for shape in ((h, s, d), (h, t, d)))
    v = salt(rng, rng.standard_normal((h, t, d)).astype(np.float32), 0.002)
    mask = padding_mask(rng, (s, t), -np.inf)
    (got,) = program.run([q, k, v, mask], "main")
    (want,) = evaluate(parse_module(text), "main", [q, k, v, mask])
    assert_matches_reference(got, want)


def test_causal_values_past_the_diagonal_that_are_not_finite():
    # Keys above a whole query tile's diagonal weigh exactly 0, and 0 · inf is NaN: the column is NaN in
    # every row above the inf. The kernel skipped those key tiles and returned finite numbers (rows 0..127
    # here, one tile of 128 keys past them).
    text = program_text(1, 200, 200, 8, (200, 200), causal=True)
    _, program = compiled(text)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 200, 8)).astype(np.float32) for _ in range(3))
    v[0, 199, 0], v[0, 150, 3] = np.inf, np.nan
    mask = np.zeros((200, 200), np.float32)
    (got,) = program.run([q, k, v, mask], "main")
    (want,) = evaluate(parse_module(text), "main", [q, k, v, mask])
    assert np.isnan(want[0, :199, 0]).all() and np.isnan(want[0, :, 3]).all()
    assert_matches_reference(got, want)


@pytest.mark.parametrize("causal", [False, True])
def test_no_queries(causal):
    # fuzz seeds 768, 1515, 1673, 1924, 2864 and 3005: attention with S = 0 crashed the tiler (a division by the
    # number of query tiles, 0) once a worker iteration took all of a head's queries (7328115)
    for h, s, t, d in [(2, 0, 5, 4), (3, 0, 384, 8)]:  # (T = 0 has no value: the max over no keys, a DomainError)
        text = program_text(h, s, t, d, (s, t), causal)
        _, program = compiled(text)
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(shape).astype(np.float32) for shape in ((h, s, d), (h, t, d), (h, t, d), (s, t))]
        (got,) = program.run(inputs, "main")
        (want,) = evaluate(parse_module(text), "main", inputs)
        assert got.shape == want.shape == (h, s, d)
        assert_matches_reference(got, want)
