"""Comparing the reference interpreter's results before and after a transformation."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fusecc.compiler.ir import Operation
from fusecc.runtime.reference import evaluate, random_input


SPECIAL_FLOATS = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], np.float32)
SPECIAL_VARIANTS = len(SPECIAL_FLOATS)


def salted(rng, shape, fraction: float = 0.02) -> np.ndarray:
    """Normal values with NaN, +inf, -inf and -0.0 at random places."""
    a = rng.standard_normal(shape).astype(np.float32)
    flat = a.reshape(-1)
    count = max(1, int(flat.size * fraction)) if flat.size >= 4 else 0
    places = rng.choice(flat.size, size=min(count * 4, flat.size), replace=False)
    for special, chosen in zip((np.nan, np.inf, -np.inf, -0.0), np.array_split(places, 4)):
        flat[chosen] = special
    return a


# `?` dims (docs/dynamic-shapes.md) take these sizes, one per dim symbol in
# order of appearance: distinct primes, so mixing two dims up shows.
DYNAMIC_SIZES = (3, 5, 7, 11, 13)


def at_sizes(t, sizes: Sequence[int], seen: dict | None = None):
    """`t` with each dynamic dim at a size: a dim symbol takes the next of
    `sizes` the first time it appears (`seen` keeps them across types)."""
    if not hasattr(t, "shape") or all(type(d) is int for d in t.shape):
        return t
    seen = _seen if seen is None else seen
    shape = []
    for d in t.shape:
        if type(d) is not int:
            for symbol in sorted(d.free_symbols, key=str):
                seen.setdefault(symbol, sizes[len(seen) % len(sizes)])
            d = int(d.xreplace(seen))
        shape.append(d)
    return t.with_shape(shape)


_seen: dict = {}


def function_inputs(func: Operation, seed: int = 0, special: int | None = None) -> list[np.ndarray]:
    """Seeded normal floats. With `special` = k in range(SPECIAL_VARIANTS),
    two of every three float elements are -0.0, 0.0, ±inf, NaN or ±1 instead,
    rotated by k so that across the variants each such element takes every
    special value; they tell exact rewrites from nearly exact ones."""
    rng = np.random.default_rng(seed)
    inputs = [random_input(at_sizes(t, DYNAMIC_SIZES), rng) for t in func.function_type.inputs]
    if special is not None:
        for array in inputs:
            if array.dtype.kind == "f":
                flat = array.reshape(-1)
                index = np.arange(flat.size)
                salted = index % 3 != 2
                flat[salted] = SPECIAL_FLOATS[(index[salted] + special) % SPECIAL_VARIANTS].astype(array.dtype)
    return inputs


def run_all(module: Operation, seed: int = 0, special: int | None = None) -> dict[str, list[np.ndarray]]:
    """Every function's results on seeded random inputs."""
    with np.errstate(all="ignore"):
        return {f.sym_name: evaluate(module, f.sym_name, function_inputs(f, seed, special)) for f in module.functions()}


def assert_exact(before: Sequence[np.ndarray], after: Sequence[np.ndarray], what: str = "") -> None:
    """Same dtypes, shapes and values bit for bit, -0.0 and NaN positions included."""
    assert len(before) == len(after), what
    for i, (a, b) in enumerate(zip(before, after)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what} result {i}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"{what} result {i}: NaN positions")
            same = np.isnan(a) | ((a == b) & (np.signbit(a) == np.signbit(b)))
            assert same.all(), f"{what} result {i}: {np.count_nonzero(~same)} elements differ, e.g. {a[~same][:4]} vs {b[~same][:4]}"
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{what} result {i}")


def assert_close(before, after, rtol: float, atol: float, what: str = "") -> None:
    assert len(before) == len(after), what
    for i, (a, b) in enumerate(zip(before, after)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what} result {i}"
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{what} result {i}")
