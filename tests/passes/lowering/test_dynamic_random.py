"""Random programs over `?` batch and sequence dims on the CPU, each compiled
once and run at several sizes (1 and primes) against the reference
(docs/dynamic-shapes.md): chains of elementwise ops, broadcasts of static
vectors, row reductions (softmax, layernorm, keepdims sums, maxima and
means) over a static or a `?` axis, and matmuls with static weights."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusecc
from fusecc.dialects.tensor import formulas

SIZES = [(1, 1), (2, 3), (3, 7)]
UNARY = ("exp", "tanh", "neg", "gelu", "sigmoid")
BINARY = ("add", "sub", "mul", "max")


def tensor(dims: list) -> str:
    return "tensor<" + "".join(f"{d}x" for d in dims) + "f32>"


@st.composite
def programs(draw):
    """(text, names of the weight inputs with their static shapes)."""
    width = draw(st.sampled_from([1, 5, 16]))
    lines, weights = [], []
    current, shape = "%x", ["?", "?", width]  # [B, S, D]
    for n in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "bias", "rows", "reduce", "matmul"]))
        t = tensor(shape)
        name = f"%v{n}"
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            lines.append(f"  {name} = tensor.{op} {current} : ({t}) -> {t}")
        elif kind == "binary":  # with the input, when it has the same shape
            other = "%x" if shape == ["?", "?", width] else current
            op = draw(st.sampled_from(BINARY))
            lines.append(f"  {name} = tensor.{op} {current}, {other} : ({t}, {t}) -> {t}")
        elif kind == "bias":
            w = f"%w{len(weights)}"
            weights.append((w, [shape[-1]]))
            lines.append(f"  {name} = tensor.add {current}, {w} : ({t}, {tensor([shape[-1]])}) -> {t}")
        elif kind == "rows":
            op = draw(st.sampled_from(["softmax", "layernorm"]))
            if op == "softmax":
                lines.append(f"  {name} = tensor.softmax {current} {{axis = -1}} : ({t}) -> {t}")
            else:
                g, b = f"%w{len(weights)}", f"%w{len(weights) + 1}"
                weights += [(g, [shape[-1]]), (b, [shape[-1]])]
                v = tensor([shape[-1]])
                lines.append(f"  {name} = tensor.layernorm {current}, {g}, {b} {{epsilon = 1.0e-5}} : ({t}, {v}, {v}) -> {t}")
        elif kind == "reduce":
            op = draw(st.sampled_from(["reduce_sum", "reduce_max", "reduce_mean"]))
            kept = shape[:-1] + [1]
            reduced = f"%r{n}"
            lines.append(f"  {reduced} = tensor.{op} {current} {{axes = [2], keepdims = true}} : ({t}) -> {tensor(kept)}")
            lines.append(f"  {name} = tensor.sub {current}, {reduced} : ({t}, {tensor(kept)}) -> {t}")
        else:
            out = draw(st.sampled_from([1, 3, 8, 17]))
            w = f"%w{len(weights)}"
            weights.append((w, [shape[-1], out]))
            result = shape[:-1] + [out]
            lines.append(f"  {name} = tensor.matmul {current}, {w} : ({t}, {tensor([shape[-1], out])}) -> {tensor(result)}")
            shape = result
        current = name
    args = ", ".join([f"%x: {tensor(['?', '?', width])}"] + [f"{w}: {tensor(s)}" for w, s in weights])
    dims = '[["B", "S"]' + ", []" * len(weights) + "]"
    text = f"func.func @main({args}) -> {tensor(shape)} attributes {{fusecc.dims = {dims}}} {{\n" + "\n".join(lines) + f"\n  func.return {current} : {tensor(shape)}\n}}\n"
    return text, width, weights


# fusecc's f32 erf is within 4.6 ulp of the exact value (docs/cpu-target.md);
# the reference's is float64, rounded once
ERF_ULPS = 4.6


def sensitivity(reference, args: dict, rng) -> np.ndarray:
    """How far each result element moves (the largest of four runs of the
    reference) when every input element moves by a random 2^-16 of itself
    (two runs), and when the reference's erf moves within the CPU's erf
    bound, all up and at random (two runs): a target allowed that much is
    allowed that much more. GELU-erf deep in its negative tail is 1 + erf(z)
    with erf ≈ -1, a cancellation; there a few ulp of erf are percents of the
    GELU value (2.6e-2 at x ≈ -4.5), and a layernorm of a row of such values
    scales them up to O(1) (the B=3, S=7 program that failed at random in
    session 12: rows of x - sum(x) through gelu, a matmul and a layernorm).
    Where every element is well conditioned this adds ~1e-5 of a value, far
    less than a wrong result."""
    (expected,) = reference(**args).values()
    moved = []
    for _ in range(2):
        jittered = {k: (v * (1 + 2.0**-16 * rng.uniform(-1, 1, v.shape))).astype(np.float32) for k, v in args.items()}
        (result,) = reference(**jittered).values()
        moved.append(np.abs(result - expected))
    exact_erf = formulas.NumpyF32.erf
    for direction in ("up", "random"):
        def moved_erf(x, direction=direction):
            y = exact_erf(x)
            step = 1.0 if direction == "up" else rng.uniform(-1, 1, np.shape(y))
            return (y + ERF_ULPS * np.spacing(np.abs(y)) * step).astype(np.float32)

        with mock.patch.object(formulas.NumpyF32, "erf", staticmethod(moved_erf)):
            (result,) = reference(**args).values()
        moved.append(np.abs(result - expected))
    return np.nan_to_num(np.max(moved, axis=0), nan=0.0, posinf=0.0)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(programs())
def test_random_dynamic_programs_compile_once_and_match_the_reference(tmp_path, program):
    text, width, weights = program
    path = tmp_path / "random.ir"
    path.write_text(text)
    compiled = fusecc.compile(str(path), target="cpu")
    reference = fusecc.compile(str(path), target="reference")
    rng = np.random.default_rng(5)
    for batch, seq in SIZES:
        args = {"x": rng.standard_normal((batch, seq, width)).astype(np.float32)}
        args.update({w[1:]: rng.standard_normal(s).astype(np.float32) for w, s in weights})
        (got,), (expected,) = compiled(**args).values(), reference(**args).values()
        assert got.shape == expected.shape, text
        scale = max(1.0, float(np.max(np.abs(expected))))
        slack = sensitivity(reference, args, rng)
        with np.errstate(invalid="ignore"):
            same = (got == expected) | (np.isnan(got) & np.isnan(expected)) | (np.abs(got - expected) <= 2e-5 * scale + slack)
        bad = np.argwhere(~same)
        assert not len(bad), f"B={batch} S={seq}: {len(bad)} elements differ, first {tuple(bad[0])}: {got[tuple(bad[0])]} vs {expected[tuple(bad[0])]}\n{text}"
    assert compiled.stats.compilations == 1


GELU_TAIL_THEN_LAYERNORM = """func.func @main(%x: tensor<?x?x5xf32>, %w0: tensor<5xf32>, %w1: tensor<5x8xf32>, %w2: tensor<8xf32>, %w3: tensor<8xf32>) -> tensor<?x?x8xf32> attributes {fusecc.dims = [["B", "S"], [], [], [], []]} {
  %v0 = tensor.add %x, %w0 : (tensor<?x?x5xf32>, tensor<5xf32>) -> tensor<?x?x5xf32>
  %r1 = tensor.reduce_sum %v0 {axes = [2], keepdims = true} : (tensor<?x?x5xf32>) -> tensor<?x?x1xf32>
  %v1 = tensor.sub %v0, %r1 : (tensor<?x?x5xf32>, tensor<?x?x1xf32>) -> tensor<?x?x5xf32>
  %v2 = tensor.gelu %v1 : (tensor<?x?x5xf32>) -> tensor<?x?x5xf32>
  %v3 = tensor.matmul %v2, %w1 : (tensor<?x?x5xf32>, tensor<5x8xf32>) -> tensor<?x?x8xf32>
  %v4 = tensor.layernorm %v3, %w2, %w3 {epsilon = 1.0e-5} : (tensor<?x?x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x?x8xf32>
  func.return %v4 : tensor<?x?x8xf32>
}
"""


def test_a_gelu_tail_under_a_layernorm_is_judged_within_the_erf_bound(tmp_path):
    # Session 12's random failure, replayed with its inputs: row (2, 6) has
    # x - sum(x) in [-4.7, -4.1], GELU's cancelling tail; the CPU is off by
    # more than the fixed tolerance there, and within what the reference
    # itself moves when its erf moves within the CPU's erf bound.
    path = tmp_path / "gelu_tail.ir"
    path.write_text(GELU_TAIL_THEN_LAYERNORM)
    compiled, reference = fusecc.compile(str(path), target="cpu"), fusecc.compile(str(path), target="reference")
    rng = np.random.default_rng(5)
    shapes = {"w0": [5], "w1": [5, 8], "w2": [8], "w3": [8]}
    for batch, seq in SIZES:
        args = {"x": rng.standard_normal((batch, seq, 5)).astype(np.float32)}
        args.update({name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()})
    (got,), (expected,) = compiled(**args).values(), reference(**args).values()
    fixed = 2e-5 * max(1.0, float(np.max(np.abs(expected))))
    error = np.abs(got - expected)
    assert error[2, 6].max() > fixed  # the case is still the one that failed
    assert (error <= fixed + sensitivity(reference, args, np.random.default_rng(1))).all()
