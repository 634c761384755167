"""ONNX's protobuf messages without importing the onnx package.

`import onnx` costs 0.3-2 s (it loads ml_dtypes and the C++ checker), more
than the rest of a cold `fusecc.compile` of a small model; reading a model
needs only the generated protobuf module (~20 ms), the element types and
the conversions below. The module is loaded from the installed onnx
package's own file under a private name: its messages are registered in
protobuf's default pool, so if the onnx package is imported later its
classes are these very ones. Anything outside the plain cases (big-endian
hosts, bf16/float8/string tensors, packed f16, sparse and type attributes)
goes to the onnx package itself, imported then.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

import numpy as np

from fusecc.frontends.onnx.errors import ModelError

_lock = threading.Lock()
_messages = None

# TensorProto.DataType -> numpy dtype, for the types whose storage is plain.
NUMPY_DTYPES = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16), 5: np.dtype(np.int16),
    6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_), 10: np.dtype(np.float16), 11: np.dtype(np.float64),
    12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
}
# Where a tensor without raw_data keeps its values, by data type (onnx.proto's comments).
_TYPED_FIELD = {1: "float_data", 2: "int32_data", 3: "int32_data", 4: "int32_data", 5: "int32_data", 6: "int32_data", 7: "int64_data", 9: "int32_data", 11: "double_data", 12: "uint64_data", 13: "uint64_data"}
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


def onnx_package():
    """The onnx package (imported now if it was not), or a plain message saying how to get it."""
    try:
        import onnx
    except ImportError:
        raise ModelError("reading ONNX models needs the 'onnx' package: pip install 'fusecc[onnx]'") from None
    return onnx


def messages():
    """A module with ONNX's message classes (ModelProto, TensorProto, ...):
    the onnx package when it is imported already, else its generated
    protobuf module alone."""
    global _messages
    if "onnx" in sys.modules:  # imported already (or blocked: then the message)
        return onnx_package()
    with _lock:
        if _messages is None:
            try:
                spec = importlib.util.find_spec("onnx")
            except (ImportError, ValueError):
                spec = None
            folders = list(spec.submodule_search_locations or []) if spec else []
            path = next((os.path.join(f, "onnx_ml_pb2.py") for f in folders if os.path.exists(os.path.join(f, "onnx_ml_pb2.py"))), None)
            if path is None:
                return onnx_package()  # an onnx without the generated file where we expect it: the package says what it has
            generated = importlib.util.spec_from_file_location("fusecc_onnx_ml_pb2", path)
            module = importlib.util.module_from_spec(generated)
            generated.loader.exec_module(module)
            _messages = module
        return _messages


def np_dtype(data_type: int) -> np.dtype:
    """numpy's dtype for an ONNX element type (onnx.helper.tensor_dtype_to_np_dtype)."""
    found = NUMPY_DTYPES.get(data_type)
    if found is not None:
        return found
    return np.dtype(onnx_package().helper.tensor_dtype_to_np_dtype(data_type))


def to_array(tensor, raw: bytes | None = None) -> np.ndarray:
    """A TensorProto's values (onnx.numpy_helper.to_array); raw little-endian
    data is viewed in place, read-only. `raw`: its raw_data, already read."""
    dtype = NUMPY_DTYPES.get(tensor.data_type)
    plain = dtype is not None and sys.byteorder == "little" and tensor.data_location != _EXTERNAL and not tensor.HasField("segment")
    if plain and tensor.HasField("raw_data"):
        return np.frombuffer(tensor.raw_data if raw is None else raw, dtype=dtype).reshape(tuple(tensor.dims))
    if plain and tensor.data_type in _TYPED_FIELD:
        return np.asarray(getattr(tensor, _TYPED_FIELD[tensor.data_type]), dtype=dtype).reshape(tuple(tensor.dims))
    return onnx_package().numpy_helper.to_array(tensor)


# AttributeProto.AttributeType -> the field holding the value (lists for the plural kinds).
_ATTRIBUTE_FIELDS = {1: ("f", False), 2: ("i", False), 3: ("s", False), 4: ("t", False), 5: ("g", False), 6: ("floats", True), 7: ("ints", True), 8: ("strings", True), 9: ("tensors", True), 10: ("graphs", True)}


def attribute_value(attribute):
    """An AttributeProto's value (onnx.helper.get_attribute_value)."""
    found = _ATTRIBUTE_FIELDS.get(attribute.type)
    if found is None:
        return onnx_package().helper.get_attribute_value(attribute)
    name, plural = found
    value = getattr(attribute, name)
    return list(value) if plural else value


__all__ = ["NUMPY_DTYPES", "attribute_value", "messages", "np_dtype", "onnx_package", "to_array"]
