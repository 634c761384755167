"""The composite ops' formulas, written once over an arithmetic interface.

`gelu`, `sigmoid`, `silu`, `softmax`, `layernorm`, `rmsnorm` and `attention`
are defined here and nowhere else. Each formula takes `o`, an object with
the methods below, so that the same text

  * computes the reference numbers (`NUMPY`, float32 numpy: the ops'
    `evaluate`; `NUMPY64`, the same in float64, checks hand-written kernels),
  * builds primitive tensor ops (`passes/transforms/decompose.py`), which
    therefore give the reference's numbers bit for bit,
  * builds scalar loop IR (`passes/lowering/scalar_formulas.FormulaScalars`: the
    elementwise composites `gelu`, `sigmoid`, `silu`; every backend reaches
    them through the lowering).

The interface, operation by operation in the order written (the order is
the semantics: float arithmetic is not associative):

    const(value, like)       an f32 number usable against `like`
    add sub mul div          binary, broadcasting
    neg exp tanh erf sqrt reciprocal
    reduce_max / reduce_sum / reduce_mean(x, axis)     keepdims, axis >= 0
    matmul(a, b, transpose_b)
    select(condition, a, b); mask(array)               an i1 constant
"""

from __future__ import annotations

import math

import numpy as np

from .base import DomainError
from .numerics import erf as erf64

GELU_TANH_COEFF = math.sqrt(2.0 / math.pi)
GELU_CUBIC_COEFF = 0.044715


def sigmoid(o, x):
    return o.reciprocal(o.add(o.const(1.0, x), o.exp(o.neg(x))))


def silu(o, x):
    return o.mul(x, sigmoid(o, x))


def gelu(o, x, approximate: str):
    half_x = o.mul(o.const(0.5, x), x)
    if approximate == "tanh":
        cube = o.mul(o.mul(o.mul(o.const(GELU_CUBIC_COEFF, x), x), x), x)
        inner = o.mul(o.const(GELU_TANH_COEFF, x), o.add(x, cube))
        return o.mul(half_x, o.add(o.const(1.0, x), o.tanh(inner)))
    erf = o.erf(o.div(x, o.const(math.sqrt(2.0), x)))
    return o.mul(half_x, o.add(o.const(1.0, x), erf))


def softmax(o, x, axis: int):
    """exp(x - max) / sum(exp(x - max)) along `axis` (non-negative)."""
    e = o.exp(o.sub(x, o.reduce_max(x, axis)))
    return o.div(e, o.reduce_sum(e, axis))


def layernorm(o, x, gamma, beta, epsilon: float, axis: int):
    mean = o.reduce_mean(x, axis)
    centred = o.sub(x, mean)
    var = o.reduce_mean(o.mul(centred, centred), axis)
    normed = o.div(centred, o.sqrt(o.add(var, o.const(epsilon, x))))
    return o.add(o.mul(normed, gamma), beta)


def rmsnorm(o, x, gamma, epsilon: float, axis: int):
    mean_square = o.reduce_mean(o.mul(x, x), axis)
    return o.mul(o.div(x, o.sqrt(o.add(mean_square, o.const(epsilon, x)))), gamma)


def causal_mask(rows: int, cols: int) -> np.ndarray:
    """True above the diagonal: the keys a query may not see."""
    return np.triu(np.ones((rows, cols), bool), k=1)


def attention(o, q, k, v, mask, scale: float, causal: bool, rows: int, cols: int, last_axis: int):
    """softmax(q kᵀ * scale [+ mask], causal: -inf selected above the
    diagonal) v. `rows`, `cols`: the scores' last two dims; `last_axis`: the
    scores' last axis."""
    scores = o.mul(o.matmul(q, k, transpose_b=True), o.const(scale, q))
    if mask is not None:
        scores = o.add(scores, mask)
    if causal and cols > 1:  # one key: nothing lies above the diagonal
        scores = o.select(o.mask(causal_mask(rows, cols)), o.const(-math.inf, q), scores)
    return o.matmul(softmax(o, scores, last_axis), v)


class NumpyF32:
    """The interface in float32 numpy: the reference numbers. Operands are
    float32 arrays; the caller silences floating-point warnings."""

    def const(self, value, like):
        return np.float32(value)

    add, sub, mul, div = (staticmethod(f) for f in (np.add, np.subtract, np.multiply, np.divide))
    neg, exp, tanh, sqrt = (staticmethod(f) for f in (np.negative, np.exp, np.tanh, np.sqrt))

    @staticmethod
    def erf(x):
        return erf64(x).astype(np.float32)

    @staticmethod
    def reciprocal(x):
        return np.float32(1.0) / x

    @staticmethod
    def reduce_max(x, axis: int):
        if x.shape[axis] == 0:
            raise DomainError("a maximum over an empty axis has no value")
        return np.max(x, axis=axis, keepdims=True)

    @staticmethod
    def reduce_sum(x, axis: int):
        return np.sum(x, axis=axis, keepdims=True)

    @staticmethod
    def reduce_mean(x, axis: int):
        return np.mean(x, axis=axis, keepdims=True)

    @staticmethod
    def matmul(a, b, transpose_b: bool = False):
        return np.matmul(a, np.swapaxes(b, -1, -2) if transpose_b else b)

    @staticmethod
    def select(condition, a, b):
        return np.where(condition, a, b)

    @staticmethod
    def mask(array):
        return array


NUMPY = NumpyF32()


class NumpyF64(NumpyF32):
    """The same formulas in float64: an oracle for checking float32 kernels."""

    def const(self, value, like):
        return np.float64(value)

    @staticmethod
    def erf(x):
        return erf64(x)

    @staticmethod
    def reciprocal(x):
        return 1.0 / x


NUMPY64 = NumpyF64()
