"""CPU matmuls whose right operand has `?` dims (docs/dynamic-shapes.md): N
and K are runtime extents, B is read in place (an activation, not a weight
packed at load), and only the last column panel and the last row tile check
their indices. Each program is compiled once and run at several sizes (1 and
primes among them) against the reference interpreter."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import fusecc

SIZES = [(1, 1, 1), (3, 5, 7), (13, 17, 41), (67, 33, 97)]  # (M, K, N)

PRODUCTS = {
    "plain": (
        """func.func @main(%x: tensor<?x?xf32>, %y: tensor<?x?xf32>) -> tensor<?x?xf32> attributes {fusecc.dims = [["M", "K"], ["K", "N"]]} {
  %0 = tensor.matmul %x, %y : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %0 : tensor<?x?xf32>
}""",
        lambda m, k, n: [(m, k), (k, n)],
    ),
    "transposed": (
        """func.func @main(%x: tensor<?x?xf32>, %y: tensor<?x?xf32>) -> tensor<?x?xf32> attributes {fusecc.dims = [["K", "M"], ["N", "K"]]} {
  %0 = tensor.matmul %x, %y {transpose_a = true, transpose_b = true} : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %0 : tensor<?x?xf32>
}""",
        lambda m, k, n: [(k, m), (n, k)],
    ),
    "broadcast_batch": (
        """func.func @main(%x: tensor<?x3x?x?xf32>, %y: tensor<?x?xf32>) -> tensor<?x3x?x?xf32> attributes {fusecc.dims = [["B", "M", "K"], ["K", "N"]]} {
  %0 = tensor.matmul %x, %y : (tensor<?x3x?x?xf32>, tensor<?x?xf32>) -> tensor<?x3x?x?xf32>
  func.return %0 : tensor<?x3x?x?xf32>
}""",
        lambda m, k, n: [(2, 3, m, k), (k, n)],
    ),
    "matrix_vector": (
        """func.func @main(%x: tensor<?x?xf32>, %y: tensor<?xf32>) -> tensor<?xf32> attributes {fusecc.dims = [["M", "K"], ["K"]]} {
  %0 = tensor.matmul %x, %y : (tensor<?x?xf32>, tensor<?xf32>) -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}""",
        lambda m, k, n: [(m, k), (k,)],
    ),
    "vector_matrix_bias_gelu": (
        """func.func @main(%x: tensor<?xf32>, %y: tensor<?x?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> attributes {fusecc.dims = [["K"], ["K", "N"], ["N"]]} {
  %0 = tensor.matmul %x, %y : (tensor<?xf32>, tensor<?x?xf32>) -> tensor<?xf32>
  %1 = tensor.add %0, %b : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %2 = tensor.gelu %1 : (tensor<?xf32>) -> tensor<?xf32>
  func.return %2 : tensor<?xf32>
}""",
        lambda m, k, n: [(k,), (k, n), (n,)],
    ),
    # siblings sharing x with `?` widths: not merged on concatenated B
    # (the pieces would start at sums of dims), one horizontal group
    "siblings": (
        """func.func @main(%x: tensor<?x?xf32>, %y: tensor<?x?xf32>, %z: tensor<?x?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) attributes {fusecc.dims = [["M", "K"], ["K", "N"], ["K", "N"]]} {
  %0 = tensor.matmul %x, %y : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  %1 = tensor.matmul %x, %z : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %0, %1 : tensor<?x?xf32>, tensor<?x?xf32>
}""",
        lambda m, k, n: [(m, k), (k, n), (k, n)],
    ),
}


@pytest.mark.parametrize("name", list(PRODUCTS))
def test_a_product_with_runtime_m_n_and_k_compiles_once_and_matches_the_reference(tmp_path, name):
    text, shapes = PRODUCTS[name]
    path = tmp_path / f"{name}.ir"
    path.write_text(text)
    program = fusecc.compile(str(path), target="cpu")
    reference = fusecc.compile(str(path), target="reference")
    rng = np.random.default_rng(5)
    for m, k, n in SIZES:
        args = {arg: rng.standard_normal(shape).astype(np.float32) for arg, shape in zip(program.inputs, shapes(m, k, n), strict=True)}
        got, expected = program(**args), reference(**args)
        for key in expected:
            assert got[key].shape == expected[key].shape
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-5, err_msg=f"{key} at M={m}, K={k}, N={n}")
    assert program.stats.compilations == 1
    assert program.stats.calls == len(SIZES)


BERT_ATTENTION = pathlib.Path(__file__).parent / "inputs" / "bert_attention_dynamic.ir"


def test_bert_style_attention_runs_q_kt_and_p_v_as_matmuls_with_runtime_sizes():
    """Scores and context as 3-D matmuls over 4*B heads (the PyTorch trace's
    shape): `q @ kᵀ` has N = S from the right operand, `p @ v` has K = S."""
    program = fusecc.compile(str(BERT_ATTENTION), target="cpu")
    reference = fusecc.compile(str(BERT_ATTENTION), target="reference")
    kinds = [k.split("_")[-1] for k in program.kernels]  # fused_<id>_<kind>, or ..._pack_a
    assert "attention" not in kinds and kinds.count("matmul") == 3  # projection, scores, context
    rng = np.random.default_rng(2)
    wqkv = (rng.standard_normal((64, 192)) * 0.2).astype(np.float32)
    bqkv = (rng.standard_normal(192) * 0.1).astype(np.float32)
    for batch, seq in [(1, 1), (1, 7), (3, 13), (2, 128), (5, 97)]:
        mask = (rng.random((batch, seq)) > 0.2).astype(np.float32)
        mask[:, 0] = 1.0  # every row attends to something
        x = (rng.standard_normal((batch, seq, 64)) * 0.5).astype(np.float32)
        (got,), (expected,) = program(x=x, mask=mask, wqkv=wqkv, bqkv=bqkv).values(), reference(x=x, mask=mask, wqkv=wqkv, bqkv=bqkv).values()
        assert got.shape == (batch, seq, 64)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=f"B={batch}, S={seq}")
    assert program.stats.compilations == 1


def test_a_b_with_dynamic_dims_is_packed_per_call_never_at_load():
    """Only constants are packed once at load. kᵀ (B of the scores, read
    through a transpose) is an activation with `?` dims: its panels are
    packed by a per-call kernel into a `?`-sized scratch; a plain `?` B
    of a short product is read in place."""
    program = fusecc.compile(str(BERT_ATTENTION), target="cpu")
    assert "fused_1_matmul_pack_b" in program.kernels  # the scores' kᵀ
    assert program._compiled.prepare(program.entry).load_launches == 0
    x = np.ones((2, 5, 64), np.float32)
    args = dict(x=x, mask=np.ones((2, 5), np.float32), wqkv=np.full((64, 192), 0.01, np.float32), bqkv=np.zeros(192, np.float32))
    np.testing.assert_allclose(program(**args)["result0"], fusecc.compile(str(BERT_ATTENTION), target="reference")(**args)["result0"], rtol=1e-5, atol=1e-6)
