"""`fusecc profile` on the command line (issue 14.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

PROGRAM = """\
func.func @main(%x: tensor<64x256xf32>, %y: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %a = tensor.exp %x : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %b = tensor.add %a, %y {fusion.forbid = true} : (tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
  func.return %b : tensor<64x256xf32>
}
"""


def fusecc(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fusecc.tools.fusecc", "profile", *map(str, args)], capture_output=True, text=True, env={**os.environ, **(env or {})})


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "model.ir"
    path.write_text(PROGRAM)
    return path


def test_text_report_lists_kernels_and_unfused_patterns(program):
    result = fusecc(program, "--repeat", "2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "fused_0_elementwise" in out and "fused_1_elementwise" in out
    assert f"(line:col of {program})" in out and "%b add (3:3)" in out
    assert "unfused patterns" in out and "remove {fusion.forbid = true} from %b" in out


def test_json_inputs_and_trace(program, tmp_path):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.zeros((64, 256), np.float32), y=np.ones((64, 256), np.float32))
    trace = tmp_path / "trace.json"
    result = fusecc(program, "--inputs", inputs, "--trace", trace, "--json", "--repeat", "1")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["agrees"] and [k["name"] for k in data["kernels"]] == ["fused_0_elementwise", "fused_1_elementwise"]
    events = json.loads(trace.read_text())["traceEvents"]
    assert [e["name"] for e in events if e["ph"] == "X"] == ["fused_0_elementwise", "fused_1_elementwise"]


def test_plot_without_matplotlib_says_how_to_install(program, tmp_path):
    blocker = tmp_path / "blocked"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    result = fusecc(program, "--plot", tmp_path / "r.png", env={"PYTHONPATH": str(blocker) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert result.returncode == 1
    assert "matplotlib" in result.stderr and "fusecc[plot]" in result.stderr
    assert not (tmp_path / "r.png").exists()


def test_plot_draws_a_png(program, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "roofline.png"
    result = fusecc(program, "--plot", png, "--repeat", "1")
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--target", "reference"], "unknown target 'reference'"),
        (["--target", "cpu", "--gpu", "h200"], "--gpu tunes GPU code"),
        (["--threads", "2", "--target", "cuda-sim"], "no effect with --target cuda-sim"),
        (["--repeat", "0"], "--repeat must be at least 1"),
    ],
)
def test_flags_that_make_no_sense_are_usage_errors(program, flags, message):
    result = fusecc(program, *flags)
    assert result.returncode == 1
    assert message in result.stderr


def test_bad_program_is_a_located_error(tmp_path):
    bad = tmp_path / "bad.ir"
    bad.write_text("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = tensor.nosuch %x : (tensor<4xf32>) -> tensor<4xf32>\n  func.return %0 : tensor<4xf32>\n}\n")
    result = fusecc(bad)
    assert result.returncode == 1
    assert f"{bad}:2:" in result.stderr and "Traceback" not in result.stderr


def test_a_roof_above_100_percent_is_explained_by_what_bounds_the_kernel(program):
    from fusecc.driver.profile import format_profile

    result = fusecc(program, "--repeat", "2", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    first = data["kernels"][0]
    first.update(bound="compute", roofline_fraction=1.16)
    text = format_profile(data)
    assert "compute-bound: faster than the" in text and "the rate its cost model assumes" in text
    assert "roof above 100%, memory-bound" not in text  # the other kernels are under their roof
    first.update(bound="memory")
    assert "memory-bound: the kernel's data came from cache" in format_profile(data)
