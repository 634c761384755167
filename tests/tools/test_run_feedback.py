"""`fusecc run` tells you what happened (issue 14.4): the target and the
compile and run times on stderr, exact output names, write errors as user
errors, inputs files that explain themselves."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from fusecc.tools import fusecc as driver

PROGRAM = """\
func.func @main(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %0 = tensor.mul %x, %y : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}
"""
X = np.array([1.0, 2.0, 3.0], np.float32)
Y = np.array([4.0, 5.0, 6.0], np.float32)


@pytest.fixture
def program(tmp_path) -> pathlib.Path:
    path = tmp_path / "model.ir"
    path.write_text(PROGRAM)
    return path


def fusecc(*args, stdout=subprocess.PIPE, env=None):
    return subprocess.run(
        [sys.executable, "-m", "fusecc.tools.fusecc", "run", *map(str, args)],
        stdout=stdout, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )


def test_the_target_and_times_go_to_stderr_and_the_output_is_exactly_the_name_given(program, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=X, y=Y)
    out = tmp_path / "results"
    assert driver.main(["run", str(program), "--inputs", str(tmp_path / "in.npz"), "--target", "reference", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "fusecc run: target reference: compile " in captured.err and "(nothing to compile), run " in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz", "model.ir", "results"]
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["result0"], X * Y)


def test_quiet_prints_no_timing(program, capsys):
    assert driver.main(["run", str(program), "--random-inputs", "--target", "reference", "-q"]) == 0
    captured = capsys.readouterr()
    assert "target reference" not in captured.err and captured.out.startswith("result0: shape [3] float32")


def test_compile_time_says_whether_the_cache_served_it(program, tmp_path):
    pytest.importorskip("llvmlite.binding")
    env = {"FUSECC_CACHE_DIR": str(tmp_path / "cache")}
    first = fusecc(program, "--random-inputs", "--target", "cpu", env=env)
    second = fusecc(program, "--random-inputs", "--target", "cpu", env=env)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert "target cpu: compile" in first.stderr and "now cached)" in first.stderr
    assert "(from the cache), run " in second.stderr
    assert first.stdout == second.stdout and first.stdout.startswith("result0:")


def test_write_errors_are_user_errors(program):
    to_file = fusecc(program, "--random-inputs", "--target", "reference", "-o", "/dev/full")
    assert to_file.returncode == 1 and "could not write '/dev/full': No space left on device" in to_file.stderr
    with open("/dev/full", "w") as full:
        to_stdout = fusecc(program, "--random-inputs", "--target", "reference", stdout=full)
    assert to_stdout.returncode == 1, to_stdout.stderr
    assert "could not write to standard output: No space left on device" in to_stdout.stderr
    assert "Traceback" not in to_stdout.stderr and "Exception ignored" not in to_stdout.stderr


def test_a_missing_input_lists_the_files_keys(program, tmp_path, capsys):
    np.savez(tmp_path / "positional.npz", X, Y)  # numpy names them arr_0, arr_1
    assert driver.main(["run", str(program), "--inputs", str(tmp_path / "positional.npz"), "--target", "reference"]) == 1
    err = capsys.readouterr().err
    assert "missing input 'x' (arg0) (tensor<3xf32>)" in err
    assert "holds arr_0 (3 float32), arr_1 (3 float32)" in err and "np.savez(f, x=a) or arg0=a" in err


def test_random_inputs_fill_only_the_missing_ones_and_say_which(program, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=X, yy=Y)  # `yy`: a misspelt `y`
    out = tmp_path / "out.npz"
    assert driver.main(["run", str(program), "--inputs", str(tmp_path / "in.npz"), "--random-inputs", "--target", "reference", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "random data (seed 0) for 'y' (arg1)" in err and "'x'" not in err.split("random data")[1]
    assert "'yy' in" in err and "is not an argument of @main; ignored" in err
    with np.load(out) as saved:
        y = saved["result0"] / X  # x came from the file, y is random
    assert not np.allclose(y, Y)


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda p: p.write_bytes(b"garbage, not an archive"), "is not an .npz file (an .npz is a zip archive of arrays, written by np.savez)"),
        (lambda p: np.save(open(p, "wb"), X), "is a single array (.npy)"),
        (lambda p: np.savez(p, x=np.array([{"a": 1}, None], dtype=object)), "holds an array of Python objects"),
        (lambda p: p.write_bytes(b"PK\x03\x04" + bytes(40)), "is a damaged .npz"),
    ],
    ids=["garbage", "npy", "pickled", "truncated-zip"],
)
def test_a_bad_inputs_file_gets_a_plain_message(program, tmp_path, capsys, write, message):
    path = tmp_path / "in.npz"
    write(path)
    assert driver.main(["run", str(program), "--inputs", str(path), "--target", "reference"]) == 1
    err = capsys.readouterr().err
    assert message in err and "pickle" not in err.replace("Python objects", "")


def test_threads_sets_the_cpu_runtimes_worker_count(program, monkeypatch, capsys):
    monkeypatch.setenv("FUSECC_CPU_WORKERS", "")
    assert driver.main(["run", str(program), "--random-inputs", "--target", "reference", "--threads", "3"]) == 0
    assert os.environ["FUSECC_CPU_WORKERS"] == "3"
    assert driver.main(["run", str(program), "--random-inputs", "--threads", "0"]) == 1
    assert "--threads must be at least 1" in capsys.readouterr().err


def test_lossy_conversions_are_made_with_a_warning_that_says_how_much(program, tmp_path, capsys):
    x64 = np.array([0.1, 0.2, 1e-9], np.float64)  # not exact in f32
    np.savez(tmp_path / "in.npz", x=x64, y=np.ones(3, np.float64))  # ones are exact: no warning for y
    out = tmp_path / "out.npz"
    assert driver.main(["run", str(program), "--inputs", str(tmp_path / "in.npz"), "--target", "reference", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "fusecc run: warning: input 'x' (arg0) of @main is float64 and becomes f32: 3 of 3 values change (by up to" in err
    assert "'y' (arg1)" not in err
    with np.load(out) as saved:
        assert saved["result0"].dtype == np.float32
        np.testing.assert_array_equal(saved["result0"], x64.astype(np.float32))


def test_int64_inputs_that_fit_pass_quietly_and_those_that_do_not_warn(tmp_path, capsys):
    path = tmp_path / "ids.ir"
    path.write_text(PROGRAM.replace("f32", "i32"))
    np.savez(tmp_path / "fits.npz", x=np.arange(3, dtype=np.int64), y=np.ones(3, np.int64))
    assert driver.main(["run", str(path), "--inputs", str(tmp_path / "fits.npz"), "--target", "reference", "-q"]) == 0
    assert capsys.readouterr().err == ""
    np.savez(tmp_path / "big.npz", x=np.array([1, 2, 1 << 40]), y=np.ones(3, np.int64))
    assert driver.main(["run", str(path), "--inputs", str(tmp_path / "big.npz"), "--target", "reference", "-q"]) == 0
    assert "input 'x' (arg0) of @main is int64 and becomes i32: 1 of 3 values change" in capsys.readouterr().err


@pytest.mark.parametrize("tool, args", [("fusecc.tools.fusecc", ["--emit=tensor"]), ("fusecc.tools.opt", [])], ids=["fusecc", "fusecc-opt"])
def test_the_compilers_standard_output_write_errors_are_user_errors(program, tool, args):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", tool, str(program), *args], stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 1 and "could not write to standard output: No space left on device" in proc.stderr
    assert "internal compiler error" not in proc.stderr
