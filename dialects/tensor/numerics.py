"""The numeric rules the tensor ops' evaluations share (docs/semantics.md).

Floats compute in float32 whatever their storage (f16/bf16 values are widened,
computed, and rounded back to their storage precision); integers compute in
their own type with C's wrap-around; the few functions numpy lacks or gets
inconsistent (erf, integer division by zero, pow's special cases) are
defined here once.
"""

from __future__ import annotations

import math

import numpy as np

from fusecc.compiler.types import ScalarType, bf16, round_to_bf16

round_bf16 = round_to_bf16


def to_storage(array, element: ScalarType) -> np.ndarray:
    """Convert a computed array to the storage dtype of `element`."""
    array = np.asarray(array)
    # Overflow to inf (f16) and NaN-to-integer casts are the defined results, not warnings.
    with np.errstate(over="ignore", invalid="ignore"):
        # copy=False: results computed in float32 are stored as they are.
        if element.is_float:
            as32 = array.astype(np.float32, copy=False)
            if element is bf16:
                return round_bf16(as32)
            return as32.astype(element.numpy_dtype, copy=False)
        if element.is_bool:
            return array.astype(np.bool_, copy=False)
        if array.dtype.kind == "f":
            return float_to_int(array, element.numpy_dtype)
        return array.astype(element.numpy_dtype, copy=False)


def float_to_int(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Saturating conversion (docs/semantics.md, as LLVM's fptosi.sat): truncate
    toward zero; NaN gives 0; values beyond the type's range (±inf included)
    give its max or min. numpy's own cast leaves these undefined."""
    info = np.iinfo(dtype)
    wide = np.trunc(array.astype(np.float64))
    high, low, nan = wide >= 2.0 ** (info.bits - 1), wide < -(2.0 ** (info.bits - 1)), np.isnan(wide)
    in_range = np.where(high | low | nan, 0.0, wide).astype(dtype)
    return np.where(high, info.max, np.where(low, info.min, in_range)).astype(dtype)


def compute_view(array: np.ndarray) -> np.ndarray:
    """Floats are computed in float32 whatever their storage."""
    array = np.asarray(array)
    return array.astype(np.float32) if array.dtype.kind == "f" and array.dtype != np.float32 else array


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 to ~1e-13, then the caller rounds: numpy has none.

    Maclaurin series for |x| < 2.5 and a continued fraction for erfc above;
    both converge fast in those ranges.
    """
    x64 = np.asarray(x, dtype=np.float64)
    a = np.abs(x64)
    small = a < 2.5
    out = np.empty_like(x64)
    s = a[small]
    term = s.copy()
    total = s.copy()
    s2 = s * s
    for n in range(1, 60):
        term = term * (-s2) / n
        total = total + term / (2 * n + 1)
    out[small] = 2.0 / math.sqrt(math.pi) * total
    big = a[~small]
    # Lentz's continued fraction for erfc(z) = exp(-z²)/√π · 1/(z + 1/2/(z + 1/(z + 3/2/(z + ...))))
    frac = np.zeros_like(big)
    for k in range(60, 0, -1):
        frac = (k / 2.0) / (big + frac)
    erfc = np.exp(-big * big) / math.sqrt(math.pi) / (big + frac)
    out[~small] = 1.0 - erfc
    return np.copysign(out, x64)  # erf(-0.0) is -0.0 (C99), which np.sign loses


def divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iub":
        # C semantics (truncation toward zero); x/0 gives 0 rather than a trap.
        safe = np.where(b == 0, 1, b)
        q = np.floor_divide(a, safe)
        q = q + ((q < 0) & (q * safe != a))  # floor -> trunc for negative, inexact quotients
        return np.where(b == 0, 0, q).astype(np.result_type(a, b))
    return a / b


def power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a ** b. Floats follow C99's `pow` (Annex F), computed in float64 and
    rounded once: numpy's float loops take a sqrt shortcut when the exponent
    is a scalar 0.5 (NaN for pow(-inf, 0.5), -0.0 for pow(-0.0, 0.5)), so
    both operands are materialised as full arrays. Integers: numpy refuses
    negative exponents; C-like a**-n = trunc(1/a**n)."""
    if a.dtype.kind in "iu":
        negative = b < 0
        result = np.power(a, np.where(negative, 0, b))
        inverse = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
        return np.where(negative, inverse, result).astype(result.dtype)
    base, exponent = (np.array(x, dtype=np.float64) for x in np.broadcast_arrays(a, b))
    return np.power(base, exponent).astype(np.result_type(a, b))


def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 `maximum`: a NaN on either side is the result and +0.0
    is larger than -0.0, whichever side each is on (numpy's `maximum`
    returns `b` for a tie, so its answer for ±0 depends on the order)."""
    result = np.maximum(a, b)
    if result.dtype.kind != "f":
        return result
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0).astype(result.dtype), result)


def minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 `minimum`: a NaN on either side is the result and -0.0
    is smaller than +0.0."""
    result = np.minimum(a, b)
    if result.dtype.kind != "f":
        return result
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a) | np.signbit(b), -0.0, 0.0).astype(result.dtype), result)


def reduce_maximum(x: np.ndarray, axis, keepdims: bool = False) -> np.ndarray:
    """`maximum` folded over `axis` (NaN propagates; a zero result is +0.0
    when any +0.0 is among the reduced elements)."""
    result = np.max(x, axis=axis, keepdims=keepdims)
    if x.dtype.kind != "f":
        return result
    any_positive_zero = np.any((x == 0) & ~np.signbit(x), axis=axis, keepdims=keepdims)
    return np.where(result == 0, np.where(any_positive_zero, 0.0, -0.0).astype(x.dtype), result)


def reduce_minimum(x: np.ndarray, axis, keepdims: bool = False) -> np.ndarray:
    """`minimum` folded over `axis` (a zero result is -0.0 when any -0.0 is
    among the reduced elements)."""
    result = np.min(x, axis=axis, keepdims=keepdims)
    if x.dtype.kind != "f":
        return result
    any_negative_zero = np.any((x == 0) & np.signbit(x), axis=axis, keepdims=keepdims)
    return np.where(result == 0, np.where(any_negative_zero, -0.0, 0.0).astype(x.dtype), result)
