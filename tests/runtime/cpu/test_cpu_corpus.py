"""The differential corpus on `--target cpu`: every function of every
runnable golden input of the graph passes, fusion and the lowering
(tests/filecheck/passes/{canonicalize,cse,dce,inline,decompose,fusion,lowering})
runs through the whole chain on this CPU and gives the reference
interpreter's numbers; so does `fusecc run` from the command line, on the
encoder block, and `fusecc run` picks the CPU when there is no GPU.

Tolerance (docs/cpu-target.md, "whole programs"): integers and booleans
exactly; floats |cpu - reference| <= 1e-4 * max|reference| (the lowering
harness's PROGRAM tolerance: sums run in another order than numpy's, and
whole programs chain them), with the same non-finite elements, on normal
inputs and on inputs salted with special values. Examples are checked with
scaled inputs by test_cpu_pipeline.py.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.parser import parse_module, split_input
from fusecc.driver import targets
from fusecc.driver.cpu_target import CpuTarget
from fusecc.driver.measure import PROGRAM_RTOL
from fusecc.runtime.reference import InterpreterError, evaluate
from numerics import function_inputs

ROOT = pathlib.Path(__file__).resolve().parents[3]
CORPUS_DIRS = ("canonicalize", "cse", "dce", "inline", "decompose", "fusion", "lowering")
BIN = pathlib.Path(sys.executable).parent


def corpus() -> dict[str, str]:
    chunks = {}
    for d in CORPUS_DIRS:
        for path in sorted((ROOT / "tests/filecheck/passes" / d).glob("*.ir")):
            parts = split_input(path.read_text())
            for index, (text, _) in enumerate(parts):
                if "expected-error" not in text and "func.func" in text:
                    chunks[f"{d}/{path.stem}" + (f"#{index}" if len(parts) > 1 else "")] = text
    return chunks


CORPUS = corpus()


def assert_program_close(got, want, what: str) -> None:
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} result {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what} result {i}")
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        finite = np.isfinite(w64)
        np.testing.assert_array_equal(np.isnan(g64), np.isnan(w64), err_msg=f"{what} result {i}: NaN positions")
        np.testing.assert_array_equal(g64[~finite & ~np.isnan(w64)], w64[~finite & ~np.isnan(w64)], err_msg=f"{what} result {i}: infinities")
        scale = float(np.max(np.abs(w64[finite]))) if finite.any() else 0.0
        np.testing.assert_allclose(g64[finite], w64[finite], rtol=0, atol=PROGRAM_RTOL * max(scale, 1e-30), err_msg=f"{what} result {i}")


def test_the_corpus_is_not_empty():
    assert len(CORPUS) >= 50


# Normal inputs, and inputs where two of three floats are -0.0, 0.0, +-inf,
# NaN or +-1 (numerics.SPECIAL_FLOATS, rotated per variant): NaN and
# infinities must come out where the reference has them (max, min, relu
# and reduce_max/min propagate NaN, as numpy's do).
INPUT_VARIANTS = (None, 0, 2, 4)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_program_on_the_cpu_matches_the_reference(name):
    text = CORPUS[name]
    module = parse_module(text)
    compared, rejected = 0, []
    for func in module.functions():
        for special in INPUT_VARIANTS:
            inputs = function_inputs(func, seed=0, special=special)
            try:
                with np.errstate(all="ignore"):
                    want = evaluate(module, func.sym_name, inputs)
            except InterpreterError as exc:  # e.g. an integer division by zero: no numbers for these inputs
                rejected.append(f"@{func.sym_name} (special values {special}): {exc}")
                continue
            with np.errstate(all="ignore"):
                got = CpuTarget().run(parse_module(text), func.sym_name, inputs, DiagnosticEngine())
            assert_program_close(got, want, f"{name} @{func.sym_name} (special values {special})")
            compared += 1
    print("\n".join(["the reference rejected:", *rejected]) if rejected else "every input variant compared")
    assert compared, "the reference rejected every input variant:\n" + "\n".join(rejected)


def fusecc_run(*args: str, cwd: pathlib.Path) -> None:
    done = subprocess.run([str(BIN / "fusecc"), "run", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_fusecc_run_on_the_cpu_agrees_with_the_reference_on_the_encoder_block(tmp_path):
    """The command line itself: `fusecc run examples/encoder_block.ir
    --random-inputs` with `--target cpu` and with `--target reference`.
    Unscaled normal weights make this layer ill-conditioned (scores of
    ~1e4 before the softmax): seeds 0-3 differ by 2.9e-5 to 7.9e-5 of the
    output's scale, and the CPU's numbers are the closer ones to a float64
    evaluation (measured: 5.8e-5 against the reference's 8.6e-5, seed 3)."""
    program = ROOT / "examples" / "encoder_block.ir"
    fusecc_run(str(program), "--target", "cpu", "--random-inputs", "-o", "cpu.npz", cwd=tmp_path)
    fusecc_run(str(program), "--target", "reference", "--random-inputs", "-o", "reference.npz", cwd=tmp_path)
    with np.load(tmp_path / "cpu.npz") as cpu, np.load(tmp_path / "reference.npz") as reference:
        assert sorted(cpu.files) == sorted(reference.files) == ["result0"]
        assert_program_close([cpu["result0"]], [reference["result0"]], "encoder_block")


def test_fusecc_run_defaults_to_the_cpu_without_a_gpu(monkeypatch, tmp_path, capsys):
    from fusecc.driver.cuda_target import CudaTarget
    from fusecc.tools import fusecc as driver

    monkeypatch.setattr(CudaTarget, "available", lambda self: "no GPU in this test")
    assert targets.default_target_name() == "cpu"
    ran = []

    class Recording(CpuTarget):
        def prepare(self, *args):
            ran.append(self.name)
            return super().prepare(*args)

    monkeypatch.setitem(targets._TARGETS, "cpu", Recording)
    program = tmp_path / "chain.ir"
    program.write_text(CORPUS["fusion/elementwise#0"])
    assert driver.main(["run", str(program), "--random-inputs", "-o", str(tmp_path / "out.npz")]) == 0
    assert ran == ["cpu"]
