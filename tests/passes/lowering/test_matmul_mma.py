"""The tensor-core matmul template (passes/lowering/matmul_mma.py).

* which matmuls it takes: f16/bf16 on sm_80+, f32 only with allow-tf32;
* the loop interpreter runs its loop IR against the reference;
* the CUDA C runs sanitized on the CPU harness against the reference, with
  ragged M, N, K (1, 3, 17, 129, 384), fused epilogues (bias, GELU,
  residual), batches, transposed and concatenated operands;
* NVRTC compiles it for sm_80 and sm_90 without spills.

Tolerances (docs/cuda-tensor-cores.md): f16/bf16 inputs are exact and the
kernel rounds where the reference does, so results differ by the rounding
of sums taken in another order: up to 2 ulps of the storage type at the
size of the largest product. TF32 rounds the inputs to 10 mantissa bits: the
error of a product sum is at most 2^-10 · (|A|·|B|) (+ the f32 sums').
"""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler import parse_module, print_op, verify
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.types import bf16
from fusecc.dialects.nvgpu import MmaSyncOp
from fusecc.driver.cuda_target import compile_program
from fusecc.passes.backends.hardware import A100, H200, Hardware
from fusecc.passes.lowering.matmul_mma import MMA_TILES, choose_mma_tiles, mma_resources
from fusecc.runtime.cuda.cpu_harness.sanitizer import run_sanitized
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import evaluate, random_input

ELEMENT = {"f16": "f16", "bf16": "bf16", "tf32": "f32"}


def program(kind: str, m: int, n: int, k: int, epilogue: str = "bias_gelu_residual", batch: int = 0, transpose_b: bool = False) -> str:
    t = ELEMENT[kind]
    pre = f"{batch}x" if batch else ""
    a, r = f"tensor<{pre}{m}x{k}x{t}>", f"tensor<{pre}{m}x{n}x{t}>"
    b = f"tensor<{n}x{k}x{t}>" if transpose_b else f"tensor<{k}x{n}x{t}>"
    attrs = " {transpose_b = true}" if transpose_b else ""
    lines = [f"  %0 = tensor.matmul %a, %b{attrs} : ({a}, {b}) -> {r}"]
    args = [f"%a: {a}", f"%b: {b}"]
    last = "%0"
    if epilogue != "none":
        args.append(f"%bias: tensor<{n}x{t}>")
        lines.append(f"  %1 = tensor.add %0, %bias : ({r}, tensor<{n}x{t}>) -> {r}")
        last = "%1"
    if epilogue == "bias_gelu_residual":
        args.append(f"%res: {r}")
        lines.append(f"  %2 = tensor.gelu %1 : ({r}) -> {r}")
        lines.append(f"  %3 = tensor.add %2, %res : ({r}, {r}) -> {r}")
        last = "%3"
    body = "\n".join(lines)
    return f"func.func @main({', '.join(args)}) -> {r} {{\n{body}\n  func.return {last} : {r}\n}}\n"


def parsed(text: str):
    module = parse_module(text)
    verify(module)
    return module


def context(allow_tf32: bool, target: str = "h200") -> PassContext:
    return PassContext(target=target, allow_tf32=allow_tf32)


def inputs_for(module, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [random_input(t, rng) for t in module.lookup("main").function_type.inputs]


def mma_kinds(module) -> set[str]:
    return {op.attr("kind") for op in module.walk() if isinstance(op, MmaSyncOp)}


def lowered(text: str, allow_tf32: bool = False, target: str = "h200"):
    module = parsed(text)
    run_pipeline(parse_pipeline(f"fuse{{target={target}}},lower-to-loops{{target={target}}},plan-memory"), module, context(allow_tf32, target))
    again = parse_module(print_op(module))  # the printed loop IR is what runs
    verify(again)
    return again


def ulp(x, kind: str) -> np.ndarray:
    """The spacing of the storage type at |x| (TF32 results are f32)."""
    mantissa = {"f16": 10, "bf16": 7, "tf32": 23}[kind]
    exponent = np.floor(np.log2(np.maximum(np.abs(x).astype(np.float64), 2.0**-14)))
    return 2.0 ** (exponent - mantissa)


def check(kind: str, got: np.ndarray, want: np.ndarray, module, inputs) -> None:
    """got vs want within the tolerance of the module docstring."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    a, b = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    if b.shape[-2] != a.shape[-1]:
        b = np.swapaxes(b, -1, -2)  # transposed B
    magnitude = np.abs(a) @ np.abs(b)  # what each product sum can err relative to
    if kind == "tf32":
        bound = 1.2 * (2.0**-10 + a.shape[-1] * 2.0**-23) * magnitude + 1e-6 * np.abs(want)  # 1.2: GELU's slope is below 1.13
    else:
        bound = 2 * ulp(magnitude.max(), kind) + 2 * ulp(want, kind)
    excess = np.abs(got - want) - bound
    assert excess.max() <= 0, f"{kind}: worst error {np.abs(got - want).max():.3g} exceeds its bound by {excess.max():.3g}"


# --------------------------------------------------------------------------- selection


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_half_precision_matmuls_use_tensor_cores_on_sm80_and_sm90(kind):
    for target in ("h200", "a100"):
        assert mma_kinds(lowered(program(kind, 17, 9, 33), target=target)) == {kind}


def test_f32_matmuls_use_tf32_only_when_allowed():
    text = program("tf32", 17, 9, 33)
    assert mma_kinds(lowered(text)) == set()  # the default f32 path: FMA, unchanged
    assert mma_kinds(lowered(text, allow_tf32=True)) == {"tf32"}


def test_the_lowering_pass_option_allows_tf32_too():
    module = parsed(program("tf32", 5, 6, 7, "none"))
    run_pipeline(parse_pipeline("fuse{target=h200},lower-to-loops{target=h200 allow-tf32=true}"), module, PassContext(target="h200"))
    assert mma_kinds(module) == {"tf32"}


def test_integer_matmuls_and_the_cpu_stay_off_tensor_cores():
    assert mma_kinds(lowered(program("f16", 8, 8, 16), target="cpu")) == set()
    ints = "func.func @main(%a: tensor<16x16xi32>, %b: tensor<16x8xi32>) -> tensor<16x8xi32> {\n  %0 = tensor.matmul %a, %b : (tensor<16x16xi32>, tensor<16x8xi32>) -> tensor<16x8xi32>\n  func.return %0 : tensor<16x8xi32>\n}\n"
    assert mma_kinds(lowered(ints, allow_tf32=True)) == set()


def test_tiles_fill_the_sms_and_fit_every_gpu():
    for hardware in (H200, A100):
        for tiles in MMA_TILES:
            for kind in ("f16", "bf16", "tf32"):
                r = mma_resources(tiles, kind)
                assert r.shared_bytes <= 48 * 1024 and r.registers_per_thread * r.threads <= hardware.registers_per_sm
    big = parsed(program("f16", 4096, 4096, 64, "none")).lookup("main")
    from fusecc.passes.lowering.matmul import MatmulProblem
    from fusecc.dialects import tensor as T

    op = next(o for o in big.walk() if isinstance(o, T.MatmulOp))
    assert choose_mma_tiles(MatmulProblem.of_op(op), H200) == MMA_TILES[0]  # 1024 blocks of 128x128
    small_problem = MatmulProblem.of_op(next(o for o in parsed(program("f16", 64, 64, 64, "none")).walk() if isinstance(o, T.MatmulOp)))
    assert choose_mma_tiles(small_problem, H200) == MMA_TILES[-1]  # too few blocks for any: the smallest tile


# --------------------------------------------------------------------------- the loop interpreter


@pytest.mark.parametrize("kind", ["f16", "bf16", "tf32"])
def test_loop_ir_computes_the_reference(kind):
    text = program(kind, 17, 9, 20)
    module = parsed(text)
    inputs = inputs_for(module)
    (want,) = evaluate(module, "main", inputs)
    loop_ir = lowered(text, allow_tf32=True)
    assert mma_kinds(loop_ir) == {kind}
    (got,) = run_schedule(loop_ir, "main", inputs)
    check(kind, got, want, module, inputs)


# --------------------------------------------------------------------------- the CUDA C, sanitized on the CPU harness

SHAPES = [  # (M, N, K): every size of {1, 3, 17, 129, 384} on every axis
    (1, 384, 17),
    (3, 17, 384),
    (17, 129, 3),
    (129, 3, 129),
    (384, 1, 1),
]


def run_cuda(text: str, allow_tf32: bool, cache_dir, seed: int = 0):
    module = parsed(text)
    inputs = inputs_for(module, seed)
    (want,) = evaluate(module, "main", inputs)
    source, manifest = compile_program(parsed(text), "main", "sm_90", context(allow_tf32))
    outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cache_dir)
    assert findings == [], "\n".join(map(str, findings))
    return source, outputs[manifest.outputs[0].name], want, module, inputs


@pytest.mark.parametrize("kind", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ragged_matmuls_with_fused_epilogues_run_clean_and_right(kind, shape, cuda_cache_dir):
    source, got, want, module, inputs = run_cuda(program(kind, *shape), True, cuda_cache_dir)
    assert f"fusecc_mma_{kind}(" in source and source.count("__global__") == 1  # one kernel: the epilogue is fused
    check(kind, got, want, module, inputs)


@pytest.mark.parametrize("kind", ["f16", "tf32"])
def test_batched_and_transposed_operands(kind, cuda_cache_dir):
    _, got, want, module, inputs = run_cuda(program(kind, 37, 70, 45, "bias", batch=2, transpose_b=True), True, cuda_cache_dir)
    check(kind, got, want, module, inputs)


def test_concatenated_weights_are_read_piece_by_piece(cuda_cache_dir):
    # sibling projections merged on concatenated weights: N is cut into spans
    text = """func.func @main(%x: tensor<40x48xf16>, %wq: tensor<48x24xf16>, %wk: tensor<48x40xf16>, %bq: tensor<24xf16>, %bk: tensor<40xf16>) -> tensor<40x64xf16> {
  %w = tensor.concat %wq, %wk {axis = 1} : (tensor<48x24xf16>, tensor<48x40xf16>) -> tensor<48x64xf16>
  %b = tensor.concat %bq, %bk {axis = 0} : (tensor<24xf16>, tensor<40xf16>) -> tensor<64xf16>
  %0 = tensor.matmul %x, %w : (tensor<40x48xf16>, tensor<48x64xf16>) -> tensor<40x64xf16>
  %1 = tensor.add %0, %b : (tensor<40x64xf16>, tensor<64xf16>) -> tensor<40x64xf16>
  func.return %1 : tensor<40x64xf16>
}
"""
    module = parsed(text)
    inputs = inputs_for(module)
    (want,) = evaluate(module, "main", inputs)
    source, manifest = compile_program(parsed(text), "main", "sm_90", context(False))
    assert "fusecc_mma_f16(" in source
    outputs, findings = run_sanitized(manifest, source, inputs, cache_dir=cuda_cache_dir)
    assert findings == []
    weights = np.concatenate([inputs[1], inputs[2]], axis=1)
    check("f16", outputs[manifest.outputs[0].name], want, module, [inputs[0], weights])


def test_the_default_f32_path_is_unchanged_without_the_flag(cuda_cache_dir):
    text = program("tf32", 17, 9, 33)
    plain, _ = compile_program(parsed(text), "main", "sm_90", context(False))
    assert "mma" not in plain
    allowed, _ = compile_program(parsed(text), "main", "sm_90", context(True))
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in allowed and "cvt.rna.tf32.f32" in allowed


# --------------------------------------------------------------------------- NVRTC and ptxas


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("kind", ["f16", "bf16", "tf32"])
def test_nvrtc_compiles_every_tile_without_spills(kind, arch):
    from fusecc.runtime.cuda import resources
    from fusecc.runtime.cuda.nvrtc import NvrtcUnavailable

    target = "a100" if arch == "sm_80" else "h200"
    # one problem per tile of MMA_TILES (the fullest that still fills the SMs)
    sizes = {MMA_TILES[0]: (2048, 2048), MMA_TILES[1]: (1024, 1536), MMA_TILES[2]: (512, 1024), MMA_TILES[3]: (129, 384)}
    for tiles, (m, n) in sizes.items():
        text = program(kind, m, n, 64)
        source, _ = compile_program(parsed(text), "main", arch, context(True, target))
        try:
            usage = resources.resource_usage(source, "kernels.cu", arch)
        except NvrtcUnavailable as exc:
            pytest.skip(f"NVRTC unavailable: {exc}")
        (matmul,) = [u for name, u in usage.items() if "matmul" in name]
        assert not matmul.spills, (tiles, matmul)
        assert matmul.registers <= 255


# --------------------------------------------------------------------------- shared-memory banks (offline counters)


@pytest.mark.parametrize(
    "kind, transpose_a, transpose_b, m, n",
    [("f16", False, False, 256, 512), ("bf16", True, False, 256, 512), ("f16", False, True, 256, 512), ("tf32", False, False, 256, 512), ("f16", False, False, 2048, 2048)],
)
def test_staging_and_fragment_reads_are_free_of_bank_conflicts(kind, transpose_a, transpose_b, m, n, cuda_cache_dir):
    # both tile layouts (k contiguous, k-major) and every tile size: 1.0 ways
    # over the whole kernel (global loads, shared stores, fragment reads)
    from fusecc.driver.cuda_level import build_manifest
    from fusecc.driver.cuda_target import lower_to_cuda
    from fusecc.runtime.cuda.counters import kernel_counters

    t = ELEMENT[kind]
    a = f"tensor<128x{m}x{t}>" if transpose_a else f"tensor<{m}x128x{t}>"
    b = f"tensor<{n}x128x{t}>" if transpose_b else f"tensor<128x{n}x{t}>"
    attrs = ", ".join(x for x, on in (("transpose_a = true", transpose_a), ("transpose_b = true", transpose_b)) if on)
    text = (f"func.func @main(%a: {a}, %b: {b}) -> tensor<{m}x{n}x{t}> {{\n"
            f"  %0 = tensor.matmul %a, %b{' {' + attrs + '}' if attrs else ''} : ({a}, {b}) -> tensor<{m}x{n}x{t}>\n"
            f"  func.return %0 : tensor<{m}x{n}x{t}>\n}}\n")
    module = parsed(text)
    cuda = lower_to_cuda(module, "sm_90", context(True))
    assert f"fusecc_mma_{kind}(" in cuda.text
    manifest = build_manifest(module, cuda, "kernels.cu", "sm_90", "main")
    (row,) = kernel_counters(cuda, manifest, inputs_for(parsed(text)), H200, cache_dir=cuda_cache_dir)
    assert row.shared_bank_conflict_ways == pytest.approx(1.0, abs=0.01)
    assert row.spills in (0, None)
