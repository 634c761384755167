"""The call a measurement makes and how its results are checked: seeded
inputs with `?` dims at the --shape-hint sizes, the dims a call's shapes
give, and the error against the reference interpreter (`PROGRAM_RTOL`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fusecc.compiler.dims import active_hints, hinted_shape
from fusecc.compiler.ir import Operation
from fusecc.driver.inputs import random_input_with_shrunk_weights

# Whole programs against the reference interpreter: |cpu - reference| <=
# PROGRAM_RTOL * max|reference| per result. Looser than the per-kernel
# policy of docs/cpu-target.md (4e-6): summation order differs (matmul
# tiles, partial sums), and the rounding it causes grows with the reductions.
PROGRAM_RTOL = 1e-4


def hinted_types(func: Operation) -> list:
    return [t if getattr(t, "is_static", True) else t.with_shape(hinted_shape(t.shape)) for t in func.function_type.inputs]


def model_inputs(func: Operation, seed: int) -> list[np.ndarray]:
    """Seeded inputs; `?` dims at the active --shape-hint sizes (DEFAULT_HINT
    for a dim without one; `describe_call_dims` says which)."""
    rng = np.random.default_rng(seed)
    return [random_input_with_shrunk_weights(t, rng) for t in hinted_types(func)]


def input_dims(func: Operation, shapes: Sequence[tuple]) -> dict[str, int]:
    """The named `?` dims a call's input shapes give (dim name -> size)."""
    dims: dict[str, int] = {}
    for t, shape in zip(func.function_type.inputs, shapes):
        for d, n in zip(getattr(t, "shape", ()), shape):
            if type(d) is not int and d.is_Symbol:
                dims.setdefault(str(d), int(n))
    return dims


def describe_call_dims(dims: dict[str, int], from_inputs: bool) -> str:
    """`B=8, S=128 (from --inputs)` or `B=8 (--shape-hint), S=64 (default hint)`;
    '' for a program without `?` dims."""
    if not dims:
        return ""
    if from_inputs:
        return ", ".join(f"{n}={v}" for n, v in sorted(dims.items())) + " (from --inputs)"
    hints = active_hints()
    return ", ".join(f"{n}={v} ({'--shape-hint' if n in hints else 'default hint'})" for n, v in sorted(dims.items()))


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """The worst result's max |got - want| / max |want| (inf on a shape,
    dtype or NaN-position mismatch; integers must be equal)."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return float("inf")
        if w.dtype.kind != "f":
            worst = max(worst, 0.0 if np.array_equal(g, w) else float("inf"))
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if not np.array_equal(np.isnan(g64), np.isnan(w64)):
            return float("inf")
        finite = ~np.isnan(w64)
        if not finite.any():
            continue
        scale = max(float(np.max(np.abs(w64[finite]))), 1e-30)
        with np.errstate(invalid="ignore"):
            error = np.abs(g64[finite] - w64[finite])
        error = np.where(g64[finite] == w64[finite], 0.0, error)  # equal infinities
        worst = max(worst, float(np.max(error)) / scale)
    return worst


__all__ = ["PROGRAM_RTOL", "compare", "describe_call_dims", "hinted_types", "input_dims", "model_inputs"]
