"""`fusecc bisect` on the command line (issue 14.2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

PROGRAM = """\
func.func @main(%x: tensor<8x16xf32>, %y: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %a = tensor.exp %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %b = tensor.add %a, %y {fusion.forbid = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %b : tensor<8x16xf32>
}
"""


def fusecc(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fusecc.tools.fusecc", *map(str, args)], capture_output=True, text=True, cwd=cwd)


@pytest.fixture
def files(tmp_path):
    program = tmp_path / "model.ir"
    program.write_text(PROGRAM)
    inputs = tmp_path / "in.npz"
    rng = np.random.default_rng(0)
    np.savez(inputs, x=rng.standard_normal((8, 16)).astype(np.float32), y=rng.standard_normal((8, 16)).astype(np.float32))
    return program, inputs


def test_agreeing_target_writes_nothing(files, tmp_path):
    program, inputs = files
    result = fusecc("bisect", program, "--inputs", inputs, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "agrees with the reference" in result.stdout
    assert not list(tmp_path.glob("*.reproducer.*"))


def test_planted_fault_is_found_and_the_reproducer_runs(files, tmp_path):
    program, inputs = files
    result = fusecc("bisect", program, "--inputs", inputs, "--insert-pass", "lower-to-loops:test-inject-fault{group=1}", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["group"]["id"] == 1 and data["culprit"] == "test-inject-fault"
    repro = tmp_path / "model.reproducer.ir"
    assert data["reproducer"] == "model.reproducer.ir" and repro.exists() and (tmp_path / "model.reproducer.npz").exists()
    assert "tensor.add" in repro.read_text() and "tensor.exp" not in repro.read_text()
    # the reproducer is a program of its own: it runs, and without the planted pass it is right
    out = tmp_path / "out.npz"
    run = fusecc("run", repro, "--inputs", tmp_path / "model.reproducer.npz", "--target", "cpu", "-o", out, "-q")
    assert run.returncode == 0, run.stderr
    saved = np.load(tmp_path / "model.reproducer.npz")
    np.testing.assert_allclose(np.load(out)["result0"], saved["a"] + saved["y"], rtol=1e-6)


def test_text_report_names_group_pass_and_reproducer(files, tmp_path):
    program, inputs = files
    repro = tmp_path / "r.ir"
    result = fusecc("bisect", program, "--inputs", inputs, "--insert-pass", "tile:test-inject-fault{group=0}", "-o", repro)
    assert result.returncode == 0, result.stderr
    assert "fusion group 0 (elementwise)" in result.stdout
    assert "test-inject-fault{group=0}" in result.stdout and "<- first change" in result.stdout
    assert f"reproducer: {repro}" in result.stdout and repro.exists() and (tmp_path / "r.npz").exists()


@pytest.mark.parametrize(
    "flags,message",
    [
        ([], "needs the inputs"),
        (["--random-inputs", "--target", "reference"], "unknown target 'reference'"),
        (["--random-inputs", "--insert-pass", "nocolon"], "write AFTER:PASS"),
        (["--random-inputs", "--insert-pass", "tile:nosuch-pass"], "unknown pass 'nosuch-pass'"),
        (["--random-inputs", "--insert-pass", "nosuch:cse"], "cannot insert 'cse' after 'nosuch'"),
        (["--random-inputs", "--rtol", "0"], "--rtol must be positive"),
    ],
)
def test_usage_errors(files, flags, message):
    program, _ = files
    result = fusecc("bisect", program, *flags)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
