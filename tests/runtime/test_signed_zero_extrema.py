"""max/min of signed zeros and NaN (docs/semantics.md: IEEE 754-2019
maximum/minimum, +0.0 > -0.0, NaN propagates; relu(x) = maximum(x, 0)).
Fuzz seeds 5161, 5571, 6296, 7397, 7832: numpy's maximum returns its second
operand on a tie, so the reference gave max(-0, +0) = +0 but
max(+0, -0) = -0, and the CPU the opposite. Each result goes through a
reciprocal so that the sign of a zero shows as ±inf; every level must give
the same bits: the tensor dialect's evaluate (reference, constant folding),
the loop interpreter, the CPU target and the CUDA C on the CPU harness
(sanitized)."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, run_pipeline
from fusecc.compiler.verifier import verify
from fusecc.driver import targets
from fusecc.runtime.reference import evaluate

NAN, INF = float("nan"), float("inf")
# every ordered pair of {-0, +0, NaN, 1, -1}: both orders of each pair
VALUES = [-0.0, 0.0, NAN, 1.0, -1.0]
A = np.array([a for a in VALUES for _ in VALUES], np.float32)
B = np.array([b for _ in VALUES for b in VALUES], np.float32)
N = len(A)

ELEMENTWISE = f"""
func.func @main(%a: tensor<{N}xf32>, %b: tensor<{N}xf32>) -> (tensor<{N}xf32>, tensor<{N}xf32>, tensor<{N}xf32>) {{
  %0 = tensor.max %a, %b : (tensor<{N}xf32>, tensor<{N}xf32>) -> tensor<{N}xf32>
  %1 = tensor.reciprocal %0 : (tensor<{N}xf32>) -> tensor<{N}xf32>
  %2 = tensor.min %a, %b : (tensor<{N}xf32>, tensor<{N}xf32>) -> tensor<{N}xf32>
  %3 = tensor.reciprocal %2 : (tensor<{N}xf32>) -> tensor<{N}xf32>
  %4 = tensor.relu %a : (tensor<{N}xf32>) -> tensor<{N}xf32>
  %5 = tensor.reciprocal %4 : (tensor<{N}xf32>) -> tensor<{N}xf32>
  func.return %1, %3, %5 : tensor<{N}xf32>, tensor<{N}xf32>, tensor<{N}xf32>
}}"""

# rows of zeros in both orders, with a NaN, and a row of only -0
ROWS = np.array([[-0.0, 0.0, -1.0], [0.0, -0.0, -1.0], [-0.0, -0.0, -2.0], [0.0, 0.0, -3.0], [-0.0, NAN, 0.0], [-0.0, 1.0, 0.0]], np.float32)
REDUCTIONS = """
func.func @main(%x: tensor<6x3xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  %0 = tensor.reduce_max %x {axes = [1]} : (tensor<6x3xf32>) -> tensor<6xf32>
  %1 = tensor.reciprocal %0 : (tensor<6xf32>) -> tensor<6xf32>
  %n = tensor.neg %x : (tensor<6x3xf32>) -> tensor<6x3xf32>
  %2 = tensor.reduce_min %n {axes = [1]} : (tensor<6x3xf32>) -> tensor<6xf32>
  %3 = tensor.reciprocal %2 : (tensor<6xf32>) -> tensor<6xf32>
  func.return %1, %3 : tensor<6xf32>, tensor<6xf32>
}"""


def ieee_maximum(a: float, b: float) -> float:
    if a != a or b != b:
        return NAN
    if a == b == 0:
        return 0.0 if not (np.signbit(a) and np.signbit(b)) else -0.0
    return max(a, b)


def ieee_minimum(a: float, b: float) -> float:
    if a != a or b != b:
        return NAN
    if a == b == 0:
        return -0.0 if (np.signbit(a) or np.signbit(b)) else 0.0
    return min(a, b)


def reciprocal(values) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.float32(1) / np.array(values, np.float32)


def fold(function, row) -> float:
    out = row[0]
    for x in row[1:]:
        out = function(out, x)
    return out


EXPECTED = {
    "elementwise": [
        reciprocal([ieee_maximum(a, b) for a, b in zip(A, B)]),
        reciprocal([ieee_minimum(a, b) for a, b in zip(A, B)]),
        reciprocal([ieee_maximum(a, 0.0) for a in A]),
    ],
    "reductions": [
        reciprocal([fold(ieee_maximum, row) for row in ROWS]),
        reciprocal([fold(ieee_minimum, -row) for row in ROWS]),
    ],
}
PROGRAMS = {"elementwise": (ELEMENTWISE, [A, B]), "reductions": (REDUCTIONS, [ROWS])}


def parse(text: str):
    module = parse_module(text)
    verify(module)
    return module


def assert_same_bits(got, expected) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g, np.float32)
        nan = np.isnan(e)
        np.testing.assert_array_equal(np.isnan(g), nan)
        np.testing.assert_array_equal(g.view(np.uint32)[~nan], e.view(np.uint32)[~nan])


def test_the_expectations_show_the_sign_of_zero():
    # +inf/-inf from 1/±0: max(-0, +0) and max(+0, -0) are both +0, min both -0
    maxima, minima, relus = EXPECTED["elementwise"]
    pair = {(a, b): i for i, (a, b) in enumerate(zip(A.tolist(), B.tolist())) if a == b == 0}
    for index in pair.values():
        assert maxima[index] == INF or (np.signbit(A[index]) and np.signbit(B[index]))
    assert relus[0] == INF  # relu(-0) = +0


@pytest.mark.parametrize("name", PROGRAMS)
def test_reference(name):
    text, args = PROGRAMS[name]
    assert_same_bits(evaluate(parse(text), "main", args), EXPECTED[name])


@pytest.mark.parametrize("name", PROGRAMS)
def test_constant_folding(name):
    # the same program with its inputs as constants: canonicalize folds it through evaluate
    text, args = PROGRAMS[name]
    module = parse(_with_constant_inputs(text, args))
    assert_same_bits(targets.get("cpu").run(module, "main", [], DiagnosticEngine()), EXPECTED[name])


@pytest.mark.parametrize("name", PROGRAMS)
def test_loop_interpreter(name):
    # the legalized loop level the backends render, run by the loop interpreter
    from fusecc.driver.cpu_target import loop_pipeline
    from fusecc.runtime.loop_interpreter import run_schedule

    text, args = PROGRAMS[name]
    module = parse(text)
    run_pipeline(loop_pipeline(), module, PassContext(target="cpu"))
    assert_same_bits(run_schedule(module, "main", args), EXPECTED[name])


@pytest.mark.parametrize("name", PROGRAMS)
def test_cpu_target(name):
    text, args = PROGRAMS[name]
    assert_same_bits(targets.get("cpu").run(parse(text), "main", args, DiagnosticEngine()), EXPECTED[name])


@pytest.mark.parametrize("name", PROGRAMS)
def test_cuda_c_on_the_sanitized_harness(name):
    from fusecc.driver.cuda_target import compile_program
    from fusecc.runtime.cuda.cpu_harness.sanitizer import run_sanitized

    text, args = PROGRAMS[name]
    source, manifest = compile_program(parse(text), "main", "sm_90", PassContext(target="h200"))
    assert "fmaxf" not in source and "fminf" not in source  # fmaxf may return either zero
    outputs, findings = run_sanitized(manifest, source, args)
    assert findings == []
    assert_same_bits([outputs[spec.name] for spec in manifest.outputs], EXPECTED[name])


def _with_constant_inputs(text: str, args) -> str:
    """`text` with @main's arguments turned into dense constants."""
    header, body = text.split("{\n", 1)
    names = [part.split(":")[0].strip() for part in header.split("(", 1)[1].split(")")[0].split("%")[1:]]
    types = [part.split(":")[1].strip().rstrip(",") for part in header.split("(", 1)[1].split(")")[0].split("%")[1:]]
    constants = []
    for name, t, value in zip(names, types, args):
        bits = np.asarray(value, np.float32).view(np.uint32)
        literal = np.array2string(bits, separator=", ", threshold=10**6, formatter={"int": lambda b: f"0x{b:08X}"})
        constants.append(f"  %{name} = tensor.constant {{value = dense<{literal}> : {t}}} : () -> {t}")
    new_header = header.split("(", 1)[0] + "()" + header.split(")", 1)[1]
    return new_header + "{\n" + "\n".join(constants) + "\n" + body
