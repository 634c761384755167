"""The ONNX importer: folding, names, locations, shapes, refusals, and ONNX
semantics checked against onnxruntime on the reference and CPU targets."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_models import BOOL, FLOAT, INT64, assert_matches_onnxruntime, initializer, node, save, value

from fusecc.compiler.printer import print_op
from fusecc.frontends.onnx import INPUT_NAMES_ATTR, OUTPUT_NAMES_ATTR, ModelError, UnsupportedNodes, import_onnx

rng = np.random.default_rng(0)


def tensor_ops(module) -> list[str]:
    return [op.name for op in module.walk() if op.name.startswith("tensor.") and op.name != "tensor.constant"]


def shape_arithmetic_model(tmp_path):
    """What exporters emit for `x.view(B, S, 2, -1)`: Shape -> Gather ->
    Unsqueeze -> Concat -> Reshape, plus ConstantOfShape/Equal/Where/Expand
    and Range on shapes."""
    nodes = [
        node("Shape", ["x"], ["shape"]),
        node("Gather", ["shape", "zero"], ["batch"], axis=0),
        node("Gather", ["shape", "one"], ["seq"], axis=0),
        node("Unsqueeze", ["batch", "axis0"], ["b1"]),
        node("Unsqueeze", ["seq", "axis0"], ["s1"]),
        node("Concat", ["b1", "s1", "two", "minus_one"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["heads"]),
        node("ConstantOfShape", ["shape"], ["ones"], value=initializer("v", np.array([1], np.int64))),
        node("Equal", ["shape", "minus_one_2"], ["is_neg"]),
        node("Where", ["is_neg", "ones_2", "shape"], ["expand_to"]),
        node("Range", ["zero_s", "seq", "one_s"], ["positions"]),
        node("Unsqueeze", ["positions", "one_1d"], ["column"]),
        node("Expand", ["column", "expand_to"], ["pos2d"]),
        node("Cast", ["pos2d"], ["posf"], to=FLOAT),
        node("Add", ["x", "posf"], ["y"]),
    ]
    inits = [
        initializer("zero", np.array(0, np.int64)), initializer("one", np.array(1, np.int64)),
        initializer("axis0", np.array([0], np.int64)), initializer("two", np.array([2], np.int64)),
        initializer("minus_one", np.array([-1], np.int64)), initializer("minus_one_2", np.array([-1, -1, -1], np.int64)),
        initializer("ones_2", np.array([1, 1, 1], np.int64)), initializer("zero_s", np.array(0, np.int64)),
        initializer("one_s", np.array(1, np.int64)), initializer("one_1d", np.array([1], np.int64)),
    ]
    return save(tmp_path, nodes, [value("x", FLOAT, ["batch", "seq", 8])], [value("heads", FLOAT, None), value("y", FLOAT, None)], inits)


def test_shape_arithmetic_folds_away_at_import(tmp_path):
    path = shape_arithmetic_model(tmp_path)
    module = import_onnx(str(path), {"x": (3, 5, 8)}).module
    # Everything but the data path is folded: the positions are a constant.
    assert tensor_ops(module) == ["tensor.reshape", "tensor.add"]
    assert "-> tensor<3x5x2x4xf32>" in print_op(module)
    feeds = {"x": rng.standard_normal((3, 5, 8)).astype(np.float32)}
    for target in ("reference", "cpu"):
        assert_matches_onnxruntime(path, feeds, target)


def test_nodes_become_locations_and_graph_names_stay(tmp_path):
    nodes = [node("Add", ["input.1", "b"], ["sum"], name="/layer/Add"), node("Relu", ["sum"], ["463"], name="/layer/Relu")]
    path = save(tmp_path, nodes, [value("input.1", FLOAT, [2, 3]), value("b", FLOAT, [3])], [value("463", FLOAT, [2, 3])])
    imported = import_onnx(str(path))
    text = print_op(imported.module, debuginfo=True)
    assert 'tensor.add %input.1, %b' in text and 'loc("/layer/Add")' in text and 'loc("/layer/Relu")' in text
    func = imported.module.lookup("main")
    assert func.attributes[INPUT_NAMES_ATTR].value == ["input.1", "b"]
    assert func.attributes[OUTPUT_NAMES_ATTR].value == ["463"]
    assert imported.output_names == ["463"]


def test_argument_names_are_sanitised_and_unique(tmp_path):
    nodes = [node("Add", ["onnx::x/0", "onnx::x?0"], ["out"]), node("Add", ["out", "7"], ["y"])]
    inputs = [value(n, FLOAT, [2]) for n in ("onnx::x/0", "onnx::x?0", "7")]
    imported = import_onnx(str(save(tmp_path, nodes, inputs, [value("y", FLOAT, [2])])))
    text = print_op(imported.module)
    assert "func.func @main(%onnx__x_0: tensor<2xf32>, %onnx__x_0_1: tensor<2xf32>, %_7: tensor<2xf32>)" in text
    assert imported.input_names == ["onnx::x/0", "onnx::x?0", "7"]


def test_symbolic_dims_without_shapes_stay_dynamic_and_named(tmp_path):
    path = save(tmp_path, [node("Add", ["a", "m"], ["y"])], [value("a", FLOAT, ["batch", "seq"]), value("m", FLOAT, ["batch", 4])], [value("y", FLOAT, None)])
    func = import_onnx(str(path)).module.lookup("main")
    assert [str(t) for t in func.function_type.inputs] == ["tensor<?x?xf32>", "tensor<?x4xf32>"]
    assert func.attributes["fusecc.dims"].value == [["batch", "seq"], ["batch"]]
    assert str(func.function_type.results[0]) == "tensor<?x4xf32>"  # seq must be 4 at run time (a dynamic dim never stretches)


def test_a_shape_binds_symbolic_dims_by_name_for_every_input(tmp_path):
    path = save(tmp_path, [node("Add", ["a", "m"], ["y"])], [value("a", FLOAT, ["batch", "seq"]), value("m", FLOAT, ["batch", "seq"])], [value("y", FLOAT, None)])
    by_input = import_onnx(str(path), {"a": (2, 5)}).module.lookup("main")
    by_dims = import_onnx(str(path), {"batch": (2,), "seq": (5,)}).module.lookup("main")
    assert [str(t) for t in by_input.function_type.inputs] == ["tensor<2x5xf32>"] * 2
    assert by_dims.function_type.inputs == by_input.function_type.inputs
    with pytest.raises(ModelError, match="neither an input"):
        import_onnx(str(path), {"nothing": (2,)})


def test_unsupported_ops_and_attributes_are_listed_together(tmp_path):
    nodes = [
        node("Conv", ["x", "w"], ["c"], name="conv1"),
        node("Softmax", ["c"], ["s"], name="soft", axis=1),
        node("LSTM", ["s"], ["l"], name="lstm"),
        node("Gelu", ["l"], ["g"], name="gelu", approximate="tanh"),
        node("Cast", ["g"], ["y"], name="to_double", to=11),
        node("Transpose", ["y"], ["z"], name="t", perm=[1, 0], fancy=1),
    ]
    path = save(tmp_path, nodes, [value("x", FLOAT, [2, 2]), value("w", FLOAT, [2, 2])], [value("z", FLOAT, None)], opset=20)
    with pytest.raises(UnsupportedNodes) as info:
        import_onnx(str(path))
    message = str(info.value)
    assert "4 nodes" in message
    assert "node 'conv1' (Conv): operator not supported" in message
    assert "node 'lstm' (LSTM): operator not supported" in message
    assert "node 'to_double' (Cast): casts to double" in message
    assert "node 't' (Transpose): attribute fancy not supported" in message and "soft" not in message and "gelu" not in message


@pytest.mark.parametrize("opset", [12, 22])
def test_opsets_outside_13_to_21_are_refused(tmp_path, opset):
    path = save(tmp_path, [node("Relu", ["x"], ["y"])], [value("x", FLOAT, [2])], [value("y", FLOAT, [2])], opset=opset)
    with pytest.raises(ModelError, match=f"opset {opset}; fusecc imports opsets 13 to 21"):
        import_onnx(str(path))


def test_a_runtime_shape_operand_is_a_located_error(tmp_path):
    path = save(tmp_path, [node("Reshape", ["x", "s"], ["y"], name="/view")], [value("x", FLOAT, [6]), value("s", INT64, [2])], [value("y", FLOAT, None)])
    with pytest.raises(ModelError, match=r"node '/view' \(Reshape\): the target shape must be a constant"):
        import_onnx(str(path))


def encoder_bits(tmp_path):
    """One model exercising ONNX semantics the tensor dialect spells otherwise."""
    w = rng.standard_normal((6, 4)).astype(np.float32)  # Gemm with transB: B is [N, K]
    c = rng.standard_normal(6).astype(np.float32)
    table = rng.standard_normal((3, 10, 4)).astype(np.float32)
    nodes = [
        node("Gemm", ["x", "w", "c"], ["gemm"], alpha=0.5, beta=2.0, transB=1),
        node("LogSoftmax", ["gemm"], ["lsm"], axis=0),
        node("Split", ["lsm", "split"], ["left", "right"], axis=1),
        node("Slice", ["right", "starts", "ends", "axes", "steps"], ["rev"]),
        node("Concat", ["left", "rev"], ["cat"], axis=1),
        node("Unsqueeze", ["cat", "axis0"], ["cat3"]),
        node("LayerNormalization", ["cat3", "gamma"], ["ln"], axis=1, epsilon=1e-3),
        node("ReduceMean", ["ln", "axes2"], ["mean"], keepdims=0),
        node("Gather", ["table", "ids"], ["rows"], axis=1),
        node("ReduceMax", ["rows", "axes02"], ["rmax"], keepdims=1),
        node("Clip", ["rmax", "lo", "hi"], ["clipped"]),
        node("Greater", ["clipped", "zero_f"], ["pos"]),
        node("Not", ["pos"], ["neg"]),
        node("Or", ["neg", "flag"], ["either"]),
        node("Where", ["either", "clipped", "pow"], ["picked"]),
        node("Pow", ["clipped", "two_i"], ["pow"]),
        node("Gelu", ["picked"], ["gelu"], approximate="tanh"),
        node("Expand", ["mean", "shape3"], ["wide"]),
        node("Flatten", ["wide"], ["flat"], axis=-1),
    ]
    nodes.insert(14, nodes.pop(15))  # Pow before Where (topological order)
    inits = [
        initializer("w", w), initializer("c", c), initializer("split", np.array([2, 4], np.int64)),
        initializer("starts", np.array([-1], np.int64)), initializer("ends", np.array([-100], np.int64)),
        initializer("axes", np.array([1], np.int64)), initializer("steps", np.array([-1], np.int64)),
        initializer("axis0", np.array([0], np.int64)), initializer("gamma", rng.standard_normal((5, 6)).astype(np.float32)),
        initializer("axes2", np.array([-1], np.int64)), initializer("table", table),
        initializer("axes02", np.array([0, 2], np.int64)),
        initializer("lo", np.array(-0.5, np.float32)), initializer("hi", np.array(1.5, np.float32)),
        initializer("zero_f", np.array(0.0, np.float32)), initializer("two_i", np.array(2, np.int64)),
        initializer("shape3", np.array([2, 1, 5], np.int64)),
    ]
    inputs = [value("x", FLOAT, [5, 4]), value("ids", INT64, [2, 3]), value("flag", BOOL, [1, 1, 1])]
    outputs = [value("flat", FLOAT, None), value("gelu", FLOAT, None)]
    return save(tmp_path, nodes, inputs, outputs, inits, opset=20)


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_onnx_semantics_match_onnxruntime(tmp_path, target):
    path = encoder_bits(tmp_path)
    feeds = {
        "x": rng.standard_normal((5, 4)).astype(np.float32),
        "ids": np.array([[0, 9, -1], [-10, 4, 5]], np.int64),
        "flag": np.array([[[True]]]),
    }
    assert_matches_onnxruntime(path, feeds, target, rtol=1e-5, atol=1e-5)


def test_bfloat16_weights_become_bf16_constants(tmp_path):
    from onnx import TensorProto, helper

    from fusecc.runtime.reference import evaluate

    weight = helper.make_tensor("w", TensorProto.BFLOAT16, [2], [1.5, -2.0])
    path = save(tmp_path, [node("Add", ["x", "w"], ["y"])], [value("x", TensorProto.BFLOAT16, [2])], [value("y", TensorProto.BFLOAT16, [2])], [weight])
    module = import_onnx(str(path)).module
    assert "dense<[1.5, -2.0]> : tensor<2xbf16>" in print_op(module)
    np.testing.assert_array_equal(evaluate(module, "main", [np.array([1.0, 1.0], np.float32)])[0], [2.5, -1.0])


def test_without_the_onnx_package_the_error_says_how_to_get_it(tmp_path, monkeypatch):
    import sys

    path = save(tmp_path, [node("Relu", ["x"], ["y"])], [value("x", FLOAT, [2])], [value("y", FLOAT, [2])])
    monkeypatch.setitem(sys.modules, "onnx", None)  # what `import onnx` meets when it is not installed
    with pytest.raises(ModelError, match=r"needs the 'onnx' package: pip install 'fusecc\[onnx\]'"):
        import_onnx(str(path))


def llama_block(tmp_path, seq: int = 6, dim: int = 8, heads: int = 2):
    """A decoder block as exporters write it: RMSNorm spelt out (Pow,
    ReduceMean, Add, Sqrt, Div, Mul), rotary tables from Range/Sin/Cos, a
    causal mask from Trilu/Where, attention by MatMul/Softmax, a SwiGLU MLP."""
    head = dim // heads
    w = {name: rng.standard_normal(shape).astype(np.float32) * 0.3 for name, shape in
         {"wq": (dim, dim), "wk": (dim, dim), "wv": (dim, dim), "wo": (dim, dim), "w1": (dim, 16), "w3": (dim, 16), "w2": (16, dim)}.items()}
    inv_freq = (1.0 / 10000 ** (np.arange(0, head, 2) / head)).astype(np.float32)
    nodes = [
        node("Pow", ["x", "two"], ["sq"]), node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
        node("Add", ["ms", "eps"], ["mse"]), node("Sqrt", ["mse"], ["rms"]), node("Div", ["x", "rms"], ["normed"]),
        node("Mul", ["normed", "g"], ["h"]),
        node("MatMul", ["h", "wq"], ["q2"]), node("MatMul", ["h", "wk"], ["k2"]), node("MatMul", ["h", "wv"], ["v2"]),
        node("Reshape", ["q2", "heads_shape"], ["q3"]), node("Transpose", ["q3"], ["q"], perm=[1, 0, 2]),
        node("Reshape", ["k2", "heads_shape"], ["k3"]), node("Transpose", ["k3"], ["k"], perm=[1, 0, 2]),
        node("Reshape", ["v2", "heads_shape"], ["v3"]), node("Transpose", ["v3"], ["v"], perm=[1, 0, 2]),
        # rotary: angles = positions x inv_freq, tables folded at import
        node("Range", ["zero_f", "seq_f", "one_f"], ["pos"]), node("Unsqueeze", ["pos", "axis1"], ["pos2"]),
        node("Mul", ["pos2", "inv_freq"], ["freqs"]), node("Concat", ["freqs", "freqs"], ["angles"], axis=-1),
        node("Cos", ["angles"], ["cos"]), node("Sin", ["angles"], ["sin"]),
        node("Split", ["q", "halves"], ["q_lo", "q_hi"], axis=-1), node("Neg", ["q_hi"], ["q_nhi"]),
        node("Concat", ["q_nhi", "q_lo"], ["q_rot"], axis=-1),
        node("Mul", ["q", "cos"], ["qc"]), node("Mul", ["q_rot", "sin"], ["qs"]), node("Add", ["qc", "qs"], ["qr"]),
        node("Split", ["k", "halves"], ["k_lo", "k_hi"], axis=-1), node("Neg", ["k_hi"], ["k_nhi"]),
        node("Concat", ["k_nhi", "k_lo"], ["k_rot"], axis=-1),
        node("Mul", ["k", "cos"], ["kc"]), node("Mul", ["k_rot", "sin"], ["ks"]), node("Add", ["kc", "ks"], ["kr"]),
        node("Transpose", ["kr"], ["kt"], perm=[0, 2, 1]), node("MatMul", ["qr", "kt"], ["scores"]),
        node("Div", ["scores", "sqrt_d"], ["scaled"]),
        node("ConstantOfShape", ["square"], ["ones"], value=initializer("one_bool", np.array([1], np.bool_))),
        node("Trilu", ["ones"], ["causal"], upper=0),
        node("Where", ["causal", "scaled", "neg_inf"], ["masked"]), node("Softmax", ["masked"], ["probs"], axis=-1),
        node("MatMul", ["probs", "v"], ["ctx3"]), node("Transpose", ["ctx3"], ["ctx_t"], perm=[1, 0, 2]),
        node("Reshape", ["ctx_t", "flat_shape"], ["ctx"]), node("MatMul", ["ctx", "wo"], ["attn"]),
        node("Add", ["x", "attn"], ["res"]),
        node("MatMul", ["res", "w1"], ["gate"]), node("Sigmoid", ["gate"], ["sg"]), node("Mul", ["gate", "sg"], ["silu"]),
        node("MatMul", ["res", "w3"], ["up"]), node("Mul", ["silu", "up"], ["act"]), node("MatMul", ["act", "w2"], ["down"]),
        node("Add", ["res", "down"], ["y"]),
    ]
    consts = {
        "two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32), "g": rng.standard_normal(dim).astype(np.float32),
        "heads_shape": np.array([seq, heads, head], np.int64), "zero_f": np.array(0.0, np.float32),
        "seq_f": np.array(float(seq), np.float32), "one_f": np.array(1.0, np.float32), "axis1": np.array([1], np.int64),
        "inv_freq": inv_freq, "halves": np.array([head // 2, head // 2], np.int64),
        "sqrt_d": np.array(np.sqrt(head), np.float32), "square": np.array([seq, seq], np.int64),
        "neg_inf": np.array(-1e9, np.float32), "flat_shape": np.array([seq, dim], np.int64), **w,
    }
    inits = [initializer(name, array) for name, array in consts.items()]
    return save(tmp_path, nodes, [value("x", FLOAT, [seq, dim])], [value("y", FLOAT, None)], inits)


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_a_llama_style_decoder_block_matches_onnxruntime(tmp_path, target):
    path = llama_block(tmp_path)
    module = import_onnx(str(path)).module
    ops = tensor_ops(module)
    assert "tensor.sin" not in " ".join(ops) and ops.count("tensor.matmul") == 9  # the tables are constants
    assert_matches_onnxruntime(path, {"x": rng.standard_normal((6, 8)).astype(np.float32)}, target, rtol=1e-4, atol=1e-5)


def test_fold_only_ops_refuse_runtime_inputs(tmp_path):
    path = save(tmp_path, [node("Sin", ["x"], ["y"], name="/rope/Sin")], [value("x", FLOAT, [4])], [value("y", FLOAT, [4])])
    with pytest.raises(ModelError, match=r"node '/rope/Sin' \(Sin\): its inputs must be known at import time"):
        import_onnx(str(path))
