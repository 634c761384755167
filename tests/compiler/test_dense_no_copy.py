"""DenseElementsAttr keeps a model's weights without copying them when no
one can change them (a read-only view of a bytes object, as the ONNX reader
gives), and copies anything else, so that an attribute never changes."""

from __future__ import annotations

import numpy as np

from fusecc.compiler.attributes import DenseElementsAttr
from fusecc.compiler.types import TensorType, f32


def dense(array) -> DenseElementsAttr:
    return DenseElementsAttr(array, TensorType((2, 3), f32))


def test_a_view_of_bytes_is_kept_in_place():
    data = np.arange(6, dtype=np.float32).tobytes()
    attr = dense(np.frombuffer(data, dtype=np.float32).reshape(2, 3))
    assert np.shares_memory(attr.array, np.frombuffer(data, dtype=np.uint8))
    assert not attr.array.flags.writeable


def test_a_writable_array_or_a_read_only_view_of_one_is_copied():
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = source.view()
    view.flags.writeable = False
    for given in (source, view):
        attr = dense(given)
        assert not np.shares_memory(attr.array, source)
    source[0, 0] = 99.0
    assert attr.array[0, 0] == 0.0


def test_a_view_of_a_bytearray_is_copied():
    data = bytearray(np.arange(6, dtype=np.float32).tobytes())
    array = np.frombuffer(data, dtype=np.float32).reshape(2, 3)
    array.flags.writeable = False
    attr = dense(array)
    data[:4] = np.float32(7).tobytes()
    assert attr.array[0, 0] == 0.0
