"""Every program in examples/ parses, verifies, round-trips and runs on the
reference interpreter; the named ones match a hand-written numpy model."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify
from fusecc.runtime.reference import evaluate, random_input

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
ALL = sorted(EXAMPLES.glob("*.ir"))


def load(name: str):
    path = EXAMPLES / name
    module = parse_module(path.read_text(), str(path))
    verify(module)
    return module


def test_the_required_examples_exist():
    assert {"mlp.ir", "attention.ir", "encoder_block.ir", "llama_block.ir"} <= {p.name for p in ALL}


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_example_round_trips_and_runs(path):
    module = parse_module(path.read_text(), str(path))
    verify(module)
    custom = print_op(module)
    assert print_op(parse_module(custom)) == custom
    assert print_op(parse_module(print_op(module, generic=True))) == custom
    located = print_op(module, debuginfo=True)
    assert print_op(parse_module(located), debuginfo=True) == located
    for func in module.functions():
        rng = np.random.default_rng(0)
        inputs = [random_input(t, rng) for t in func.function_type.inputs]
        results = evaluate(module, func.sym_name, inputs)
        assert [r.shape for r in results] == [tuple(t.shape) for t in func.function_type.results]
        assert all(np.isfinite(r).all() for r in results if r.dtype.kind == "f")


# --------------------------------------------------------------------------- numpy models

rng = np.random.default_rng(7)


def weight(*shape):
    """Weights scaled like an initialised network, so values stay O(1)."""
    return (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)


def vector(n, mean=0.0):
    return (mean + 0.1 * rng.standard_normal(n)).astype(np.float32)


def gelu(x, approximate=False):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layernorm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps) * gamma + beta


def f64(*arrays):
    return [a.astype(np.float64) for a in arrays]


def test_mlp_matches_numpy():
    x = rng.standard_normal((128, 768)).astype(np.float32)
    w1, b1, w2, b2 = weight(768, 3072), vector(3072), weight(3072, 768), vector(768)
    (got,) = evaluate(load("mlp.ir"), "mlp", [x, w1, b1, w2, b2])
    x, w1, b1, w2, b2 = f64(x, w1, b1, w2, b2)
    np.testing.assert_allclose(got, gelu(x @ w1 + b1, approximate=True) @ w2 + b2, rtol=1e-4, atol=1e-4)


def test_attention_op_by_op_matches_the_composite_and_numpy():
    module = load("attention.ir")
    q, k, v = (rng.standard_normal((2, 8, 256, 64)).astype(np.float32) for _ in range(3))
    mask = np.where(rng.random((2, 1, 1, 256)) < 0.2, -1e4, 0).astype(np.float32)
    (chain,) = evaluate(module, "attention", [q, k, v, mask])
    (composite,) = evaluate(module, "attention_composite", [q, k, v, mask])
    q, k, v, mask = f64(q, k, v, mask)
    expected = softmax(q @ np.swapaxes(k, -1, -2) / 8 + mask) @ v
    np.testing.assert_allclose(chain, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(composite, expected, rtol=1e-4, atol=1e-5)


def split_heads(x, heads):
    b, s, h = x.shape
    return x.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    b, n, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, n * d)


def test_encoder_block_matches_numpy():
    x = rng.standard_normal((1, 128, 768)).astype(np.float32)
    mask = np.zeros((1, 1, 1, 128), np.float32)
    mask[..., 100:] = -10000.0  # padding
    params = []
    for _ in range(4):
        params += [weight(768, 768), vector(768)]
    params += [vector(768, 1.0), vector(768)]
    params += [weight(768, 3072), vector(3072), weight(3072, 768), vector(768)]
    params += [vector(768, 1.0), vector(768)]
    (got,) = evaluate(load("encoder_block.ir"), "encoder_block", [x, mask, *params])
    x, mask, *p = f64(x, mask, *params)
    wq, bq, wk, bk, wv, bv, wo, bo, g1, be1, w1, b1, w2, b2, g2, be2 = p
    q, k, v = (split_heads(x @ w + b, 12) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    context = merge_heads(softmax(q @ np.swapaxes(k, -1, -2) * 0.125 + mask) @ v)
    h = layernorm(x + context @ wo + bo, g1, be1, 1e-12)
    expected = layernorm(h + gelu(h @ w1 + b1) @ w2 + b2, g2, be2, 1e-12)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


def test_llama_block_matches_numpy():
    hidden, heads, ffn, seq = 1024, 16, 2816, 128
    x = rng.standard_normal((1, seq, hidden)).astype(np.float32)
    positions = np.arange(seq)[:, None] * (10000.0 ** (-np.arange(0, 64, 2) / 64))[None, :]
    angles = np.concatenate([positions, positions], axis=-1)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    mask = np.triu(np.full((seq, seq), -1e9, np.float32), k=1)
    g_attn, g_ffn = vector(hidden, 1.0), vector(hidden, 1.0)
    wq, wk, wv, wo = (weight(hidden, hidden) for _ in range(4))
    w_gate, w_up, w_down = weight(hidden, ffn), weight(hidden, ffn), weight(ffn, hidden)
    args = [x, cos, sin, mask, g_attn, wq, wk, wv, wo, g_ffn, w_gate, w_up, w_down]
    (got,) = evaluate(load("llama_block.ir"), "llama_block", args)
    x, cos, sin, mask, g_attn, wq, wk, wv, wo, g_ffn, w_gate, w_up, w_down = f64(*args)

    def rmsnorm(t, g):
        return t / np.sqrt((t * t).mean(-1, keepdims=True) + 1e-6) * g

    def rope(t):
        rotated = np.concatenate([-t[..., 32:], t[..., :32]], axis=-1)
        return t * cos + rotated * sin

    h = rmsnorm(x, g_attn)
    q, k, v = (split_heads(h @ w, heads) for w in (wq, wk, wv))
    q, k = rope(q), rope(k)
    attention = merge_heads(softmax(q @ np.swapaxes(k, -1, -2) * 0.125 + mask) @ v)
    r = x + attention @ wo
    h = rmsnorm(r, g_ffn)
    gate = h @ w_gate
    expected = r + ((gate / (1 + np.exp(-gate))) * (h @ w_up)) @ w_down
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
