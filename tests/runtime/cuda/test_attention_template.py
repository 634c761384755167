"""The GPU attention template (R query rows per thread, 8 lanes per row
group, padded shared tiles, split-KV) run sanitized on the CPU harness
against the numpy reference: masks of every broadcast, causal, ragged
sequence lengths (S and T not multiples of the tiles), head dimensions 8,
64 and 128, every (BQ, threads) tile of the chooser forced in turn,
split-KV (decoding, causal ranges past the diagonal), the single-stage
path (cp.async or plain copies); and shared loads per FMA counted in the main loops."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler import parse_module, verify
from fusecc.dialects import loop
from fusecc.dialects.loop_vector import LoadVectorOp
from fusecc.driver.cuda_target import compile_program
from fusecc.passes.backends.hardware import H200
from fusecc.passes.tiling.attention_tiles import GPU_ATTENTION_TILES, AttentionTiles, choose_gpu_attention_tiles
from fusecc.passes.tiling.contraction_shapes import AttentionShape
from fusecc.runtime.cuda.cpu_harness.loader import HostCompilerMissing
from fusecc.runtime.cuda.cpu_harness.sanitizer import run_sanitized
from fusecc.runtime.reference import evaluate, random_input


def program(q, k, v, mask=None, attrs="", tile=""):
    """`@main` with one tensor.attention on shapes q, k, v (and a mask)."""

    def ty(shape):
        return f"tensor<{'x'.join(map(str, shape))}xf32>"

    args = [f"%q: {ty(q)}", f"%k: {ty(k)}", f"%v: {ty(v)}"] + ([f"%m: {ty(mask)}"] if mask else [])
    out = (*q[:-1], v[-1])
    operands = "%q, %k, %v" + (", %m" if mask else "")
    types = ", ".join(ty(s) for s in (q, k, v) + ((mask,) if mask else ()))
    attributes = ", ".join(x for x in (attrs, tile) if x)
    return (
        f"func.func @main({', '.join(args)}) -> {ty(out)} {{\n"
        f"  %o = tensor.attention {operands}{' {' + attributes + '}' if attributes else ''} : ({types}) -> {ty(out)}\n"
        f"  func.return %o : {ty(out)}\n}}\n"
    )


def run(text: str, cache_dir):
    module = parse_module(text, "attention.ir")
    verify(module)
    rng = np.random.default_rng(1)
    inputs = [random_input(t, rng) for t in module.lookup("main").function_type.inputs]
    (expected,) = evaluate(parse_module(text, "attention.ir"), "main", inputs)
    source, manifest = compile_program(module, "main", "sm_90")
    try:
        outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cache_dir)
    except HostCompilerMissing as exc:
        pytest.skip(f"no host compiler for the CPU harness: {exc}")
    return source, manifest, inputs, expected, outputs, findings


CASES = {
    "d8_ragged": ((2, 3, 37, 8), (2, 3, 53, 8), (2, 3, 53, 8), None, ""),
    "d64_mask_per_key": ((1, 4, 40, 64), (1, 4, 70, 64), (1, 4, 70, 64), (1, 1, 1, 70), ""),
    "d64_causal": ((2, 2, 75, 64), (2, 2, 75, 64), (2, 2, 75, 64), None, "causal = true"),
    "d64_causal_full_mask": ((1, 2, 33, 64), (1, 2, 33, 64), (1, 2, 33, 64), (33, 33), "causal = true"),
    "d128_ragged_dv": ((3, 29, 128), (3, 41, 128), (3, 41, 24), (3, 29, 41), ""),
    "d128_causal": ((2, 70, 128), (2, 70, 128), (2, 70, 128), None, "causal = true"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_matches_the_reference_sanitized(name, cuda_cache_dir):
    q, k, v, mask, attrs = CASES[name]
    _, _, _, expected, outputs, findings = run(program(q, k, v, mask, attrs), cuda_cache_dir)
    assert findings == [], "\n".join(map(str, findings))
    (out,) = outputs.values()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bq,threads", GPU_ATTENTION_TILES)
def test_every_tile_of_the_chooser_is_right(bq, threads, cuda_cache_dir, monkeypatch):
    """Each (BQ, threads) of the chooser: 4, 2 or 1 rows per thread, on a
    ragged causal problem with a mask, the chooser's answer forced."""
    import fusecc.passes.tiling.attention_tiles as attention_tiles

    real = attention_tiles.choose_gpu_attention_tiles

    def forced(problem, hardware, block=None, threads_=None, splits=None):
        return AttentionTiles(bq, 32, threads) if block is None else real(problem, hardware, block, threads_, splits)

    monkeypatch.setattr(attention_tiles, "choose_gpu_attention_tiles", forced)
    source, manifest, _, expected, outputs, findings = run(program((2, 45, 64), (2, 45, 64), (2, 45, 40), (45, 45), "causal = true"), cuda_cache_dir)
    assert [launch.block[0] for launch in manifest.launches] == [threads]
    assert findings == [], "\n".join(map(str, findings))
    (out,) = outputs.values()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_the_chooser_fills_the_machine_for_a_short_sequence():
    """BERT-base attention (12 heads, S = T = 128): tiles small enough for
    a block on every one of the 132 SMs (issue 13.3's full wave), rather
    than 24 of 64 rows, still two rows a thread (the 1:4 loads per FMA),
    unsplit (a second launch costs more than the idle SMs)."""
    module = parse_module(program((1, 12, 128, 64), (1, 12, 128, 64), (1, 12, 128, 64)), "bert.ir")
    op = next(op for op in module.walk() if op.name == "tensor.attention")
    tiles = choose_gpu_attention_tiles(AttentionShape.of_op(op), H200)
    assert 12 * (128 // tiles.block_q) * tiles.splits >= 132
    assert tiles.rows_per_thread >= 2 and tiles.splits == 1


def test_a_long_sequence_takes_four_rows_per_thread():
    module = parse_module(program((16, 1024, 64), (16, 1024, 64), (16, 1024, 64)), "long.ir")
    op = next(op for op in module.walk() if op.name == "tensor.attention")
    tiles = choose_gpu_attention_tiles(AttentionShape.of_op(op), H200)
    assert (tiles.block_q, tiles.threads, tiles.rows_per_thread, tiles.threads_per_row) == (64, 128, 4, 8)


def test_decoding_splits_the_keys_and_combines_them(cuda_cache_dir):
    """One query per head over 600 keys: 8 blocks without split-KV; the
    chooser splits the keys, a second kernel combines the ranges. (Over 300
    keys the float4 kernel takes less than the second launch costs.)"""
    _, manifest, _, expected, outputs, findings = run(program((1, 8, 1, 64), (1, 8, 600, 64), (1, 8, 600, 64), (1, 1, 1, 600)), cuda_cache_dir)
    partial, combine = manifest.launches
    assert partial.kernel.endswith("_partial") and partial.grid[2] > 1
    assert combine.block[0] == 256
    assert findings == [], "\n".join(map(str, findings))
    (out,) = outputs.values()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("splits", [2, 4])
def test_split_kv_with_causal_ranges_past_the_diagonal(splits, cuda_cache_dir, monkeypatch):
    """Causal, forced splits: the first query tiles' later key ranges are
    empty (m = -inf, l = 0) and must weigh nothing in the combination."""
    import fusecc.passes.tiling.attention_tiles as attention_tiles

    real = attention_tiles.choose_gpu_attention_tiles

    def forced(problem, hardware, block=None, threads=None, splits_=None):
        return AttentionTiles(16, 32, 64, splits) if block is None else real(problem, hardware, block, threads, splits_)

    monkeypatch.setattr(attention_tiles, "choose_gpu_attention_tiles", forced)
    _, manifest, _, expected, outputs, findings = run(program((2, 100, 64), (2, 100, 64), (2, 100, 40), (100, 100), "causal = true"), cuda_cache_dir)
    assert [launch.grid[2] for launch in manifest.launches[:1]] == [splits]
    assert findings == [], "\n".join(map(str, findings))
    (out,) = outputs.values()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_the_chooser_splits_keys_only_where_the_sms_would_idle():
    def shape_of(q, k):
        module = parse_module(program(q, k, k), "a.ir")
        return AttentionShape.of_op(next(op for op in module.walk() if op.name == "tensor.attention"))

    decode = shape_of((1, 8, 1, 128), (1, 8, 4096, 128))
    tiles = choose_gpu_attention_tiles(decode, H200)
    assert 8 * tiles.splits >= 132  # a full wave on 132 SMs
    # two K/V buffers of D = 128 would leave one 2-warp block per SM: one buffer, two blocks
    assert tiles.stages == 1
    assert choose_gpu_attention_tiles(shape_of((16, 1024, 64), (16, 1024, 64)), H200).splits == 1  # 256 blocks already


def attention_kernel_loops(text: str, arch: str = "sm_90"):
    """The loop-level module of `text` lowered for `arch`, and its q·k (`d`)
    and p·V (`j`) loops in the attention kernels."""
    from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
    from fusecc.driver.cuda_target import ARCH_HARDWARE
    from fusecc.driver.pipelines import pipeline_for_level

    module = parse_module(text, "attention.ir")
    target = ARCH_HARDWARE[arch]
    run_pipeline(parse_pipeline(pipeline_for_level("cuda", target=target, arch=arch)), module, PassContext(target=target))
    loops = {"d": [], "j": []}
    for op in module.walk():
        if op.name == "loop.for" and op.body.args[0].name_hint in loops and "attention" in op.parent_of_type(loop.KernelOp).sym_name:
            loops[op.body.args[0].name_hint].append(op)
    return module, loops


SHAPES = {
    "bert_base": ((1, 12, 128, 64), (1, 12, 128, 64), (1, 12, 128, 64)),
    "long": ((16, 1024, 64), (16, 1024, 64), (16, 1024, 64)),
    "d128_causal": ((2, 70, 128), (2, 70, 128), (2, 70, 128)),
    "mqa_split_kv": ((1, 4, 16, 64), (1, 4, 4096, 64), (1, 4, 4096, 64)),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_main_loops_make_at_most_one_shared_load_per_four_fmas(name, arch):
    """Counted from the generated loop IR: in the q·k and p·V loops every
    shared load is a float4 (register blocking: R ≥ 2 rows per thread share
    each key and value vector), one per four multiply-adds or fewer; the K
    and V tiles arrive by cp.async, double-buffered (on the H200 for all
    these shapes). (Decoding, all
    queries in one 8-row tile, takes one row per thread: GPU_ATTENTION_TILES.)"""
    q, k, v = SHAPES[name]
    module, loops = attention_kernel_loops(program(q, k, v, attrs="causal = true" if "causal" in name else ""), arch)
    assert loops["d"] and loops["j"]
    for inner in loops["d"] + loops["j"]:
        loads = [o for o in inner.walk() if o.name in ("loop.load", "loop.load_vector") and o.buffer.type.memory_space == "shared"]
        fmas = [o for o in inner.walk() if o.name == "arith.mul" and o.result.type.is_float]
        assert loads and all(isinstance(o, LoadVectorOp) and o.width == 4 for o in loads)
        assert len(loads) * 4 <= len(fmas), (inner.body.args[0].name_hint, len(loads), len(fmas))
    ops = [o.name for o in module.walk()]
    buffers = {o.result.type.shape[0] for o in module.walk() if o.name == "loop.alloc" and o.result.name_hint in ("k_tile", "v_tile")}
    # cp.async on sm_80+: two K/V buffers, or one where the second would
    # cost resident warps (the A100's 164 KiB: attention_stages)
    assert "loop.copy_async" in ops and "loop.async_wait" in ops and buffers in ({1}, {2})
    if arch == "sm_90":
        assert buffers == {2}


@pytest.mark.parametrize("async_copies", [False, True], ids=["before-sm_80", "sm_80"])
def test_the_single_stage_path(async_copies, cuda_cache_dir, monkeypatch):
    """One K/V buffer (where a second would cost resident warps, or before
    sm_80): each step copies its own tile, by cp.async and a wait on sm_80+,
    by plain loads and stores before; float4 reads either way."""
    import fusecc.passes.lowering.attention_gpu as attention_gpu

    monkeypatch.setattr(attention_gpu, "attention_stages", lambda tiles, problem, hardware: 1)
    if not async_copies:
        monkeypatch.setattr(attention_gpu, "gpu_matmul_stages", lambda hardware: 1)
    text = program((2, 45, 64), (2, 45, 64), (2, 45, 64), (45, 45), "causal = true")
    module, _ = attention_kernel_loops(text)
    ops = [o.name for o in module.walk()]
    assert ("loop.copy_async" in ops) == ("loop.async_wait" in ops) == async_copies and "loop.load_vector" in ops
    assert {o.result.type.shape[0] for o in module.walk() if o.name == "loop.alloc" and o.result.name_hint in ("k_tile", "v_tile")} == {1}
    _, _, _, expected, outputs, findings = run(text, cuda_cache_dir)
    assert findings == [], "\n".join(map(str, findings))
    (out,) = outputs.values()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def values_past_the_diagonal_not_finite(inputs) -> None:
    """inf and NaN in v at keys past the first query tiles' diagonal."""
    v = inputs[2]
    v[..., -1, 0], v[..., -30, 2] = np.inf, np.nan


@pytest.mark.parametrize("splits", [1, 2])
def test_causal_values_past_the_diagonal_that_are_not_finite(splits, cuda_cache_dir, monkeypatch):
    """Keys above a query tile's diagonal weigh exactly 0, and 0·inf is NaN:
    the reference's column is NaN in every row above the inf. The kernel
    skipped those key tiles (`kv_end`) and returned finite numbers; it now
    visits them where their values are not finite (`gpu_causal_visit_end`),
    split-KV included."""
    import fusecc.passes.tiling.attention_tiles as attention_tiles

    real = attention_tiles.choose_gpu_attention_tiles

    def forced(problem, hardware, block=None, threads=None, splits_=None):
        return AttentionTiles(16, 32, 64, splits) if block is None else real(problem, hardware, block, threads, splits_)

    monkeypatch.setattr(attention_tiles, "choose_gpu_attention_tiles", forced)
    text = program((2, 100, 8), (2, 100, 8), (2, 100, 8), None, "causal = true")
    module = parse_module(text, "attention.ir")
    verify(module)
    inputs = [random_input(t, np.random.default_rng(1)) for t in module.lookup("main").function_type.inputs]
    values_past_the_diagonal_not_finite(inputs)
    (expected,) = evaluate(parse_module(text, "attention.ir"), "main", inputs)
    assert np.isnan(expected[:, :99, 0]).all() and np.isnan(expected[:, :, 2]).all()
    source, manifest = compile_program(module, "main", "sm_90")
    try:
        outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
    except HostCompilerMissing as exc:
        pytest.skip(f"no host compiler for the CPU harness: {exc}")
    assert len(manifest.launches) == (2 if splits > 1 else 1)
    assert findings == [], "\n".join(map(str, findings))
    (out,) = outputs.values()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
