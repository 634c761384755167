"""The public Python API: `fusecc.compile(...)` once, call many times.

Results agree with numpy and with the reference interpreter on every
target here; inputs are checked by name, shape and dtype, and a lossy
conversion warns or is refused; errors carry their source position; the
API is loaded lazily."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import fusecc
from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op

PROGRAM = """\
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %ids: tensor<4xi32>) -> (tensor<4x3xf32>, tensor<4xi32>) {
  %y = tensor.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %r = tensor.relu %y : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %one = tensor.constant {value = dense<1> : tensor<i32>} : () -> tensor<i32>
  %next = tensor.add %ids, %one : (tensor<4xi32>, tensor<i32>) -> tensor<4xi32>
  func.return %r, %next : tensor<4x3xf32>, tensor<4xi32>
}
"""

RNG = np.random.default_rng(3)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W = RNG.standard_normal((8, 3)).astype(np.float32)
IDS = np.arange(4, dtype=np.int32)


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.ir"
    path.write_text(PROGRAM)
    return path


def expected():
    return np.maximum(X @ W, 0), IDS + 1


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_compile_once_and_call_by_name_or_position(model, target):
    if target == "cpu":
        pytest.importorskip("llvmlite")
    prog = fusecc.compile(str(model), target=target)
    want_r, want_next = expected()
    by_name = prog(x=X, w=W, ids=IDS)
    assert list(by_name) == ["result0", "result1"]
    np.testing.assert_allclose(by_name["result0"], want_r, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(by_name["result1"], want_next)
    by_position = prog(X, W, ids=IDS)
    np.testing.assert_array_equal(by_position["result0"], by_name["result0"])
    assert prog.stats.calls == 2
    assert prog.stats.compilations == (1 if target == "cpu" else 0)
    assert prog.inputs == {"x": parse_module(PROGRAM).functions()[0].arguments[0].type, **{k: v for k, v in prog.inputs.items() if k != "x"}}
    assert prog.outputs == ["result0", "result1"]


def test_cpu_program_exposes_kernels_report_and_source(model):
    pytest.importorskip("llvmlite")
    prog = fusecc.compile(model, target="cpu")
    assert prog.kernels and all(isinstance(k, str) for k in prog.kernels)
    llvm = prog.source("llvm")
    assert all(f'@"{k}"' in llvm for k in set(prog.kernels))
    assert "loop.kernel @" + prog.kernels[0] in prog.source("loop")
    assert "kernel launches" in prog.report()
    assert "__global__" in prog.source("cuda")  # emitted for a GPU model, no GPU needed


def test_a_module_object_compiles_and_is_left_as_it_was():
    module = parse_module(PROGRAM)
    before = print_op(module)
    prog = fusecc.compile(module, target="reference")
    np.testing.assert_allclose(prog(X, W, IDS)["result0"], expected()[0], rtol=1e-5)
    assert print_op(module) == before


def test_inputs_are_checked_by_name_shape_and_dtype(model):
    prog = fusecc.compile(model, target="reference")
    with pytest.raises(fusecc.InputError, match="has no input 'y'"):
        prog(x=X, w=W, ids=IDS, y=X)
    with pytest.raises(fusecc.InputError, match="missing input 'ids'"):
        prog(x=X, w=W)
    with pytest.raises(fusecc.InputError, match=r"input 'w' of @main has shape \[3, 8\], but tensor<8x3xf32> needs \[8, 3\]"):
        prog(x=X, w=W.T, ids=IDS)
    with pytest.raises(fusecc.InputError, match="dtype <U1"):
        prog(x=X, w=W, ids=np.array(["a", "b", "c", "d"]))
    with pytest.raises(fusecc.InputError, match="given twice"):
        prog(X, W, IDS, x=X)


def test_lossy_conversions_warn_or_are_refused_and_lossless_ones_pass(model):
    prog = fusecc.compile(model, target="reference")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # int64 ids that fit i32, float64 values exact in f32: nothing to say
        prog(x=X.astype(np.float64), w=W, ids=IDS.astype(np.int64))
    with pytest.warns(fusecc.LossyConversionWarning, match=r"input 'x' of @main is float64 and becomes f32: 32 of 32 values change"):
        out = prog(x=X.astype(np.float64) + 1e-12, w=W, ids=IDS)
    np.testing.assert_allclose(out["result0"], expected()[0], rtol=1e-5, atol=1e-6)
    with pytest.warns(fusecc.LossyConversionWarning, match=r"input 'ids' of @main is int64 and becomes i32: 1 of 4 values change"):
        prog(x=X, w=W, ids=np.array([0, 1, 2, 2**40]))
    strict = fusecc.compile(model, target="reference", options={"lossy": "error"})
    with pytest.raises(fusecc.InputError, match="float64 and becomes f32"):
        strict(x=X.astype(np.float64) + 1e-12, w=W, ids=IDS)
    with pytest.raises(fusecc.InputError, match="int64 and becomes i32"):
        strict(x=X, w=W, ids=np.array([0.5, 1, 2, 3]).astype(np.int64) + 2**33)


def test_errors_carry_the_source_position(tmp_path):
    bad = tmp_path / "bad.ir"
    bad.write_text(PROGRAM.replace("tensor.relu %y", "tensor.relu %nope"))
    with pytest.raises(fusecc.CompileError) as caught:
        fusecc.compile(bad)
    text = str(caught.value)
    assert text.startswith(f"{bad}:3:") and "use of undefined value '%nope'" in text and "^" in text


def test_usage_errors_are_plain_messages(model):
    with pytest.raises(fusecc.compiler.diagnostics.UsageError, match="unknown target 'tpu'"):
        fusecc.compile(model, target="tpu")
    with pytest.raises(fusecc.compiler.diagnostics.UsageError, match="unknown option bogus"):
        fusecc.compile(model, target="reference", options={"bogus": 1})
    with pytest.raises(fusecc.compiler.diagnostics.UsageError, match="no such file"):
        fusecc.compile(model.with_name("missing.ir"))


def test_importing_the_compiler_does_not_import_the_driver():
    code = "import sys, fusecc.compiler; print(sorted(m for m in sys.modules if m.startswith(('fusecc.driver', 'fusecc.runtime', 'fusecc.passes'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_versions():
    from fusecc.tools import fusecc as driver
    from fusecc.tools import opt

    assert fusecc.__version__ and fusecc.__version__ != "0+unknown"
    out = subprocess.run([sys.executable, "-c", "import sys; from fusecc.tools.fusecc import main; sys.exit(main(['--version']))"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"fusecc {fusecc.__version__}"
    with pytest.raises(SystemExit) as done:
        opt.build_arg_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert driver.main(["--version"]) == 0


def test_onnx_models_compile_by_path_with_shapes_and_named_outputs(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="project"), helper.make_node("Relu", ["h"], ["y"], name="act")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(W, "W")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    prog = fusecc.compile(tmp_path / "m.onnx", target="reference", shapes={"x": (4, 8)})
    assert list(prog.inputs) == ["x"] and prog.outputs == ["y"]
    np.testing.assert_allclose(prog(x=X)["y"], np.maximum(X @ W, 0), rtol=1e-5, atol=1e-6)

    bad = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], name="odd_node")], "g",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(bad, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "bad.onnx"))
    with pytest.raises(Exception, match="node 'odd_node' \\(NoSuchOp\\)"):
        fusecc.compile(tmp_path / "bad.onnx")


def test_an_explicit_resource_file_may_lie_outside_the_model_folder(tmp_path):
    import safetensors.numpy

    (tmp_path / "model").mkdir()
    (tmp_path / "weights").mkdir()
    safetensors.numpy.save_file({"w": W}, str(tmp_path / "weights" / "w.safetensors"))
    model = tmp_path / "model" / "m.ir"
    model.write_text(
        'module attributes {fusecc.resources = "../weights/w.safetensors"} {\n'
        "  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x3xf32> {\n"
        "    %w = tensor.constant {value = dense_resource<w> : tensor<8x3xf32>} : () -> tensor<8x3xf32>\n"
        "    %y = tensor.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>\n"
        "    func.return %y : tensor<4x3xf32>\n  }\n}\n"
    )
    with pytest.raises(fusecc.CompileError, match=r"m.ir:1:20: error: resource file '\.\./weights/w.safetensors' climbs out"):
        fusecc.compile(model, target="reference")
    prog = fusecc.compile(model, target="reference", options={"resources": tmp_path / "weights" / "w.safetensors"})
    np.testing.assert_allclose(prog(x=X)["result0"], X @ W, rtol=1e-5)
