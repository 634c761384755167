"""The CPU target's tolerance policy (docs/cpu-target.md), as test helpers.

Compiled kernels give the loop interpreter's numbers bit for bit, except
where a kernel calls exp/log/tanh/erf (inline polynomial expansions, within
a few ulp of the interpreter's numpy/float64 values) or pow (libm's powf):
then errors propagate through the kernel's arithmetic, and results are
compared with a relative tolerance on the magnitude of the values involved.
"""

from __future__ import annotations

import numpy as np

# Per-op, against the interpreter (which uses numpy's float32 exp/log/tanh,
# themselves up to 3 ulp from the exact value, and a float64 erf).
ULP_TOLERANCE = {"exp": 4, "log": 4, "tanh": 4, "erf": 5, "pow": 2}  # erf: 4.51 ulp from the exact value, so <= 5 from the rounded one
# Whole kernels containing those ops: |cpu - interp| <= KERNEL_RTOL * scale,
# scale the largest magnitude in the result (sums and normalisations mix
# values of that size, so their absolute rounding is relative to it).
KERNEL_RTOL = 4e-6


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units of the last place of float32 values (nan == nan)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)

    def ordered(x):
        bits = x.view(np.int32).astype(np.int64)
        return np.where(bits < 0, np.int64(-(2**31)) - bits, bits)

    distance = np.abs(ordered(a) - ordered(b))
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.where(np.isnan(a) | np.isnan(b), np.iinfo(np.int64).max, distance))


def assert_exact(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


def assert_within_ulp(got, want, ulps: int) -> None:
    distance = ulp_distance(got, want)
    worst = int(distance.max()) if distance.size else 0
    assert worst <= ulps, f"{worst} ulp apart (allowed {ulps}) at {np.unravel_index(int(distance.argmax()), distance.shape)}"


def assert_kernel_close(got: np.ndarray, want: np.ndarray, rtol: float = KERNEL_RTOL) -> None:
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * max(scale, 1e-30))
