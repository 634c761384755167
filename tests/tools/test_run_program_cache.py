"""`fusecc run` of an ONNX model on the CPU goes through fusecc.compile and
its disk cache of compiled programs (tools/run_command.py,
driver/program_cache.py): a second run in a new process neither imports the
onnx package nor runs a pass, and gives the same results."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("llvmlite")

from tests.api.test_program_cache import expected, write_model  # noqa: E402

# A fresh process: counts the passes run and says whether onnx was imported.
CHILD = r"""
import json, sys
from fusecc.compiler import pass_manager
passes = []
run_pass = pass_manager._run_pass
pass_manager._run_pass = lambda p, *rest: (passes.append(p.name), run_pass(p, *rest))[1]
from fusecc.tools.fusecc import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "passes": len(passes), "onnx": "onnx" in sys.modules}))
"""


def fusecc_run(tmp_path, *argv: str) -> tuple[dict, str]:
    env = dict(os.environ, FUSECC_CACHE_DIR=str(tmp_path / "cache"), FUSECC_PROGRESS="0")
    env.pop("FUSECC_VERIFY_EACH", None)
    done = subprocess.run([sys.executable, "-c", CHILD, "run", *argv], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_a_warm_run_loads_the_compiled_program_and_runs_no_pass(tmp_path):
    path = write_model(tmp_path / "m.onnx")
    x = np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64)
    np.savez(tmp_path / "in.npz", x=x)
    outputs = []
    for name in ("cold", "warm"):
        out = tmp_path / f"{name}.npz"
        report, stderr = fusecc_run(tmp_path, path, "--target", "cpu", "--inputs", str(tmp_path / "in.npz"), "-o", str(out))
        outputs.append((report, stderr, np.load(out)["y"]))
    (cold, cold_err, cold_y), (warm, warm_err, warm_y) = outputs
    assert cold["code"] == warm["code"] == 0
    assert cold["passes"] > 0 and "now cached" in cold_err
    assert warm["passes"] == 0, "a warm `fusecc run` must not run the passes"
    assert warm["onnx"] is False, "a warm `fusecc run` must not import the onnx package"
    assert "(from the cache)" in warm_err
    np.testing.assert_array_equal(warm_y, cold_y)
    np.testing.assert_allclose(warm_y, expected(), rtol=1e-5, atol=1e-5)


def test_other_shapes_compile_again(tmp_path):
    path = write_model(tmp_path / "m.onnx", rows="N")
    first, _ = fusecc_run(tmp_path, path, "--target", "cpu", "--shape", "x=4x64", "--random-inputs", "-q")
    other, _ = fusecc_run(tmp_path, path, "--target", "cpu", "--shape", "x=2x64", "--random-inputs", "-q")
    again, _ = fusecc_run(tmp_path, path, "--target", "cpu", "--shape", "x=4x64", "--random-inputs", "-q")
    assert first["passes"] > 0 and other["passes"] > 0 and again["passes"] == 0


def test_missing_and_unknown_inputs_are_named_on_a_warm_run(tmp_path, capsys, monkeypatch):
    from fusecc.driver import program_cache
    from fusecc.tools.fusecc import main

    monkeypatch.setenv("FUSECC_CACHE_DIR", str(tmp_path / "cache"))
    path = write_model(tmp_path / "m.onnx")
    assert main(["run", path, "--target", "cpu", "--random-inputs", "-q"]) == 0
    program_cache.wait_for_stores()
    np.savez(tmp_path / "in.npz", z=np.zeros(3, np.float32))
    assert main(["run", path, "--target", "cpu", "--inputs", str(tmp_path / "in.npz")]) == 1
    err = capsys.readouterr().err
    assert "missing input 'x' (arg0) (tensor<4x64xf32>)" in err and "Traceback" not in err
