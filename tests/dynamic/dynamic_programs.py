"""The dynamic programs of tests/dynamic/programs, their inputs at given dim
sizes, and independent numpy versions of what they compute."""

from __future__ import annotations

import math
import pathlib

import numpy as np

from fusecc.compiler.dims import dim_symbol, evaluate_shape
from fusecc.compiler.parser import parse_module
from fusecc.compiler.verifier import verify

PROGRAMS = pathlib.Path(__file__).parent / "programs"


def load(name: str):
    """(module, entry function) of programs/<name>.ir, verified."""
    path = PROGRAMS / f"{name}.ir"
    module = parse_module(path.read_text(), str(path))
    verify(module)
    return module, next(iter(module.body))


def inputs(func, sizes: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Seeded arguments with each dynamic dim at `sizes` (by name); integer
    arguments are indices in [0, 50), valid for every table of the programs."""
    rng = np.random.default_rng(seed)
    bindings = {dim_symbol(k): v for k, v in sizes.items()}
    arrays = []
    for t in func.function_type.inputs:
        shape = evaluate_shape(t.shape, bindings)
        if t.element_type.is_float:
            arrays.append((rng.standard_normal(shape) / 4).astype(np.float32))
        else:
            arrays.append(rng.integers(0, 50, size=shape).astype(t.element_type.numpy_dtype))
    return arrays


# --------------------------------------------------------------------------- numpy versions


def _layernorm(x, g, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


_erf = np.vectorize(math.erf)


def numpy_encoder(ids, mask, table, pos, wq, wk, wv, wo, g, b, w1, w2):
    """programs/encoder.ir in float64 numpy."""
    f = lambda a: np.asarray(a, np.float64)  # noqa: E731
    table, wq, wk, wv, wo, g, b, w1, w2, mask = map(f, (table, wq, wk, wv, wo, g, b, w1, w2, mask))
    batch, seq = ids.shape
    x = _layernorm(table[ids], g, b, 1e-5)
    heads = lambda m: (x @ m).reshape(batch, seq, 4, 16).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = heads(wq), heads(wk), heads(wv)
    additive = ((1.0 - mask) * -10000.0).reshape(batch, 1, 1, seq)
    attention = _softmax(q @ k.transpose(0, 1, 3, 2) / 4.0 + additive) @ v
    merged = attention.transpose(0, 2, 1, 3).reshape(batch, seq, 64)
    n = _layernorm(merged @ wo + x, g, b, 1e-12)
    h = n @ w1
    return [0.5 * h * (1 + _erf(h / math.sqrt(2))) @ w2 + n]


def numpy_layout(x, y, z, w, i):
    """programs/layout.ir in float64 numpy (the i32 cast from float32)."""
    cat = np.concatenate([x, y], axis=1)
    mm = x.astype(np.float64) @ z
    sel = np.where(mm > w, mm, w)
    t = x.T
    bt = np.broadcast_to(y, (4, *y.shape)).transpose(1, 0, 2)
    return [
        cat,
        cat[1::2, 0:5],
        x.max(1),
        x.sum(1, keepdims=True),
        _softmax(x.astype(np.float64), 0),
        sel,
        sel.astype(np.float32).astype(np.int32),
        t,
        y[::-1],
        np.take(t, i, axis=1),
        bt.reshape(bt.shape[0], 32),
    ]


def numpy_norms(q, k, v):
    """programs/norms.ir in float64 numpy."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / 4.0
    rows, cols = scores.shape[-2:]
    scores = np.where(np.triu(np.ones((rows, cols), bool), k=1), -np.inf, scores)
    attention = _softmax(scores) @ v
    s = _softmax(attention, 2)
    r = s / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-6) * s
    return [r - r.mean(1, keepdims=True)]
