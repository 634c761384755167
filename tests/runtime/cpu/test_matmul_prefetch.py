"""The CPU matmul's prefetch of the next packed B panel changes no value.

A weight (a constant B) is packed into K×NR panels at load, and each
register tile prefetches its share of the next panel (`matmul.b_prefetch_step`,
`loop.prefetch`): a hint that reaches past the last panel, and past the
buffer, on the last one. Checked on ragged shapes (M, N, K ∈ {1, 3, 17, 129,
384, 1000}) with inputs salted with NaN, ±inf and -0.0, under the epilogues a
transformer gives (bias + GELU, bias + residual) and on merged Q/K/V
projections (concatenated weights and biases): against the reference, and
bit for bit against the same program built without the prefetch.
"""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy

pytest.importorskip("llvmlite")

from test_matmul_kernels import SHAPES, assert_close, program_text, salted  # noqa: E402

from fusecc.compiler.parser import parse_module  # noqa: E402
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline  # noqa: E402
from fusecc.dialects import loop  # noqa: E402
from fusecc.driver.pipelines import pipeline_for_level  # noqa: E402
from fusecc.passes.lowering import matmul as matmul_template  # noqa: E402
from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool  # noqa: E402
from fusecc.runtime.reference import evaluate  # noqa: E402

MR = 8  # the AVX-512 register tile's rows: one tile (M <= MR) has nothing to spread a prefetch over


def residual_text(m: int, k: int, n: int, weights_constant: bool) -> str:
    """y = x @ w + b + r: the attention output and FFN-down epilogue."""
    x, w, bias, y = f"tensor<{m}x{k}xf32>", f"tensor<{k}x{n}xf32>", f"tensor<{n}xf32>", f"tensor<{m}x{n}xf32>"
    body = (f"    %p = tensor.matmul %x, %w : ({x}, {w}) -> {y}\n    %s = tensor.add %p, %b : ({y}, {bias}) -> {y}\n"
            f"    %z = tensor.add %s, %r : ({y}, {y}) -> {y}\n    func.return %z : {y}\n")
    if not weights_constant:
        return f"module {{\n  func.func @main(%x: {x}, %r: {y}, %w: {w}, %b: {bias}) -> {y} {{\n{body}  }}\n}}\n"
    return ('module attributes {fusecc.resources = "w.safetensors"} {\n'
            f"  func.func @main(%x: {x}, %r: {y}) -> {y} {{\n"
            f"    %w = tensor.constant {{value = dense_resource<w> : {w}}} : () -> {w}\n"
            f"    %b = tensor.constant {{value = dense_resource<b> : {bias}}} : () -> {bias}\n{body}  }}\n}}\n")


def qkv_text(m: int, k: int, n: int, weights_constant: bool) -> str:
    """Three projections of one x (q, k, v), which `fuse` merges into one
    matmul on concatenated weights and biases."""
    x, w, bias, y = f"tensor<{m}x{k}xf32>", f"tensor<{k}x{n}xf32>", f"tensor<{n}xf32>", f"tensor<{m}x{n}xf32>"
    body = "".join(f"    %p{i} = tensor.matmul %x, %w{i} : ({x}, {w}) -> {y}\n    %y{i} = tensor.add %p{i}, %b{i} : ({y}, {bias}) -> {y}\n" for i in range(3))
    body += f"    func.return %y0, %y1, %y2 : {y}, {y}, {y}\n"
    if not weights_constant:
        args = ", ".join([f"%x: {x}"] + [f"%w{i}: {w}" for i in range(3)] + [f"%b{i}: {bias}" for i in range(3)])
        return f"module {{\n  func.func @main({args}) -> ({y}, {y}, {y}) {{\n{body}  }}\n}}\n"
    constants = "".join(f"    %w{i} = tensor.constant {{value = dense_resource<w{i}> : {w}}} : () -> {w}\n"
                        f"    %b{i} = tensor.constant {{value = dense_resource<b{i}> : {bias}}} : () -> {bias}\n" for i in range(3))
    return ('module attributes {fusecc.resources = "w.safetensors"} {\n'
            f"  func.func @main(%x: {x}) -> ({y}, {y}, {y}) {{\n{constants}{body}  }}\n}}\n")


def compiled(tmp_path, text: str, weights: dict, prefetch: bool, monkeypatch) -> tuple[CompiledProgram, list[loop.KernelOp]]:
    """The program built for the CPU (with or without the prefetch), and its kernels."""
    folder = tmp_path / ("prefetch" if prefetch else "plain")
    folder.mkdir(exist_ok=True)
    safetensors.numpy.save_file(weights, str(folder / "w.safetensors"))
    path = folder / "m.ir"
    path.write_text(text)
    module = parse_module(text, str(path))
    with monkeypatch.context() as patch:
        if not prefetch:
            patch.setattr(matmul_template, "b_prefetch_step", lambda problem, tiles: 0)
        run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    kernels = [op for op in module.walk() if isinstance(op, loop.KernelOp)]
    return CompiledProgram(module, pool=WorkerPool(2 if prefetch else 1)), kernels


def prefetches(kernels: list[loop.KernelOp]) -> int:
    return sum(isinstance(op, loop.PrefetchOp) for kernel in kernels for op in kernel.walk())


def check(tmp_path, monkeypatch, text_of, m, k, n, weights: dict, inputs_of, reference_inputs_of, seed) -> None:
    """The prefetching program against the reference and, bit for bit,
    against the one without prefetch, on plain and on salted inputs."""
    with_prefetch, kernels = compiled(tmp_path, text_of(m, k, n, True), weights, True, monkeypatch)
    without, plain_kernels = compiled(tmp_path, text_of(m, k, n, True), weights, False, monkeypatch)
    assert prefetches(plain_kernels) == 0
    assert prefetches(kernels) == (1 if m > MR else 0), "one prefetch in the K loop of the matmul kernel, where a block has tiles to spread it over"
    reference = parse_module(text_of(m, k, n, False))
    rng = np.random.default_rng(seed)
    for salt in (False, True):
        inputs = inputs_of(rng, salt)
        got = with_prefetch.run(inputs, "main")
        same = without.run(inputs, "main")
        want = evaluate(reference, "main", reference_inputs_of(inputs))
        for g, s, r in zip(got, same, want):
            np.testing.assert_array_equal(g.view(np.uint32), s.view(np.uint32))
            assert_close(g, np.asarray(r), k)


def draw(rng, shape, salt: bool) -> np.ndarray:
    return salted(rng, shape, 0.01) if salt else rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("m, k, n", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
def test_bias_gelu_with_prefetch_on_ragged_shapes(tmp_path, monkeypatch, m, k, n):
    rng = np.random.default_rng(m * 31 + k * 7 + n)
    weight, bias = salted(rng, (k, n), 0.002), rng.standard_normal(n).astype(np.float32)
    check(tmp_path, monkeypatch, lambda m, k, n, c: program_text(m, k, n, c, True), m, k, n, {"w": weight, "b": bias},
          lambda rng, salt: [draw(rng, (m, k), salt)], lambda inputs: [*inputs, weight, bias], m + k + n)


@pytest.mark.parametrize("m, k, n", [(129, 1000, 17), (384, 129, 1000), (17, 384, 3)], ids=str)
def test_bias_residual_with_prefetch(tmp_path, monkeypatch, m, k, n):
    rng = np.random.default_rng(m + 3 * k + 5 * n)
    weight, bias = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), salted(rng, (n,), 0.05)
    check(tmp_path, monkeypatch, residual_text, m, k, n, {"w": weight, "b": bias},
          lambda rng, salt: [draw(rng, (m, k), salt), draw(rng, (m, n), salt)], lambda inputs: [*inputs, weight, bias], k)


@pytest.mark.parametrize("m, k, n, packed", [(129, 384, 96, True), (17, 1000, 40, False)], ids=str)
def test_merged_qkv_with_prefetch(tmp_path, monkeypatch, m, k, n, packed):
    """Pieces of 96 columns (on 32-wide panel edges: the concatenated weight
    is packed, and prefetched) and of 40 (not: read in place, piece by
    piece, `with_packing`)."""
    rng = np.random.default_rng(k + n)
    weights = {f"w{i}": (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32) for i in range(3)}
    weights |= {f"b{i}": rng.standard_normal(n).astype(np.float32) for i in range(3)}
    with_prefetch, kernels = compiled(tmp_path, qkv_text(m, k, n, True), weights, True, monkeypatch)
    without, _ = compiled(tmp_path, qkv_text(m, k, n, True), weights, False, monkeypatch)
    reference = parse_module(qkv_text(m, k, n, False))
    names = [kernel.sym_name for kernel in kernels]
    assert sum(name.endswith("_matmul") for name in names) == 1, f"the siblings are one matmul: {names}"
    assert prefetches(kernels) == (3 if packed else 0), "one in each piece's copy of the loops"
    for salt in (False, True):
        x = draw(rng, (m, k), salt)
        got, same = with_prefetch.run([x], "main"), without.run([x], "main")
        want = evaluate(reference, "main", [x] + [weights[f"w{i}"] for i in range(3)] + [weights[f"b{i}"] for i in range(3)])
        for g, s, r in zip(got, same, want):
            np.testing.assert_array_equal(g.view(np.uint32), s.view(np.uint32))
            assert_close(g, np.asarray(r), k)



def test_the_interpreter_skips_prefetches_and_agrees_bit_for_bit(tmp_path, monkeypatch):
    """The loop interpreter runs the prefetching kernel (the hint past the
    last panel included) and gives the compiled program's bits."""
    from fusecc.runtime.loop_interpreter import run_schedule

    m, k, n = 17, 3, 40
    rng = np.random.default_rng(11)
    weights = {"w": rng.standard_normal((k, n)).astype(np.float32), "b": rng.standard_normal(n).astype(np.float32)}
    program, kernels = compiled(tmp_path, program_text(m, k, n, True, False), weights, True, monkeypatch)
    assert prefetches(kernels) == 1
    x = salted(rng, (m, k), 0.05)
    (got,) = program.run([x], "main")
    (want,) = run_schedule(program.module, "main", [x])
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(want, np.float32).view(np.uint32))


def test_a_b_with_runtime_k_packed_per_call_is_prefetched_and_matches(tmp_path):
    """A `?`-dim B with long rows (K hinted at 2048) is packed per call into a
    `?`-sized scratch; the prefetch offsets use the runtime K. Run at ragged
    sizes, salted, against the reference."""
    import fusecc
    from fusecc.compiler.dims import shape_hints

    path = tmp_path / "dynamic.ir"
    path.write_text(
        'func.func @main(%x: tensor<?x?xf32>, %y: tensor<?x?xf32>) -> tensor<?x?xf32> attributes {fusecc.dims = [["M", "K"], ["K", "N"]]} {\n'
        "  %0 = tensor.matmul %x, %y : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>\n"
        "  func.return %0 : tensor<?x?xf32>\n}\n"
    )
    with shape_hints({"M": 256, "K": 2048, "N": 64}):
        program = fusecc.compile(str(path), target="cpu")
        reference = fusecc.compile(str(path), target="reference")
        assert program.kernels == ["fused_0_matmul_pack_b", "fused_0_matmul"]
        # one per copy of the register tile: whole or ragged rows × whole or ragged column panel
        assert prefetches([op for op in program._compiled.module.walk() if isinstance(op, loop.KernelOp)]) == 4
        rng = np.random.default_rng(3)
        for m, k, n in [(17, 1000, 40), (129, 3, 1), (384, 129, 17)]:
            x, y = salted(rng, (m, k), 0.01), rng.standard_normal((k, n)).astype(np.float32)
            assert_close(program(x=x, y=y)["result0"], reference(x=x, y=y)["result0"], k)
