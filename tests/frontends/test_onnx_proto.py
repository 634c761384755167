"""fusecc.frontends.onnx.proto reads models without importing the onnx
package; its conversions agree with onnx's own (numpy_helper.to_array,
helper.get_attribute_value, helper.tensor_dtype_to_np_dtype)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_models import FLOAT, initializer, node, save, value  # noqa: E402

from fusecc.frontends.onnx import proto  # noqa: E402

ARRAYS = [
    np.arange(-6, 6, dtype=np.float32).reshape(3, 4) / 3,
    np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float32),
    np.array([[1, -2], [3, 4]], dtype=np.int64),
    np.array([-128, 0, 127], dtype=np.int8),
    np.array([0, 255], dtype=np.uint8),
    np.array([-32768, 7], dtype=np.int16),
    np.array([65535, 1], dtype=np.uint16),
    np.array([-(2**31), 2**31 - 1], dtype=np.int32),
    np.array([2**32 - 1], dtype=np.uint32),
    np.array([2**64 - 1, 3], dtype=np.uint64),
    np.array([True, False, True]),
    np.array([1.5, -2.25], dtype=np.float16),
    np.array([np.pi], dtype=np.float64),
    np.array(2.5, dtype=np.float32),  # a scalar
    np.zeros((0, 3), dtype=np.float32),  # empty
]


def typed(array: np.ndarray) -> TensorProto:
    """The same values in the typed fields instead of raw_data."""
    data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor("t", data_type, array.shape, array.reshape(-1).tolist() if array.dtype != np.float16 else array.reshape(-1), raw=False)


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_tensors_read_as_onnx_reads_them(array):
    for tensor in (numpy_helper.from_array(array, "t"), typed(array)):
        mine, theirs = proto.to_array(tensor), numpy_helper.to_array(tensor)
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        np.testing.assert_array_equal(mine, theirs)
        assert proto.np_dtype(tensor.data_type) == helper.tensor_dtype_to_np_dtype(tensor.data_type)


def test_other_element_types_go_to_onnx():
    tensor = helper.make_tensor("b", TensorProto.BFLOAT16, [2], [1.0, -2.0])
    np.testing.assert_array_equal(proto.to_array(tensor), numpy_helper.to_array(tensor))
    assert proto.np_dtype(TensorProto.BFLOAT16) == helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16)


def test_attributes_read_as_onnx_reads_them():
    made = helper.make_node(
        "X", [], ["y"], f=1.5, i=-3, s="text", t=numpy_helper.from_array(np.ones(2, np.float32)), floats=[1.0, 2.5], ints=[1, -2],
        strings=["a", "b"], tensors=[numpy_helper.from_array(np.zeros(1, np.int64))],
        g=helper.make_graph([], "g", [], []),
    )
    for attribute in made.attribute:
        assert proto.attribute_value(attribute) == helper.get_attribute_value(attribute), attribute.name


CHILD = r"""
import json, sys
from fusecc.compiler.printer import print_op
from fusecc.frontends.onnx import import_onnx
module = import_onnx(sys.argv[1], {"x": (2, 4)}).module
print(json.dumps({"onnx": "onnx" in sys.modules, "text": print_op(module)}))
"""


def test_importing_a_model_leaves_the_onnx_package_unimported(tmp_path):
    from fusecc.compiler.printer import print_op
    from fusecc.frontends.onnx import import_onnx

    path = save(
        tmp_path,
        [node("MatMul", ["x", "w"], ["h"]), node("Constant", [], ["c"], value=numpy_helper.from_array(np.float32([0.5, -1, 2]), "c")),
         node("Add", ["h", "c"], ["a"]), node("Cast", ["a"], ["y"], to=TensorProto.FLOAT16)],
        [value("x", FLOAT, ["N", 4])], [value("y", TensorProto.FLOAT16, ["N", 3])],
        [initializer("w", np.arange(12, dtype=np.float32).reshape(4, 3))],
    )
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout.splitlines()[-1])
    assert child["onnx"] is False
    assert child["text"] == print_op(import_onnx(str(path), {"x": (2, 4)}).module)  # the same module as with onnx imported
