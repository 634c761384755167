"""Issue 14.7: golden tests of your own. `python -m fusecc.tools.lit_config
init DIR` writes a lit.cfg.py that gives %fusecc-opt, %fusecc, %roundtrip and
FileCheck; lit then runs a user's test from a folder outside the repository,
and a wrong CHECK line fails it."""

from __future__ import annotations

import subprocess
import sys

from fusecc.tools import lit_config

USER_TEST = """\
// RUN: %fusecc-opt %s --canonicalize --cse | FileCheck %s
// RUN: %roundtrip | FileCheck %s
// RUN: %fusecc %s --emit=fused --target cpu | filecheck %s --check-prefix=FUSED
// CHECK-LABEL: func.func @main
// CHECK: tensor.add
// FUSED: fusion.
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.add %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = tensor.relu %0 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
"""


def run_lit(folder):
    return subprocess.run([sys.executable, "-c", "import sys, lit.main; sys.exit(lit.main.main())", "-v", "--no-progress-bar", str(folder)], capture_output=True, text=True)


def test_a_user_suite_runs_with_the_shipped_config(tmp_path, capsys):
    suite = tmp_path / "my_tests"
    assert lit_config.main(["init", str(suite)]) == 0
    assert "from fusecc.tools.lit_config import configure" in (suite / "lit.cfg.py").read_text()
    assert lit_config.main(["init", str(suite)]) == 1  # never overwrites
    (suite / "add.ir").write_text(USER_TEST)
    (suite / "wrong.mlir").write_text(USER_TEST.replace("// CHECK: tensor.add", "// CHECK: tensor.mul"))
    result = run_lit(suite)
    assert "PASS: fusecc-user-tests :: add.ir" in result.stdout, result.stdout + result.stderr
    assert "FAIL: fusecc-user-tests :: wrong.mlir" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 1


def test_longer_substitutions_come_before_their_prefixes():
    names = [name for name, _ in lit_config.substitutions()]
    assert names.index("%roundtrip") < names.index("%fusecc-opt") < names.index("%fusecc")
