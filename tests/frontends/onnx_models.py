"""Small ONNX models built by hand for the front-end tests, and the runner
that compares fusecc with onnxruntime."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.driver import targets
from fusecc.frontends.onnx import import_onnx

FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def value(name: str, element: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, element, shape)


def node(op: str, inputs, outputs, name: str | None = None, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=name or outputs[0], **attrs)


def initializer(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def save(folder: pathlib.Path, nodes, inputs, outputs, initializers=(), opset: int = 17, name: str = "model.onnx") -> pathlib.Path:
    graph = helper.make_graph(list(nodes), "graph", list(inputs), list(outputs), list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = folder / name
    onnx.save(model, str(path))
    return path


def onnxruntime_outputs(path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime

    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def fusecc_outputs(path, feeds: dict[str, np.ndarray], target: str, shapes=None) -> list[np.ndarray]:
    imported = import_onnx(str(path), shapes or {name: x.shape for name, x in feeds.items()})
    args = [feeds[name] for name in imported.input_names]
    return targets.get(target).run(imported.module, "main", args, DiagnosticEngine())


def assert_matches_onnxruntime(path, feeds, target: str, rtol=1e-5, atol=1e-5) -> None:
    expected = onnxruntime_outputs(path, feeds)
    got = fusecc_outputs(path, feeds, target)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
