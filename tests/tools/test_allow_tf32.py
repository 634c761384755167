"""--allow-tf32 (tools/target_options.py) and the API's allow_tf32 option:
off by default, honoured by the commands that generate CUDA C, refused where
it would change nothing (docs/cuda-tensor-cores.md)."""

from __future__ import annotations

import numpy as np
import pytest

import fusecc
from fusecc.compiler.diagnostics import UsageError
from fusecc.tools import fusecc as driver

PROGRAM = """\
func.func @main(%x: tensor<17x40xf32>, %w: tensor<40x9xf32>, %b: tensor<9xf32>) -> tensor<17x9xf32> {
  %0 = tensor.matmul %x, %w : (tensor<17x40xf32>, tensor<40x9xf32>) -> tensor<17x9xf32>
  %1 = tensor.add %0, %b : (tensor<17x9xf32>, tensor<9xf32>) -> tensor<17x9xf32>
  func.return %1 : tensor<17x9xf32>
}
"""
TF32_MMA = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "linear.ir"
    path.write_text(PROGRAM)
    return path


def cli(argv, capsys) -> tuple[int, str, str]:
    code = driver.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal compiler error" not in err
    return code, out, err


def test_the_cuda_c_uses_tf32_only_with_the_flag(program, tmp_path, capsys):
    assert cli([program, "-o", tmp_path / "plain.cu"], capsys)[0] == 0
    assert cli([program, "--allow-tf32", "--arch", "sm_80", "-o", tmp_path / "tf32.cu"], capsys)[0] == 0
    assert "mma" not in (tmp_path / "plain.cu").read_text()
    assert TF32_MMA in (tmp_path / "tf32.cu").read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--target", "cpu", "--emit=fused", "--allow-tf32"], "--allow-tf32 changes GPU code; it has no effect with --target cpu"),
        (["--emit=llvm", "--allow-tf32"], "--allow-tf32 changes GPU code; it has no effect with --target cpu"),
        (["run", "--target", "reference", "--allow-tf32", "--random-inputs"], "--allow-tf32 changes GPU code; it has no effect with --target reference"),
        (["explain", "--allow-tf32"], "unrecognized arguments: --allow-tf32"),  # fusion does not depend on it
    ],
)
def test_the_flag_is_refused_where_it_changes_nothing(program, argv, message, capsys):
    argv = [*argv[:1], program, *argv[1:]] if argv[0] in ("run", "explain") else [program, *argv]
    code, _, err = cli(argv, capsys)
    assert code == 1 and message in err


def test_run_on_the_harness_with_tf32_is_sanitized_and_close(program, tmp_path, capsys):
    out = tmp_path / "out.npz"
    code, _, err = cli(["run", program, "--target", "cuda-sim", "--sanitize", "--allow-tf32", "--random-inputs", "-o", out, "-q"], capsys)
    assert code == 0, err
    assert cli(["run", program, "--target", "reference", "--random-inputs", "-o", tmp_path / "ref.npz", "-q"], capsys)[0] == 0
    got, want = np.load(out)["result0"], np.load(tmp_path / "ref.npz")["result0"]
    assert not np.array_equal(got, want)  # TF32 did round the inputs
    np.testing.assert_allclose(got, want, rtol=0, atol=2.0**-9 * 40 * 4)  # 2^-10 per product sum, |x|, |w| <~ 4, K = 40


def test_the_api_option(program):
    cpu = fusecc.compile(str(program), target="cpu", options={"allow_tf32": True})
    assert TF32_MMA in cpu.source("cuda")  # CUDA C for the default GPU, no GPU needed
    assert "mma" not in fusecc.compile(str(program), target="cpu").source("cuda")
    with pytest.raises(UsageError, match="allow_tf32 changes the CUDA code"):
        fusecc.compile(str(program), target="reference", options={"allow_tf32": True})
