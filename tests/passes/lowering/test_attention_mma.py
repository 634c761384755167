"""Flash attention on tensor cores (passes/lowering/attention_mma.py): f16
and bf16 attention on sm_80+ runs QKᵀ and PV on `nvgpu.mma_sync`.

Against the reference: the kernel rounds P to the input type for the PV
product (the reference keeps it in f32), so an output may differ by that
rounding, at most 2^-11 (f16) or 2^-8 (bf16) relative to Σ p·|v| / Σ p
<= max |v|, plus the output's own rounding (2 ulps of its type).
"""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler import parse_module, print_op, verify
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.dialects.nvgpu import MmaSyncOp
from fusecc.driver.cuda_target import compile_program
from fusecc.runtime.cuda.cpu_harness.sanitizer import run_sanitized
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import evaluate, random_input

P_ROUNDING = {"f16": 2.0**-11, "bf16": 2.0**-8, "f32": 0.0}
MANTISSA = {"f16": 10, "bf16": 7, "f32": 23}


def program(t: str, b: int, s: int, tk: int, d: int, dv: int, causal: bool = False, mask: bool = False) -> str:
    q, k, v, o = f"tensor<{b}x{s}x{d}x{t}>", f"tensor<{b}x{tk}x{d}x{t}>", f"tensor<{b}x{tk}x{dv}x{t}>", f"tensor<{b}x{s}x{dv}x{t}>"
    args, operands, types = [f"%q: {q}", f"%k: {k}", f"%v: {v}"], ["%q", "%k", "%v"], [q, k, v]
    if mask:
        args.append(f"%m: tensor<{s}x{tk}x{t}>")
        operands.append("%m")
        types.append(f"tensor<{s}x{tk}x{t}>")
    attrs = " {causal = true}" if causal else ""
    return (f"func.func @main({', '.join(args)}) -> {o} {{\n"
            f"  %0 = tensor.attention {', '.join(operands)}{attrs} : ({', '.join(types)}) -> {o}\n"
            f"  func.return %0 : {o}\n}}\n")


def parsed(text: str):
    module = parse_module(text)
    verify(module)
    return module


def inputs_for(module, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [random_input(t, rng) for t in module.lookup("main").function_type.inputs]


def check(t: str, got, want, v) -> None:
    got, want = got.astype(np.float64), want.astype(np.float64)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(want), 2.0**-14))) - MANTISSA[t])
    bound = P_ROUNDING[t] * np.abs(v.astype(np.float64)).max() * 1.01 + 2 * ulp
    excess = np.abs(got - want) - bound
    assert excess.max() <= 0, f"worst error {np.abs(got - want).max():.3g} exceeds its bound by {excess.max():.3g}"


def mma_kinds(module) -> set[str]:
    return {op.attr("kind") for op in module.walk() if isinstance(op, MmaSyncOp)}


def lowered(text: str, target: str = "h200"):
    module = parsed(text)
    run_pipeline(parse_pipeline(f"fuse{{target={target}}},lower-to-loops{{target={target}}},plan-memory"), module, PassContext(target=target))
    again = parse_module(print_op(module))
    verify(again)
    return again


def test_which_attention_runs_on_tensor_cores():
    assert mma_kinds(lowered(program("f16", 1, 20, 20, 64, 64))) == {"f16"}
    assert mma_kinds(lowered(program("bf16", 1, 20, 20, 64, 64), "a100")) == {"bf16"}
    assert mma_kinds(lowered(program("f32", 1, 20, 20, 64, 64))) == set()  # f32 attention stays on FMA (no TF32 path)
    assert mma_kinds(lowered(program("f16", 1, 20, 20, 256, 64))) == set()  # head dim past MAX_HEAD_DIM


def test_loop_ir_computes_the_reference():
    text = program("f16", 1, 5, 9, 16, 8, causal=True)
    module = parsed(text)
    inputs = inputs_for(module)
    (want,) = evaluate(module, "main", inputs)
    (got,) = run_schedule(lowered(text), "main", inputs)
    check("f16", got, want, inputs[2])


CASES = {  # name: (type, B, S, T, D, Dv, causal, mask), warps per block
    "f16_ragged": (("f16", 2, 70, 90, 64, 40, False, False), 4),
    "bf16_causal_mask_odd_dims": (("bf16", 1, 33, 33, 24, 20, True, True), 2),
    "f16_head_dim_128": (("f16", 1, 17, 129, 128, 128, False, False), 4),
    "f16_one_query": (("f16", 3, 1, 3, 8, 8, False, True), 2),
    "bf16_causal_4_warps": (("bf16", 1, 100, 100, 32, 32, True, False), 4),
}


def test_four_warps_where_the_grid_fills_the_sms_else_two():
    from fusecc.passes.backends.hardware import H200
    from fusecc.passes.lowering.attention import AttentionProblem
    from fusecc.passes.lowering.attention_mma import attention_mma_warps
    from fusecc.dialects.fusion import GroupOp

    def warps(b, s):
        module = lowered_groups(program("f16", b, s, s, 64, 64))
        return attention_mma_warps(AttentionProblem.of(next(op for op in module.walk() if isinstance(op, GroupOp))), H200)

    assert warps(32, 512) == 4  # 256 blocks of 64 rows
    assert warps(8, 512) == 2  # 64 blocks of 64 rows would leave half the SMs idle: 128 of 32


def lowered_groups(text: str):
    module = parsed(text)
    run_pipeline(parse_pipeline("fuse{target=h200}"), module, PassContext(target="h200"))
    return module


@pytest.mark.parametrize("name", sorted(CASES))
def test_sanitized_on_the_harness_against_the_reference(name, cuda_cache_dir, monkeypatch):
    from fusecc.passes.lowering import attention_mma

    (t, *shape), warps = CASES[name]
    monkeypatch.setattr(attention_mma, "attention_mma_warps", lambda problem, hardware: warps)  # both block sizes on small shapes
    text = program(t, *shape)
    module = parsed(text)
    inputs = inputs_for(module)
    (want,) = evaluate(module, "main", inputs)
    source, manifest = compile_program(parsed(text), "main", "sm_90", PassContext(target="h200"))
    assert f"fusecc_mma_{t}(" in source
    assert [launch.block[0] for launch in manifest.launches] == [32 * warps]
    outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
    assert findings == [], "\n".join(map(str, findings))
    check(t, outputs[manifest.outputs[0].name], want, inputs[2])


def test_causal_values_past_the_diagonal_that_are_not_finite(cuda_cache_dir, monkeypatch):
    """0·inf is NaN: an inf in v at a key the causal rule hides still makes
    its column NaN in the rows above it, in the reference; the kernel
    skipped those key tiles and now visits them where v is not finite."""
    from fusecc.passes.lowering import attention_mma

    monkeypatch.setattr(attention_mma, "attention_mma_warps", lambda problem, hardware: 2)  # 32 query rows per block
    text = program("bf16", 1, 200, 200, 16, 16, causal=True)
    inputs = inputs_for(parsed(text))
    inputs[2][0, -1, 0], inputs[2][0, -30, 2] = np.inf, np.nan
    (want,) = evaluate(parsed(text), "main", inputs)
    want = np.asarray(want)
    assert np.isnan(want[0, :199, 0].astype(np.float32)).all()
    source, manifest = compile_program(parsed(text), "main", "sm_90", PassContext(target="h200"))
    outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
    assert findings == [], "\n".join(map(str, findings))
    got = outputs[manifest.outputs[0].name]
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32)))
    finite = np.isfinite(want.astype(np.float32))
    np.testing.assert_array_equal(got[~finite].astype(np.float32), want[~finite].astype(np.float32))  # NaN and the inf row
    check("bf16", got[finite], want[finite], np.where(np.isfinite(inputs[2].astype(np.float32)), inputs[2].astype(np.float32), 0))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_nvrtc_compiles_without_spills(arch, head_dim):
    from fusecc.runtime.cuda import resources
    from fusecc.runtime.cuda.nvrtc import NvrtcUnavailable

    target = "a100" if arch == "sm_80" else "h200"
    source, _ = compile_program(parsed(program("f16", 8, 512, 512, head_dim, head_dim, causal=True)), "main", arch, PassContext(target=target))
    try:
        usage = resources.resource_usage(source, "kernels.cu", arch)
    except NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")
    (attention,) = [u for name, u in usage.items() if "attention" in name]
    assert not attention.spills and attention.registers <= 255
