"""The tolerance policy (docs/fuzzing.md "Tolerances"): a target's result
against the oracle's, element by element, on the elements where the
program is well-conditioned.

  dtype   rtol      what it allows
  f32     1e-4      f32 arithmetic and library exp/tanh/erf vs float64, over a chain
  f16     2.5e-4    less than 1 ulp: a stable element rounds as the oracle does
  bf16    2e-3      less than 1 ulp of bf16 (8 bits of mantissa)
  ints    exact     wrap-around, saturating casts and division rules are exact
  i1      exact

Narrow floats are held to the oracle's rounding exactly: an element whose
value before rounding lies within the jitter (2^-16) of a rounding boundary
is unstable and not judged; on every other one a target that rounds (or
fails to round) differently is off by a whole ulp. With 4 ulp of slack, a
missing bf16 rounding inside a fused kernel (issue 16.B) showed on 0.7% of
seeds; held to the ulp, on 4%.

An element passes when |target - oracle| <= rtol * (|oracle| + floor), with
floor = 1e-3 * the largest finite |oracle| of that result (so values that
cancelled to near 0 are judged against the result's scale). NaN must meet
NaN, ±inf the same infinity; -0.0 and +0.0 are equal. Elements where the
jittered oracles (`oracle.evaluate(jitter=...)`) leave this tolerance are
ill-conditioned and not judged; the shape and dtype of every result are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RTOL = {"f32": 1e-4, "f16": 2.5e-4, "bf16": 2e-3}
FLOOR = 1e-3


def close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """Per element: does `actual` meet `expected` under `dtype`'s tolerance."""
    if dtype not in RTOL:
        return np.asarray(actual).astype(np.int64) == np.asarray(expected).astype(np.int64)
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    finite = np.isfinite(e)
    scale = float(np.max(np.abs(e[finite]))) if finite.any() else 0.0
    with np.errstate(all="ignore"):
        near = np.abs(a - e) <= RTOL[dtype] * (np.abs(e) + FLOOR * scale)
    same_special = (np.isnan(a) & np.isnan(e)) | (np.isinf(e) & (a == e))
    return np.where(finite, near & np.isfinite(a), same_special)


def stable_mask(expected: np.ndarray, jittered: list[np.ndarray], dtype: str) -> np.ndarray:
    mask = np.ones(np.shape(expected), dtype=bool)
    for other in jittered:
        mask &= close(other, expected, dtype)
    return mask


@dataclass
class Verdict:
    ok: bool
    detail: str = ""
    judged: int = 0  # elements compared


def compare_results(actual: list[np.ndarray], expected: list[np.ndarray], masks: list[np.ndarray], dtypes: list[str]) -> Verdict:
    if len(actual) != len(expected):
        return Verdict(False, f"{len(actual)} results, expected {len(expected)}")
    judged = 0
    for i, (a, e, m, dtype) in enumerate(zip(actual, expected, masks, dtypes)):
        a = np.asarray(a)
        if a.shape != e.shape:
            return Verdict(False, f"result {i}: shape {list(a.shape)}, expected {list(e.shape)}")
        good = close(a, e, dtype) | ~m
        judged += int(m.sum())
        if not good.all():
            where = tuple(int(x) for x in np.argwhere(~good)[0])
            return Verdict(False, f"result {i} ({dtype}): {int((~good).sum())} of {good.size} elements differ, first at {list(where)}: got {a[where]!r}, expected {e[where]!r}", judged)
    return Verdict(True, "", judged)
