"""The CPU matmul kernels against the reference, on ragged shapes.

The register tile (8 rows × 2 vectors, `cpu_matmul_tiles.choose_cpu_matmul_tiles`),
the FMA accumulation (`math.fma`), B packed at load when it is a constant
and read in place or packed per call when it is an argument
(`matmul.with_packing`), with the bias + GELU-erf epilogue in registers:
each path on shapes drawn from M, N, K ∈ {1, 3, 17, 129, 384, 1000}
(every size on every axis at least once, ragged against the 8-row and
32-column tiles and the 64×256 blocks), on 1 and 2 threads, and on inputs
salted with NaN, ±inf and -0.0. Small shapes are also checked bit for bit
against the loop interpreter, whose `math.fma` rounds once as the FMA
instruction does.
"""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy

pytest.importorskip("llvmlite")

from numerics import salted  # noqa: E402  (tests/numerics.py)

from fusecc.compiler.parser import parse_module  # noqa: E402
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline  # noqa: E402
from fusecc.dialects import loop  # noqa: E402
from fusecc.driver.pipelines import pipeline_for_level  # noqa: E402
from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool  # noqa: E402
from fusecc.runtime.cpu.load_time import load_time_launches  # noqa: E402
from fusecc.runtime.loop_interpreter import run_schedule  # noqa: E402
from fusecc.runtime.reference import evaluate  # noqa: E402

SIZES = (1, 3, 17, 129, 384, 1000)
# (M, K, N): every size on every axis, small and large mixed.
SHAPES = [(1, 384, 1000), (3, 1000, 17), (17, 3, 129), (129, 17, 384), (384, 129, 3), (1000, 1, 1), (129, 384, 1000), (17, 129, 3)]
assert all(set(SIZES) == {s[axis] for s in SHAPES} for axis in range(3))


def program_text(m: int, k: int, n: int, weights_constant: bool, gelu: bool) -> str:
    x, w, bias, y = f"tensor<{m}x{k}xf32>", f"tensor<{k}x{n}xf32>", f"tensor<{n}xf32>", f"tensor<{m}x{n}xf32>"
    body = f"    %p = tensor.matmul %x, %w : ({x}, {w}) -> {y}\n    %s = tensor.add %p, %b : ({y}, {bias}) -> {y}\n"
    body += f"    %z = tensor.gelu %s : ({y}) -> {y}\n" if gelu else f"    %z = tensor.neg %s : ({y}) -> {y}\n"
    body += f"    func.return %z : {y}\n"
    if not weights_constant:
        return f"module {{\n  func.func @main(%x: {x}, %w: {w}, %b: {bias}) -> {y} {{\n{body}  }}\n}}\n"
    return (
        'module attributes {fusecc.resources = "w.safetensors"} {\n'
        f"  func.func @main(%x: {x}) -> {y} {{\n"
        f"    %w = tensor.constant {{value = dense_resource<w> : {w}}} : () -> {w}\n"
        f"    %b = tensor.constant {{value = dense_resource<b> : {bias}}} : () -> {bias}\n{body}  }}\n}}\n"
    )


def build(tmp_path, m, k, n, weights_constant, gelu, weight, bias, threads):
    path = tmp_path / "m.ir"
    text = program_text(m, k, n, weights_constant, gelu)
    if weights_constant:
        safetensors.numpy.save_file({"w": weight, "b": bias}, str(tmp_path / "w.safetensors"))
    path.write_text(text)
    module = parse_module(text, str(path))
    reference = parse_module(program_text(m, k, n, False, gelu))
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    return module, reference, CompiledProgram(module, pool=WorkerPool(threads))


def assert_close(got: np.ndarray, want: np.ndarray, k: int) -> None:
    """Same NaN and infinity places; finite values within the rounding of a
    K-term sum of products of the operands' size (f32 against the
    reference's own arithmetic), and GELU's few ulp."""
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=4e-6 * scale * max(1.0, np.sqrt(k)))


@pytest.mark.parametrize("weights_constant", [True, False], ids=["constant-weights", "weights-as-arguments"])
@pytest.mark.parametrize("m, k, n", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
def test_matmul_bias_gelu_matches_the_reference_on_ragged_shapes(tmp_path, m, k, n, weights_constant):
    rng = np.random.default_rng(m * 1_000_003 + k * 1009 + n)
    weight = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    threads = 2 if (m + n) % 2 else 1
    module, reference, program = build(tmp_path, m, k, n, weights_constant, True, weight, bias, threads)
    # a constant B, however short its rows, is packed, by a launch run at load
    (schedule,) = [op for op in module.walk() if isinstance(op, loop.ScheduleOp)]
    packs_at_load = [op.kernel_name for op in load_time_launches(schedule)]
    assert packs_at_load == (["fused_0_matmul_pack_b"] if weights_constant else [])
    for x in (rng.standard_normal((m, k)).astype(np.float32), salted(rng, (m, k))):
        (want,) = evaluate(reference, "main", [x, weight, bias])
        (got,) = program.run([x] if weights_constant else [x, weight, bias], "main")
        assert_close(got, np.asarray(want), k)


@pytest.mark.parametrize("weights_constant", [True, False], ids=["constant-weights", "weights-as-arguments"])
def test_salted_weights_and_bias(tmp_path, weights_constant):
    """NaN, ±inf and -0.0 in the weights and the bias too (a constant B goes
    through the pack kernel run at load)."""
    m, k, n = 17, 129, 384
    rng = np.random.default_rng(5)
    weight, bias = salted(rng, (k, n), 0.002), salted(rng, (n,), 0.02)
    _, reference, program = build(tmp_path, m, k, n, weights_constant, False, weight, bias, 2)
    x = salted(rng, (m, k), 0.002)
    (want,) = evaluate(reference, "main", [x, weight, bias])
    (got,) = program.run([x] if weights_constant else [x, weight, bias], "main")
    assert_close(got, np.asarray(want), k)


def test_signed_zeros_of_an_empty_sum_of_products():
    """Rows of A that are all -0.0 give products of ±0: the accumulator
    starts at +0.0 and FMA(-0, w, +0) is +0.0, so the product is +0.0 and
    -(+0 + 0) is -0.0 exactly where the reference has it."""
    m, k, n = 3, 17, 129
    rng = np.random.default_rng(7)
    module = parse_module(program_text(m, k, n, False, False))
    reference = parse_module(program_text(m, k, n, False, False))
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[1] = -0.0
    weight, bias = rng.standard_normal((k, n)).astype(np.float32), np.zeros(n, np.float32)
    (got,) = CompiledProgram(module, pool=WorkerPool(1)).run([x, weight, bias], "main")
    (want,) = evaluate(reference, "main", [x, weight, bias])
    np.testing.assert_array_equal(np.signbit(got[1]), np.signbit(np.asarray(want)[1]))


@pytest.mark.parametrize("m, k, n", [(3, 17, 40), (17, 3, 33), (1, 17, 3)])
def test_compiled_kernels_equal_the_loop_interpreter_bit_for_bit(m, k, n):
    """`math.fma` is one rounding in both: the LLVM FMA and the
    interpreter's round-to-odd double sum give the same bits."""
    text = program_text(m, k, n, False, False)
    module = parse_module(text)
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    assert any(op.name == "math.fma" for op in module.walk()), "the matmul accumulates with math.fma"
    assert any(isinstance(op, loop.KernelOp) for op in module.walk())
    rng = np.random.default_rng(m + k + n)
    inputs = [salted(rng, (m, k), 0.05), rng.standard_normal((k, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)]
    (got,) = CompiledProgram(module, pool=WorkerPool(1)).run(inputs, "main")
    (want,) = run_schedule(module, "main", inputs)
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(want, np.float32).view(np.uint32))


def test_compiled_programs_are_reused_by_constant_content_not_by_its_text():
    """compile_program keys its in-process cache on the module printed with
    large inline constants as a digest of their bytes (printing a model's
    weights as hex cost most of a warm compile): the same content hits, a
    changed element misses."""
    from fusecc.compiler import attributes as A
    from fusecc.compiler.printer import print_op
    from fusecc.compiler.types import TensorType, f32
    from fusecc.runtime.cpu.executor import compile_program

    def module_with(weight: np.ndarray):
        body = A.dense(weight, TensorType(weight.shape, f32)).format_body()
        text = (
            "func.func @main(%x: tensor<3x40xf32>) -> tensor<3x40xf32> {\n"
            f"  %w = tensor.constant {{value = dense<{body}> : tensor<40x40xf32>}} : () -> tensor<40x40xf32>\n"
            "  %y = tensor.matmul %x, %w : (tensor<3x40xf32>, tensor<40x40xf32>) -> tensor<3x40xf32>\n"
            "  func.return %y : tensor<3x40xf32>\n}\n"
        )
        module = parse_module(text)
        run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
        return module

    weight = np.random.default_rng(2).standard_normal((40, 40)).astype(np.float32)
    changed = weight.copy()
    changed[39, 39] += 1.0
    first, same, other = module_with(weight), module_with(weight.copy()), module_with(changed)
    digest_text = print_op(first, digest_elements=True)
    assert "dense<#" in digest_text and len(digest_text) < len(print_op(first)) // 2
    assert compile_program(first) is compile_program(same)
    assert compile_program(other) is not compile_program(first)
    x = np.ones((3, 40), np.float32)
    np.testing.assert_array_equal(compile_program(other).run([x], "main")[0] - compile_program(first).run([x], "main")[0] != 0, np.eye(40, dtype=bool)[39][None].repeat(3, 0))
