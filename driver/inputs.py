"""Seeded inputs for measuring and testing whole models.

Not semantics: the reference interpreter runs whatever it is given. This
module only chooses test data that keeps deep programs' values in a range
where comparisons between targets mean something.
"""

from __future__ import annotations

import numpy as np

from fusecc.compiler.types import TensorType
from fusecc.runtime.reference import random_input, to_storage


def random_input_with_shrunk_weights(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """`random_input`, except that float matrices of at least 64 rows are
    taken to be weights and SHRUNK: scaled by 1/sqrt(rows), as weights are
    initialised. Deep programs then keep their values near 1 (unscaled, a
    transformer block's reach 1e5 and summation-order differences grow with
    them). Such an input is not a standard normal: use `random_input` where
    the data must not be rescaled."""
    element = t.element_type
    if not (element.is_float and len(t.shape) == 2 and t.shape[0] >= 64):
        return random_input(t, rng)
    return to_storage(rng.standard_normal(t.shape, dtype=np.float32) / np.float32(np.sqrt(t.shape[0])), element)
