"""ONNX models wherever an .ir is: `fusecc import`, `fusecc run`, `fusecc
report` and `fusecc model.onnx -o kernels.cu`; npz keys are graph names."""

from __future__ import annotations

import numpy as np
from onnx_models import FLOAT, initializer, node, onnxruntime_outputs, save, value

from fusecc.compiler import parse_module
from fusecc.tools.fusecc import main as fusecc_main

rng = np.random.default_rng(1)


def small_mlp(folder):
    w = rng.standard_normal((16, 32)).astype(np.float32)  # 2 KiB: goes to the weights file
    nodes = [
        node("MatMul", ["input.1", "w"], ["h"], name="/fc/MatMul"),
        node("Relu", ["h"], ["hidden::0"], name="/act/Relu"),
        node("ReduceSum", ["hidden::0", "axes"], ["total"], name="/sum", keepdims=0),
    ]
    inputs = [value("input.1", FLOAT, ["batch", 16])]
    outputs = [value("hidden::0", FLOAT, None), value("total", FLOAT, None)]
    return save(folder, nodes, inputs, outputs, [initializer("w", w), initializer("axes", np.array([1], np.int64))])


def test_import_writes_ir_and_weights_that_run_like_the_model(tmp_path, capsys):
    model = small_mlp(tmp_path)
    out = tmp_path / "mlp.ir"
    assert fusecc_main(["import", str(model), "-o", str(out), "--shape", "input.1=3x16"]) == 0
    text = out.read_text()
    assert "dense_resource<w>" in text and (tmp_path / "mlp.safetensors").exists()
    assert 'onnx.inputs = ["input.1"]' in text and 'onnx.outputs = ["hidden::0", "total"]' in text
    assert 'tensor.matmul %input.1, %w : (tensor<3x16xf32>, tensor<16x32xf32>) -> tensor<3x32xf32> loc("/fc/MatMul")' in text
    parse_module(text, str(out))
    x = rng.standard_normal((3, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{"input.1": x})
    expected = onnxruntime_outputs(model, {"input.1": x})
    for program in (out, model):
        result = tmp_path / "out.npz"
        extra = ["--shape", "batch=3"] if program == model else []
        assert fusecc_main(["run", str(program), "--inputs", str(tmp_path / "in.npz"), "-o", str(result), "--target", "cpu", *extra]) == 0
        with np.load(result) as got:
            assert sorted(got.files) == ["hidden::0", "total"]
            np.testing.assert_allclose(got["hidden::0"], expected[0], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["total"], expected[1], rtol=1e-5, atol=1e-4)
    capsys.readouterr()


def test_report_and_cuda_c_take_an_onnx_model(tmp_path, capsys):
    model = small_mlp(tmp_path)
    assert fusecc_main(["report", str(model), "--shape", "input.1=4x16", "--target", "cpu"]) == 0
    assert "matmul" in capsys.readouterr().out
    assert fusecc_main([str(model), "--shape", "input.1=4x16", "-o", str(tmp_path / "kernels.cu")]) == 0
    source = (tmp_path / "kernels.cu").read_text()
    assert "__global__" in source and "/fc/MatMul" in source  # node names are the kernels' source locations


def test_an_onnx_model_without_shapes_keeps_its_dims_and_random_inputs_need_their_sizes(tmp_path, capsys):
    model = small_mlp(tmp_path)
    assert fusecc_main(["run", str(model), "--random-inputs", "--target", "reference"]) == 1
    err = capsys.readouterr().err
    assert "fusecc run: error:" in err and "'input.1'" in err and "--dims batch=N" in err and "Traceback" not in err
    assert fusecc_main(["run", str(model), "--random-inputs", "--target", "reference", "--dims", "batch=3"]) == 0
    assert "shape [3, " in capsys.readouterr().out
    assert fusecc_main(["report", str(model), "--shape", "input.1=4xq"]) == 1
    assert "is not NAME=DIMS" in capsys.readouterr().err
    assert fusecc_main(["import", str(tmp_path / "nothing.onnx"), "-o", str(tmp_path / "x.ir")]) == 1
    assert "could not open model" in capsys.readouterr().err


def test_remarks_name_the_model_nodes(tmp_path, capsys):
    model = small_mlp(tmp_path)
    assert fusecc_main(["explain", str(model), "--shape", "input.1=4x16", "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "/act/Relu: remark: fused into group" in out and "<unknown>" not in out
