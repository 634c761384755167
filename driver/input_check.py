"""Checking a program's inputs: name, shape, dtype, and conversions that lose values.

`fusecc run` and the Python API (`fusecc.compile(...)(...)`) hand arrays to
a program through `check_input`. An array of another dtype is converted to
the argument's element type; when that changes a value (float64 narrowed
to f32, int64 out of i32's range, 0.5 into an integer), the conversion is
lossy and is refused or warned about, never silent. A lossless one (int64
token ids that fit i32, float64 values exactly representable in f32) passes
quietly.
"""

from __future__ import annotations

import warnings

import numpy as np

from fusecc.compiler.diagnostics import UsageError
from fusecc.compiler.types import ShapedType, bf16, round_to_bf16

LOSSY_POLICIES = ("warn", "error", "allow")


class InputError(UsageError, ValueError):
    """An input of the wrong name, shape or dtype, or a refused lossy conversion."""


class LossyConversionWarning(UserWarning):
    """An input was converted to the argument's dtype and some values changed."""


def _same(original: np.ndarray, converted: np.ndarray) -> np.ndarray:
    """Per element, whether the conversion kept the value (NaN stays NaN)."""
    with np.errstate(all="ignore"):
        back = converted.astype(original.dtype)
    same = back == original
    if original.dtype.kind == "f":
        same |= np.isnan(original) & np.isnan(back)
    return same


def _describe_loss(original: np.ndarray, converted: np.ndarray, same: np.ndarray) -> str:
    text = f"{int(same.size - np.count_nonzero(same))} of {original.size} values change"
    if original.dtype.kind == "f" and converted.dtype.kind == "f":
        with np.errstate(all="ignore"):
            error = np.abs(converted.astype(np.float64) - original.astype(np.float64))
        finite = error[np.isfinite(error)]
        if finite.size:
            text += f" (by up to {finite.max():.3g})"
    return text


def convert(array: np.ndarray, t: ShapedType) -> np.ndarray:
    """`array` in the storage dtype of `t`'s elements (bf16 rounded, kept in float32)."""
    with np.errstate(all="ignore"):
        converted = array.astype(t.element_type.numpy_dtype, copy=False)
    return round_to_bf16(converted) if t.element_type is bf16 else converted


def _fits_dynamic(shape, t: ShapedType) -> bool:
    """A `?` dim takes any size here; the program binds and checks it per call."""
    return len(shape) == t.rank and not t.is_static and all(type(d) is not int or d == n for d, n in zip(t.shape, shape))


def check_input(value, t: ShapedType, what: str, lossy: str = "warn") -> np.ndarray:
    """`value` as an array of `t`'s shape and element type.

    `what` names the input in messages ("input 'x' of @main"). `lossy`:
    "warn" (a LossyConversionWarning), "error" (an InputError) or "allow".
    """
    if lossy not in LOSSY_POLICIES:
        raise UsageError(f"lossy must be one of {', '.join(LOSSY_POLICIES)}, not {lossy!r}")
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise InputError(f"{what} has dtype {array.dtype}, which cannot become {t.element_type}")
    if tuple(array.shape) != tuple(t.shape) and not _fits_dynamic(array.shape, t):
        raise InputError(f"{what} has shape {list(array.shape)}, but {t} needs {list(t.shape)}")
    if array.dtype == t.element_type.numpy_dtype and t.element_type is not bf16:
        return array
    converted = convert(array, t)
    if lossy != "allow":
        same = _same(array, converted)
        if not same.all():
            message = f"{what} is {array.dtype} and becomes {t.element_type}: {_describe_loss(array, converted, same)}"
            if lossy == "error":
                raise InputError(f"{message}; convert it first (astype) or pass lossy='allow'")
            warnings.warn(message, LossyConversionWarning, stacklevel=3)
    return converted


__all__ = ["InputError", "LOSSY_POLICIES", "LossyConversionWarning", "check_input", "convert"]
