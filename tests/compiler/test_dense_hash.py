"""DenseElementsAttr's splat test and hash look at a few elements first (a
weight's megabytes are not hashed whole), and stay what they mean."""

from __future__ import annotations

import numpy as np

from fusecc.compiler.attributes import DenseElementsAttr
from fusecc.compiler.types import TensorType, f32


def dense(array) -> DenseElementsAttr:
    array = np.asarray(array, dtype=np.float32)
    return DenseElementsAttr(array, TensorType(array.shape, f32))


def test_splat_needs_every_element_equal():
    base = np.full(10001, 0.5, dtype=np.float32)
    assert dense(base).is_splat
    for index in (1, 4999, 5001, 9999):  # not where the quick looks fall (0, middle, last)
        changed = base.copy()
        changed[index] = 0.25
        assert not dense(changed).is_splat
    assert not dense([1.0, 2.0, 1.0]).is_splat  # first == last, middle differs


def test_equal_arrays_hash_equal_and_a_change_between_samples_still_compares_unequal():
    array = np.arange(100000, dtype=np.float32)
    a, b = dense(array), dense(array.copy())
    assert hash(a) == hash(b) and a == b
    changed = array.copy()
    changed[1] = -1.0  # between two sampled elements: same hash, still not equal
    c = dense(changed)
    assert hash(c) == hash(a) and c != a
    assert hash(dense(array * 2)) != hash(a)
