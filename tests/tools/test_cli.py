"""`fusecc run` and `fusecc-opt` from the command line: inputs by name or
position, shape errors, entries, several results, targets, files and stdin."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from fusecc.compiler.parser import parse_module
from fusecc.driver import targets
from fusecc.runtime.reference import evaluate
from fusecc.tools import fusecc as driver
from fusecc.tools import opt

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
BIN = pathlib.Path(sys.executable).parent

PROGRAM = """\
func.func @first(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = tensor.neg %x : (tensor<3xf32>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}
func.func @main(%x: tensor<3xf32>, %1: tensor<2x3xf32>, %mask: tensor<3xi1>) -> (tensor<2x3xf32>, tensor<f32>) {
  %sum = tensor.add %1, %x : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %zero = tensor.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %picked = tensor.select %mask, %sum, %zero : (tensor<3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %total = tensor.reduce_sum %picked : (tensor<2x3xf32>) -> tensor<f32>
  func.return %picked, %total : tensor<2x3xf32>, tensor<f32>
}
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "model.ir"
    path.write_text(PROGRAM)
    return path


def run(argv, capsys):
    code = driver.main(["run", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


X = np.array([1.0, 2.0, 3.0], np.float32)
Y = np.arange(6, dtype=np.float32).reshape(2, 3)
MASK = np.array([True, False, True])


def test_inputs_by_name_and_by_position(program, tmp_path, capsys):
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, x=X, arg1=Y, mask=MASK)  # %1 has no name: it is read as arg1
    code, stdout, err = run([program, "--inputs", inputs, "-o", out, "--target", "reference"], capsys)
    assert code == 0 and err.startswith("fusecc run: target reference: compile") and err.count("\n") == 1  # only the timing line
    with np.load(out) as results:
        assert sorted(results.files) == ["result0", "result1"]
        expected = evaluate(parse_module(PROGRAM), "main", [X, Y, MASK])
        np.testing.assert_array_equal(results["result0"], expected[0])
        assert results["result1"].shape == () and results["result1"] == expected[1]


def test_names_win_over_positions_and_unused_inputs_are_reported(program, tmp_path, capsys):
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, x=X, arg0=np.zeros(3, np.float32), arg1=Y, mask=MASK, extra=X)
    code, _, err = run([program, "--inputs", inputs, "-o", out, "--target", "reference"], capsys)
    assert code == 0
    assert "warning: 'arg0' in" in err and "warning: 'extra' in" in err
    with np.load(out) as results:
        np.testing.assert_array_equal(results["result0"], evaluate(parse_module(PROGRAM), "main", [X, Y, MASK])[0])


def test_wrong_shape_is_a_clear_error(program, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.zeros(4, np.float32), arg1=Y, mask=MASK)
    code, _, err = run([program, "--inputs", inputs, "--target", "reference"], capsys)
    assert code == 1
    assert err.strip() == "fusecc run: error: input 'x' (arg0) of @main has shape [4], but tensor<3xf32> needs [3]"


def test_missing_inputs_and_random_fill(program, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=X)
    code, _, err = run([program, "--inputs", inputs, "--target", "reference"], capsys)
    assert code == 1 and f"missing input 'arg1' (tensor<2x3xf32>); '{inputs}' holds x (3 float32); give it in --inputs" in err
    code, out, err = run([program, "--inputs", inputs, "--random-inputs", "--target", "reference"], capsys)
    assert code == 0
    assert out.splitlines()[0].startswith("result0: shape [2, 3] float32 [")
    assert out.splitlines()[1].startswith("result1: shape [] float32 [")
    # Seeded: the same seed gives the same numbers, another seed others.
    assert run([program, "--random-inputs", "--target", "reference"], capsys)[1] == run([program, "--random-inputs", "--target", "reference"], capsys)[1]
    assert run([program, "--random-inputs", "--seed", "1", "--target", "reference"], capsys)[1] != out


def test_entry_selection(program, tmp_path, capsys):
    code, out, _ = run([program, "--entry", "first", "--random-inputs", "--target", "reference"], capsys)
    assert code == 0 and out.startswith("result0: shape [3] float32")
    code, out, _ = run([program, "--entry", "@first", "--random-inputs", "--target", "reference"], capsys)
    assert code == 0
    code, _, err = run([program, "--entry", "nope", "--random-inputs", "--target", "reference"], capsys)
    assert code == 1 and "no function @nope (functions: @first, @main)" in err
    no_main = tmp_path / "no_main.ir"
    no_main.write_text(PROGRAM.replace("@main", "@second"))
    code, out, _ = run([no_main, "--random-inputs", "--target", "reference"], capsys)
    assert code == 0 and out.startswith("result0: shape [3]")  # the first function


def test_target_errors(program, capsys, monkeypatch):
    code, _, err = run([program, "--random-inputs", "--target", "tpu"], capsys)
    assert code == 1 and err.startswith("fusecc run: error: unknown target 'tpu'; choose one of reference")

    class Unavailable(targets.Target):
        name = "elsewhere"

        def available(self):
            return "target 'elsewhere' cannot run here; use --target reference"

    monkeypatch.setitem(targets._TARGETS, "elsewhere", Unavailable)
    code, _, err = run([program, "--random-inputs", "--target", "elsewhere"], capsys)
    assert code == 1 and "target 'elsewhere' cannot run here; use --target reference" in err


def test_bad_files(program, tmp_path, capsys):
    code, _, err = run([tmp_path / "missing.ir", "--random-inputs"], capsys)
    assert code == 1 and "could not open input file" in err
    not_npz = tmp_path / "in.npz"
    not_npz.write_text("hello")
    code, _, err = run([program, "--inputs", not_npz, "--target", "reference"], capsys)
    assert code == 1 and "is not an .npz file" in err
    npy = tmp_path / "in.npy"
    np.save(npy, X)
    code, _, err = run([program, "--inputs", npy, "--target", "reference"], capsys)
    assert code == 1 and "is a single array (.npy)" in err
    code, _, err = run([program, "--inputs", tmp_path / "absent.npz", "--target", "reference"], capsys)
    assert code == 1 and "could not open inputs file" in err
    strings = tmp_path / "strings.npz"
    np.savez(strings, x=np.array(["a", "b", "c"]), arg1=Y, mask=MASK)
    code, _, err = run([program, "--inputs", strings, "--target", "reference"], capsys)
    assert code == 1 and "has dtype <U1, which cannot become f32" in err


def test_runtime_errors_are_user_errors(tmp_path, capsys):
    recursive = tmp_path / "loop.ir"
    recursive.write_text(
        "func.func @loop(%x: tensor<f32>) -> tensor<f32> {\n"
        "  %0 = func.call @loop(%x) : (tensor<f32>) -> tensor<f32>\n"
        "  func.return %0 : tensor<f32>\n}\n"
    )
    code, _, err = run([recursive, "--random-inputs", "--target", "reference"], capsys)
    assert code == 1 and "@loop calls itself" in err


def test_opt_reads_files_and_writes_output(program, tmp_path, capsys):
    out = tmp_path / "out.ir"
    assert opt.main([str(program), "-o", str(out)]) == 0
    assert out.read_text().startswith("module {\n  func.func @first(%x: tensor<3xf32>)")
    assert opt.main([str(tmp_path / "absent.ir")]) == 1
    assert "fusecc-opt: error: could not open input file" in capsys.readouterr().err
    assert opt.main([str(tmp_path)]) == 1
    assert "it is a directory" in capsys.readouterr().err


def test_readme_command_runs_the_mlp_example():
    """The README's first command, through the installed console script."""
    proc = subprocess.run(
        [str(BIN / "fusecc"), "run", "examples/mlp.ir", "--random-inputs"], cwd=ROOT, capture_output=True, text=True, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("result0: shape [128, 768] float32 [")


def test_opt_reads_stdin_through_the_console_script():
    proc = subprocess.run([str(BIN / "fusecc-opt"), "-"], input=PROGRAM, capture_output=True, text=True)
    assert proc.returncode == 0 and "func.func @main(%x: tensor<3xf32>, %arg0: tensor<2x3xf32>" in proc.stdout
    proc = subprocess.run([str(BIN / "fusecc-opt"), "-"], input="func.func @f( {", capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("<stdin>:1:15: error: expected")


def test_a_bug_outside_passes_is_an_internal_error_naming_the_phase(capsys, monkeypatch, program):
    import fusecc.tools.opt as opt_module

    def broken_printer(*args, **kwargs):
        raise KeyError("no such value")

    monkeypatch.setattr(opt_module, "print_op", broken_printer)
    assert opt.main([str(program)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fusecc-opt: internal compiler error in the printer: KeyError: 'no such value'")
    assert "FUSECC_DEBUG=1" in err and "Traceback" not in err
    monkeypatch.setenv("FUSECC_DEBUG", "1")
    with pytest.raises(Exception, match="internal compiler error in the printer"):
        opt.main([str(program)])
