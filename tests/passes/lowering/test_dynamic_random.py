"""Random programs over `?` batch and sequence dims on the CPU, each compiled
once and run at several sizes (1 and primes) against the reference
(docs/dynamic-shapes.md): chains of elementwise ops, broadcasts of static
vectors, row reductions (softmax, layernorm, keepdims sums, maxima and
means) over a static or a `?` axis, and matmuls with static weights."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusecc

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


def sensitivity(reference, args: dict, rng) -> np.ndarray:
    """How far each result element moves when every input element moves by a
    random 2^-16 of itself (two runs of the reference): a target that sums in
    another order is allowed that much more. A layernorm of a nearly constant
    row (after a matmul) amplifies a last-bit difference in its input by
    1/std, past any fixed tolerance; a well-conditioned element moves ~1e-5
    of itself, far less than a wrong result."""
    (expected,) = reference(**args).values()
    moved = []
    for _ in range(2):
        jittered = {k: (v * (1 + 2.0**-16 * rng.uniform(-1, 1, v.shape))).astype(np.float32) for k, v in args.items()}
        (result,) = reference(**jittered).values()
        moved.append(np.abs(result - expected))
    return np.nan_to_num(np.maximum(*moved), nan=0.0, posinf=0.0)


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
